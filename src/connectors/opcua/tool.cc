// `kayak tool opcua ENDPOINT [--node ID] [--depth N] [--username USER]
// [--security-policy P --certificate F --private-key F [--security-mode M]
// [--server-certificate F]]`: the opcua input's browser. Connects as the
// input does (SecurityPolicy None unless given),
// walks the hierarchical references down from a node (Objects, i=85, unless
// --node says) and prints one line per node with its NodeId, class and name,
// and for a variable its current value: what to put in `nodes`. The password
// comes from the environment (KAYAK_OPCUA_PASSWORD), never the command line.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "connectors/opcua/client.h"

namespace kayak::opcua {

namespace {

constexpr int kMaxLines = 5000;

const char* ClassName(uint32_t c) {
  switch (c) {
    case 1:
      return "Object";
    case 2:
      return "Variable";
    case 4:
      return "Method";
    case 8:
      return "ObjectType";
    case 16:
      return "VariableType";
    case 32:
      return "ReferenceType";
    case 64:
      return "DataType";
    case 128:
      return "View";
    default:
      return "Node";
  }
}

struct Walk {
  Session* session;
  int max_depth;
  int lines = 0;
  std::vector<NodeId> seen;  // a node reached twice is printed once

  Status Visit(const NodeId& node, int depth) {
    std::vector<Session::Reference> refs;
    KAYAK_RETURN_IF_ERROR(session->Browse(node, &refs));
    std::vector<NodeId> variables;
    for (const auto& r : refs) {
      if (r.node_class == 2) variables.push_back(r.id);
    }
    std::vector<std::string> values;
    if (!variables.empty()) KAYAK_RETURN_IF_ERROR(session->Read(variables, &values));
    size_t v = 0;
    for (const auto& r : refs) {
      if (lines >= kMaxLines) return Status::Ok();
      bool again = false;
      for (const auto& s : seen) again = again || s == r.id;
      std::string line(static_cast<size_t>(depth) * 2, ' ');
      line += FormatNodeId(r.id) + "  " + ClassName(r.node_class) + "  " + r.browse_name;
      if (r.node_class == 2 && v < values.size()) line += "  {" + values[v++] + "}";
      std::printf("%s%s\n", line.c_str(), again ? "  (again)" : "");
      ++lines;
      if (again) continue;
      seen.push_back(r.id);
      if (depth < max_depth && (r.node_class == 1 || r.node_class == 2)) {
        KAYAK_RETURN_IF_ERROR(Visit(r.id, depth + 1));
      }
    }
    return Status::Ok();
  }
};

int Usage(const std::string& problem) {
  std::fprintf(stderr,
               "kayak tool opcua: %s\nusage: kayak tool opcua ENDPOINT [--node ID] [--depth N] "
               "[--username USER] [--security-policy POLICY --certificate FILE --private-key "
               "FILE [--security-mode Sign|SignAndEncrypt] [--server-certificate FILE]]   "
               "(password: $KAYAK_OPCUA_PASSWORD)\n",
               problem.c_str());
  return 2;
}

}  // namespace

int BrowseTool(const std::vector<std::string>& args) {
  SessionOptions so;
  NodeId start = NodeId::Numeric(0, 85);  // Objects
  int depth = 3;
  std::string endpoint, why, policy, mode = "SignAndEncrypt", cert, key;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool has_value = i + 1 < args.size();
    if (a == "--node" && has_value) {
      if (!ParseNodeId(args[++i], &start, &why)) return Usage(why);
    } else if (a == "--depth" && has_value) {
      depth = std::atoi(args[++i].c_str());
      if (depth < 1 || depth > 20) return Usage("--depth takes 1 to 20");
    } else if (a == "--username" && has_value) {
      so.username = args[++i];
    } else if (a == "--security-policy" && has_value) {
      policy = args[++i];
    } else if (a == "--security-mode" && has_value) {
      mode = args[++i];
    } else if (a == "--certificate" && has_value) {
      cert = args[++i];
    } else if (a == "--private-key" && has_value) {
      key = args[++i];
    } else if (a == "--server-certificate" && has_value) {
      so.server_trust_file = args[++i];
    } else if (endpoint.empty() && a.rfind("--", 0) != 0) {
      endpoint = a;
    } else {
      return Usage("unknown argument '" + a + "'");
    }
  }
  if (endpoint.empty()) return Usage("give the server's endpoint URL");
  if (!ParseEndpoint(endpoint, &so.endpoint, &why)) return Usage(why);
  if (!policy.empty() && policy != "None") {
    so.policy = FindPolicy(policy);
    if (so.policy == nullptr) return Usage("no security policy '" + policy + "'");
    if (mode != "Sign" && mode != "SignAndEncrypt") {
      return Usage("--security-mode takes Sign or SignAndEncrypt");
    }
    so.mode = mode == "Sign" ? kModeSign : kModeSignAndEncrypt;
    if (cert.empty() || key.empty()) return Usage("--security-policy needs --certificate and --private-key");
    auto identity = std::make_shared<Identity>();
    const Status st = LoadIdentity(cert, key, identity.get());
    if (!st.ok()) return Usage(st.message());
    so.identity = std::move(identity);
  }
  if (!so.username.empty()) {
    const char* pw = std::getenv("KAYAK_OPCUA_PASSWORD");
    if (pw == nullptr) return Usage("set KAYAK_OPCUA_PASSWORD to the user's password");
    so.password = pw;
  }
  so.session_name = "kayak tool opcua";
  Session session(so);
  Status st = session.Open();
  Walk walk{&session, depth};
  if (st.ok()) {
    std::printf("%s\n", FormatNodeId(start).c_str());
    st = walk.Visit(start, 1);
  }
  if (!st.ok()) {
    std::fprintf(stderr, "kayak tool opcua: %s: %s\n", endpoint.c_str(), st.message().c_str());
    return 1;
  }
  if (walk.lines >= kMaxLines) {
    std::printf("... (stopped at %d lines: start lower with --node or lower --depth)\n", kMaxLines);
  }
  return 0;
}

}  // namespace kayak::opcua
