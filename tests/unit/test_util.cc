#include "test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <fstream>

namespace kayak::testing {

std::unique_ptr<Transform> MakeTransform(const std::string& yaml, const Clock* clock,
                                         BucketRegistry* buckets, std::string* errors_out,
                                         PartitionOwner* partitions) {
  YAML::Node node = YAML::Load(yaml);
  const std::string type = node.begin()->first.Scalar();
  const ComponentDef* def = BuiltinComponents().Find("transform", type);
  ErrorList errors;
  std::unique_ptr<Transform> t;
  if (def == nullptr) {
    errors.Add(SourceMark{"test", 1, 1}, "unknown transform " + type);
  } else {
    YAML::Node value = node.begin()->second;
    SourceMark mark{"test.yaml", 1, 1};
    if (ValidateShape(*def, value, mark, &errors)) {
      YamlOptions opts(def, value, mark, &errors);
      ComponentContext ctx;
      ctx.clock = clock;
      ctx.buckets = buckets;
      ctx.partitions = partitions;
      ComponentStats card("t", "transform", type);
      ctx.stats = &card;
      t = def->make_transform(opts, ctx);
    }
  }
  if (!errors.empty()) t.reset();
  if (errors_out != nullptr) *errors_out = errors.ToString();
  return t;
}

Batch MakeBatch(const std::vector<std::string>& payloads, int64_t ts_ms) {
  Batch b;
  for (const auto& p : payloads) b.messages.emplace_back(p, ts_ms);
  return b;
}

std::vector<std::string> Payloads(Batch& b) {
  std::vector<std::string> out;
  for (auto& m : b.messages) out.push_back(m.payload());
  return out;
}

Json FieldsOf(Message& m) { return Json::parse(m.payload()); }

bool KernelAllowsIoUring() {
  std::ifstream f("/proc/sys/kernel/io_uring_disabled");
  int v = 0;
  if (f >> v) return v == 0 || (v == 1 && ::geteuid() == 0);
  return true;  // kernels before 6.6 have no switch
}

int FreeLoopbackPort(int socktype) {
  const int fd = ::socket(AF_INET, socktype, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace kayak::testing
