#include "connectors/opcua/client.h"

#include <algorithm>
#include <memory>

#include "common/json_text.h"

namespace kayak::opcua {

namespace {

constexpr uint32_t kTokenAnonymous = 0, kTokenUserName = 1, kTokenCertificate = 2;
constexpr std::string_view kDefaultApplicationUri = "urn:kayak:opcua-input";
constexpr uint32_t kAttributeValue = 13;
constexpr uint32_t kTimestampsBoth = 2;
constexpr uint32_t kMonitoringReporting = 2;
constexpr double kSessionTimeoutMs = 60000;
constexpr uint32_t kKeepAliveCount = 10;
constexpr uint32_t kLifetimeCount = 60;  // 6 keep-alives without a Publish: the server drops it
constexpr uint32_t kMaxNotificationsPerPublish = 10000;
constexpr size_t kItemsPerCall = 500;

// The legacy encrypted secret of Part 4, 7.36.2.2: the length, the password
// and the server's nonce, RSA-OAEP encrypted with the public key of the
// server's certificate.
Status EncryptPassword(const std::string& certificate_der, const Policy& policy,
                       const std::string& password, const std::string& nonce, std::string* out) {
  EvpKey key(nullptr, EVP_PKEY_free);
  const Status st = PublicKey(certificate_der, &key);
  if (!st.ok()) return Status::Invalid("the password cannot be encrypted: " + st.message());
  std::string plain;
  Writer w(&plain);
  w.U32(static_cast<uint32_t>(password.size() + nonce.size()));
  plain += password;
  plain += nonce;
  return Encrypt(policy, key.get(), plain, out);
}

void WriteClientDescription(Writer* w, std::string_view application_uri) {
  w->String(application_uri);
  w->String("urn:kayak");              // product URI
  w->Byte(0x02);                       // LocalizedText with text only
  w->String("kayak");
  w->I32(1);        // application type: client
  w->NullString();  // gateway server URI
  w->NullString();  // discovery profile URI
  w->NullArray();   // discovery URLs
}

void SkipApplicationDescription(Reader* r) {
  r->SkipString();
  r->SkipString();
  r->SkipLocalizedText();
  r->I32();
  r->SkipString();
  r->SkipString();
  r->SkipStringArray();
}

// The parts of an EndpointDescription a client chooses by.
struct EndpointInfo {
  std::string url;
  std::string certificate;
  uint32_t mode = 0;
  std::string policy;
  struct Token {
    std::string policy_id;
    uint32_t type = 0;
    std::string policy_uri;
  };
  std::vector<Token> tokens;
};

EndpointInfo ReadEndpoint(Reader* r) {
  EndpointInfo e;
  e.url = std::string(r->String());
  SkipApplicationDescription(r);
  e.certificate = std::string(r->String());
  e.mode = r->U32();
  e.policy = std::string(r->String());
  const size_t n = r->ArrayLength(4 * 5);
  for (size_t i = 0; i < n && !r->failed(); ++i) {
    EndpointInfo::Token t;
    t.policy_id = std::string(r->String());
    t.type = r->U32();
    r->SkipString();  // issued token type
    r->SkipString();  // issuer endpoint URL
    t.policy_uri = std::string(r->String());
    e.tokens.push_back(std::move(t));
  }
  r->SkipString();  // transport profile
  r->Byte();        // security level
  return e;
}

std::string ModeName(uint32_t mode) {
  switch (mode) {
    case 1:
      return "None";
    case 2:
      return "Sign";
    case 3:
      return "SignAndEncrypt";
    default:
      return "mode " + std::to_string(mode);
  }
}

std::string PolicyName(std::string_view uri) {
  const size_t hash = uri.rfind('#');
  return std::string(hash == std::string_view::npos ? uri : uri.substr(hash + 1));
}

}  // namespace

Subscriber::Subscriber(SubscriberOptions options) : o_(std::move(options)), session_(o_.session) {
  for (const auto& node : o_.node_texts) {
    std::string prefix = "{\"node\":";
    jtext::AppendString(&prefix, node);
    prefix.push_back(',');
    prefixes_.push_back(std::move(prefix));
  }
}

std::string Session::Header(uint32_t timeout_ms) {
  std::string body;
  Writer w(&body);
  w.RequestHeader(auth_token_, NowTicks(), ++request_handle_, timeout_ms);
  return body;
}

Status Subscriber::Lost(const std::string& why) {
  session_.Abort();
  subscription_id_ = 0;
  publishes_.clear();
  acks_.clear();
  stash_.clear();
  return Status::Unavailable(why);
}

Status Session::Open() {
  Abort();
  // Discovery on a None channel, which servers keep open for it.
  channel_.Secure(ChannelSecurity{});
  KAYAK_RETURN_IF_ERROR(channel_.Open(o_.endpoint));
  Status st = CheckEndpoints();
  if (st.ok() && o_.policy != nullptr) {
    channel_.Close();
    st = OpenSecure();
  }
  if (st.ok()) st = CreateSession();
  if (st.ok()) st = ActivateSession();
  if (!st.ok()) Abort();
  return st;
}

Status Session::OpenSecure() {
  server_thumbprint_ = Hex(Thumbprint(server_certificate_));
  std::string why;
  if (!o_.server_trust_file.empty() &&
      !TrustCertificate(server_certificate_, o_.server_trust_file, &why)) {
    return Status::Invalid(why);
  }
  channel_.Secure(ChannelSecurity{o_.policy, o_.mode, o_.identity, server_certificate_});
  const Status st = channel_.Open(o_.endpoint);
  if (st.ok()) return st;
  for (const char* refusal : {"BadSecurityChecksFailed", "BadCertificate"}) {
    if (st.message().find(refusal) != std::string::npos) {
      return Status::Unavailable(
          st.message() + "; the server may not trust kayak's certificate (SHA-1 " +
          Hex(Thumbprint(o_.identity->certificate)) + "): add it to the server's trusted ones");
    }
  }
  return st;
}

void Session::Abort() {
  channel_.Abort();
  auth_token_ = NodeId{};
}

Status Subscriber::Connect() {
  subscription_id_ = 0;
  publishes_.clear();
  acks_.clear();
  stash_.clear();
  last_sequence_ = 0;
  publish_target_ = 3;
  Status st = session_.Open();
  if (st.ok()) st = CreateSubscription();
  if (st.ok()) st = CreateItems();
  for (size_t i = 0; st.ok() && i < publish_target_; ++i) st = SendPublish();
  if (!st.ok()) {
    session_.Abort();
    subscription_id_ = 0;
    return st;
  }
  last_heard_ms_ = SteadyMs();
  return Status::Ok();
}

// A service's answer: its type checked, a fault or a bad result named.
static Status Expect(const Response& resp, uint32_t type, const char* service, Reader* r) {
  if (resp.type_id == type_id::kServiceFault) {
    return Status::Unavailable(std::string(service) +
                               " failed: " + StatusName(r->ResponseHeader()));
  }
  if (resp.type_id != type) {
    return Status::Unavailable(std::string(service) + " was answered with type " +
                               std::to_string(resp.type_id));
  }
  const uint32_t result = r->ResponseHeader();
  if (IsBad(result)) {
    return Status::Unavailable(std::string(service) + " failed: " + StatusName(result));
  }
  return Status::Ok();
}

Status Session::CheckEndpoints() {
  std::string body = Header(static_cast<uint32_t>(o_.timeout_ms));
  Writer w(&body);
  w.String(o_.endpoint.url);
  w.NullArray();  // locale ids
  w.NullArray();  // profile URIs
  Response resp;
  KAYAK_RETURN_IF_ERROR(channel_.Call(type_id::kGetEndpointsRequest, body, &resp));
  Reader r(resp.body);
  KAYAK_RETURN_IF_ERROR(Expect(resp, type_id::kGetEndpointsResponse, "GetEndpoints", &r));
  const size_t n = r.ArrayLength(16);
  std::vector<EndpointInfo> endpoints;
  for (size_t i = 0; i < n && !r.failed(); ++i) endpoints.push_back(ReadEndpoint(&r));
  if (r.failed()) return Status::Unavailable("a malformed GetEndpoints answer: " + r.why());
  const std::string_view policy_uri = o_.policy != nullptr ? o_.policy->uri : kPolicyNoneUri;
  const std::string wanted = o_.policy != nullptr
                                 ? std::string(o_.policy->name) + " and mode " + ModeName(o_.mode)
                                 : std::string("None");
  const EndpointInfo* chosen = nullptr;
  std::string offered;
  for (const auto& e : endpoints) {
    offered += (offered.empty() ? "" : ", ") + PolicyName(e.policy) + "/" + ModeName(e.mode);
    if (chosen == nullptr && e.mode == o_.mode && e.policy == policy_uri) chosen = &e;
  }
  if (chosen == nullptr) {
    return Status::Invalid("the server at " + o_.endpoint.url +
                           " offers no endpoint with SecurityPolicy " + wanted + " (it offers: " +
                           (offered.empty() ? "nothing" : offered) +
                           "); set security_policy and security_mode to one of them");
  }
  server_certificate_ = chosen->certificate;
  if (o_.policy != nullptr && server_certificate_.empty()) {
    return Status::Unavailable("the server's " + wanted + " endpoint has no certificate");
  }
  user_policy_id_.clear();
  user_policy_ = nullptr;
  const uint32_t want = o_.user ? kTokenCertificate
                        : o_.username.empty() ? kTokenAnonymous
                                              : kTokenUserName;
  // The token policy to log in under. A password goes encrypted where a
  // policy can encrypt it (the token's own, else the channel's), in plain
  // text only where the server offers nothing else; a user certificate's
  // proof needs a policy to be signed under.
  int best = -1;
  for (const auto& t : chosen->tokens) {
    if (t.type != want) continue;
    const bool none = t.policy_uri == kPolicyNoneUri;
    const Policy* p = t.policy_uri.empty() ? o_.policy : none ? nullptr : FindPolicy(t.policy_uri);
    if (p == nullptr && !t.policy_uri.empty() && !none) continue;  // a policy not supported
    if (want == kTokenCertificate && p == nullptr) continue;
    const int rank = want == kTokenAnonymous ? 1 : p != nullptr ? 1 : 0;
    if (rank > best) {
      best = rank;
      user_policy_id_ = t.policy_id;
      user_policy_ = p;
    }
  }
  if (best < 0) {
    const std::string login = want == kTokenAnonymous ? "anonymous logins"
                              : want == kTokenUserName
                                  ? "a user name and password under a policy kayak can encrypt for"
                                  : "user certificates under a policy kayak can sign for";
    return Status::Invalid("the server at " + o_.endpoint.url + " takes no " + login +
                           " on its " + wanted + " endpoint" +
                           (want == kTokenAnonymous ? "; set username and password" : ""));
  }
  return Status::Ok();
}

Status Session::CreateSession() {
  const bool sealed = o_.policy != nullptr;
  client_nonce_ = sealed ? RandomBytes(kNonceBytes) : std::string();
  std::string body = Header(static_cast<uint32_t>(o_.timeout_ms));
  Writer w(&body);
  WriteClientDescription(&w, sealed && !o_.identity->application_uri.empty()
                                 ? std::string_view(o_.identity->application_uri)
                                 : kDefaultApplicationUri);
  w.NullString();  // server URI
  w.String(o_.endpoint.url);
  w.String(o_.session_name);
  if (sealed) {
    w.String(client_nonce_);
    w.String(o_.identity->certificate);
  } else {
    w.NullString();  // client nonce: none on a None channel
    w.NullString();  // client certificate
  }
  w.Double(kSessionTimeoutMs);
  w.U32(kMaxMessageBytes);
  Response resp;
  KAYAK_RETURN_IF_ERROR(channel_.Call(type_id::kCreateSessionRequest, body, &resp));
  Reader r(resp.body);
  KAYAK_RETURN_IF_ERROR(Expect(resp, type_id::kCreateSessionResponse, "CreateSession", &r));
  r.NodeId();  // session id
  auth_token_ = r.NodeId();
  r.Double();  // revised session timeout
  server_nonce_ = std::string(r.String());
  const std::string_view cert = r.String();
  if (r.failed()) return Status::Unavailable("a malformed CreateSession answer: " + r.why());
  if (!sealed) {
    if (!cert.empty()) server_certificate_ = std::string(cert);
    return Status::Ok();
  }
  // The server proves it holds its certificate's key: it signs kayak's
  // certificate and nonce.
  const size_t endpoints = r.ArrayLength(16);
  for (size_t i = 0; i < endpoints && !r.failed(); ++i) ReadEndpoint(&r);
  const size_t software = r.ArrayLength(8);
  for (size_t i = 0; i < software && !r.failed(); ++i) {
    r.SkipString();
    r.SkipString();
  }
  r.SkipString();  // signature algorithm
  const std::string_view signature = r.String();
  if (r.failed()) return Status::Unavailable("a malformed CreateSession answer: " + r.why());
  if (cert != server_certificate_) {
    return Status::Unavailable("CreateSession was answered with another certificate than the "
                               "server's endpoint gave");
  }
  if (server_nonce_.size() < kNonceBytes) {
    return Status::Unavailable("the server's session nonce is shorter than " +
                               std::to_string(kNonceBytes) + " bytes");
  }
  EvpKey key(nullptr, EVP_PKEY_free);
  KAYAK_RETURN_IF_ERROR(PublicKey(server_certificate_, &key));
  if (!Verify(*o_.policy, key.get(), o_.identity->certificate + client_nonce_, signature)) {
    return Status::Unavailable("the server's session signature does not verify with its "
                               "certificate");
  }
  return Status::Ok();
}

Status Session::ActivateSession() {
  std::string body = Header(static_cast<uint32_t>(o_.timeout_ms));
  Writer w(&body);
  if (o_.policy != nullptr) {
    // kayak proves it holds its certificate's key: it signs the server's
    // certificate and nonce.
    std::string sig;
    KAYAK_RETURN_IF_ERROR(
        Sign(*o_.policy, o_.identity->key.get(), server_certificate_ + server_nonce_, &sig));
    w.String(o_.policy->signature_uri);
    w.String(sig);
  } else {
    w.NullString();  // client signature: algorithm
    w.NullString();  // and signature
  }
  w.NullArray();  // client software certificates
  w.NullArray();  // locale ids
  std::string token;
  Writer t(&token);
  t.String(user_policy_id_);
  std::string user_signature, user_algorithm;
  if (o_.user) {
    t.String(o_.user->certificate);
    w.ExtensionObject(type_id::kX509IdentityToken, token);
    KAYAK_RETURN_IF_ERROR(Sign(*user_policy_, o_.user->key.get(),
                               server_certificate_ + server_nonce_, &user_signature));
    user_algorithm = std::string(user_policy_->signature_uri);
  } else if (o_.username.empty()) {
    w.ExtensionObject(type_id::kAnonymousIdentityToken, token);
  } else {
    t.String(o_.username);
    if (user_policy_ == nullptr) {
      t.String(o_.password);
      t.NullString();
    } else {
      std::string secret;
      KAYAK_RETURN_IF_ERROR(
          EncryptPassword(server_certificate_, *user_policy_, o_.password, server_nonce_, &secret));
      t.String(secret);
      t.String(user_policy_->oaep_uri);
    }
    w.ExtensionObject(type_id::kUserNameIdentityToken, token);
  }
  if (user_algorithm.empty()) {
    w.NullString();  // user token signature: algorithm
    w.NullString();  // and signature
  } else {
    w.String(user_algorithm);
    w.String(user_signature);
  }
  Response resp;
  KAYAK_RETURN_IF_ERROR(channel_.Call(type_id::kActivateSessionRequest, body, &resp));
  Reader r(resp.body);
  const Status st = Expect(resp, type_id::kActivateSessionResponse, "ActivateSession", &r);
  if (!st.ok() && (st.message().find("BadIdentityToken") != std::string::npos ||
                   st.message().find("BadUserAccessDenied") != std::string::npos ||
                   st.message().find("BadUserSignatureInvalid") != std::string::npos ||
                   st.message().find("BadCertificate") != std::string::npos)) {
    // A refused login stays refused; the card says so and the pipeline
    // stops rather than knocking on.
    const std::string who = o_.user ? " with the user certificate (SHA-1 " +
                                          Hex(Thumbprint(o_.user->certificate)) + ")"
                            : o_.username.empty() ? std::string(" (anonymous)")
                                                  : " of user '" + o_.username + "'";
    return Status::Invalid("the server refused the login" + who + ": " + st.message());
  }
  return st;
}

namespace {

constexpr uint32_t kHierarchicalReferences = 33;
constexpr uint32_t kBrowseResultAll = 0x3f;
constexpr uint32_t kReferencesPerCall = 1000;

// A BrowseResult: its references appended to `out`, its continuation point
// (empty when there are no more).
Status ReadBrowseResult(Reader* r, std::vector<Session::Reference>* out, std::string* more) {
  const uint32_t status = r->U32();
  *more = std::string(r->String());
  const size_t n = r->ArrayLength(8);
  for (size_t i = 0; i < n && !r->failed(); ++i) {
    Session::Reference ref;
    r->NodeId();  // reference type
    r->Bool();    // is forward
    ref.id = r->ExpandedNodeId();
    const uint16_t ns = r->U16();
    const std::string_view name = r->String();
    ref.browse_name = ns == 0 ? std::string(name) : std::to_string(ns) + ":" + std::string(name);
    const uint8_t mask = r->Byte();
    if (mask & 0x01) r->SkipString();
    if (mask & 0x02) ref.display_name = std::string(r->String());
    ref.node_class = r->U32();
    r->ExpandedNodeId();  // type definition
    out->push_back(std::move(ref));
  }
  if (r->failed()) return Status::Unavailable("a malformed BrowseResult: " + r->why());
  if (IsBad(status)) return Status::Invalid("Browse: " + StatusName(status));
  return Status::Ok();
}

}  // namespace

Status Session::Browse(const NodeId& node, std::vector<Reference>* out) {
  std::string body = Header(static_cast<uint32_t>(o_.timeout_ms));
  Writer w(&body);
  w.NodeId(NodeId{});  // the whole address space, no view
  w.I64(0);
  w.U32(0);
  w.U32(kReferencesPerCall);
  w.I32(1);
  w.NodeId(node);
  w.U32(0);  // forward
  w.NodeId(NodeId::Numeric(0, kHierarchicalReferences));
  w.Bool(true);  // and its subtypes
  w.U32(0);      // every node class
  w.U32(kBrowseResultAll);
  Response resp;
  KAYAK_RETURN_IF_ERROR(channel_.Call(type_id::kBrowseRequest, body, &resp));
  std::string more;
  for (;;) {
    Reader r(resp.body);
    KAYAK_RETURN_IF_ERROR(
        Expect(resp, more.empty() ? type_id::kBrowseResponse : type_id::kBrowseNextResponse,
               more.empty() ? "Browse" : "BrowseNext", &r));
    if (r.ArrayLength(4) != 1) return Status::Unavailable("Browse answered for another count");
    KAYAK_RETURN_IF_ERROR(ReadBrowseResult(&r, out, &more));
    if (more.empty()) return Status::Ok();
    body = Header(static_cast<uint32_t>(o_.timeout_ms));
    Writer next(&body);
    next.Bool(false);  // do not release: continue
    next.I32(1);
    next.String(more);
    KAYAK_RETURN_IF_ERROR(channel_.Call(type_id::kBrowseNextRequest, body, &resp));
  }
}

Status Session::Read(const std::vector<NodeId>& nodes, std::vector<std::string>* out) {
  std::string body = Header(static_cast<uint32_t>(o_.timeout_ms));
  Writer w(&body);
  w.Double(0);  // max age: the current value
  w.U32(kTimestampsBoth);
  w.I32(static_cast<int32_t>(nodes.size()));
  for (const auto& id : nodes) {
    w.NodeId(id);
    w.U32(kAttributeValue);
    w.NullString();  // index range
    w.U16(0);        // data encoding: default
    w.NullString();
  }
  Response resp;
  KAYAK_RETURN_IF_ERROR(channel_.Call(type_id::kReadRequest, body, &resp));
  Reader r(resp.body);
  KAYAK_RETURN_IF_ERROR(Expect(resp, type_id::kReadResponse, "Read", &r));
  const size_t n = r.ArrayLength(1);
  if (n != nodes.size()) return Status::Unavailable("Read answered for another count");
  for (size_t i = 0; i < n && !r.failed(); ++i) {
    std::string members, why;
    if (!DataValueToJson(&r, &members, &why)) {
      members = "\"error\":";
      jtext::AppendString(&members, why);
    }
    out->push_back(std::move(members));
  }
  if (r.failed()) return Status::Unavailable("a malformed Read answer: " + r.why());
  return Status::Ok();
}

Status Subscriber::CreateSubscription() {
  std::string body = session_.Header(static_cast<uint32_t>(o_.session.timeout_ms));
  Writer w(&body);
  w.Double(o_.publishing_ms);
  w.U32(kLifetimeCount);
  w.U32(kKeepAliveCount);
  w.U32(kMaxNotificationsPerPublish);
  w.Bool(true);  // publishing enabled
  w.Byte(0);     // priority
  Response resp;
  KAYAK_RETURN_IF_ERROR(session_.channel().Call(type_id::kCreateSubscriptionRequest, body, &resp));
  Reader r(resp.body);
  KAYAK_RETURN_IF_ERROR(
      Expect(resp, type_id::kCreateSubscriptionResponse, "CreateSubscription", &r));
  subscription_id_ = r.U32();
  revised_publishing_ms_ = r.Double();
  r.U32();  // revised lifetime count
  revised_keepalive_ = r.U32();
  if (r.failed() || subscription_id_ == 0) {
    return Status::Unavailable("a malformed CreateSubscription answer");
  }
  return Status::Ok();
}

Status Subscriber::CreateItems() {
  for (size_t first = 0; first < o_.nodes.size(); first += kItemsPerCall) {
    const size_t count = std::min(kItemsPerCall, o_.nodes.size() - first);
    std::string body = session_.Header(static_cast<uint32_t>(o_.session.timeout_ms));
    Writer w(&body);
    w.U32(subscription_id_);
    w.U32(kTimestampsBoth);
    w.I32(static_cast<int32_t>(count));
    for (size_t i = first; i < first + count; ++i) {
      w.NodeId(o_.nodes[i]);
      w.U32(kAttributeValue);
      w.NullString();  // index range
      w.U16(0);        // data encoding: default
      w.NullString();
      w.U32(kMonitoringReporting);
      w.U32(static_cast<uint32_t>(i));  // client handle: the node's index
      w.Double(o_.sampling_ms);
      w.NullExtensionObject();  // filter: the default data change filter
      w.U32(o_.queue_size);
      w.Bool(true);  // discard oldest
    }
    Response resp;
    KAYAK_RETURN_IF_ERROR(
        session_.channel().Call(type_id::kCreateMonitoredItemsRequest, body, &resp));
    Reader r(resp.body);
    KAYAK_RETURN_IF_ERROR(
        Expect(resp, type_id::kCreateMonitoredItemsResponse, "CreateMonitoredItems", &r));
    const size_t n = r.ArrayLength(4);
    if (n != count) return Status::Unavailable("CreateMonitoredItems answered for another count");
    std::string refused;
    size_t bad = 0;
    for (size_t i = 0; i < n && !r.failed(); ++i) {
      const uint32_t status = r.U32();
      r.U32();     // monitored item id
      r.Double();  // revised sampling interval
      r.U32();     // revised queue size
      std::string_view filter;
      r.ExtensionObject(&filter);
      if (IsBad(status) && ++bad <= 5) {
        refused +=
            (refused.empty() ? "" : "; ") + o_.node_texts[first + i] + ": " + StatusName(status);
      }
    }
    if (r.failed()) {
      return Status::Unavailable("a malformed CreateMonitoredItems answer: " + r.why());
    }
    if (bad > 0) {
      return Status::Invalid("the server refused to monitor " + std::to_string(bad) +
                             " of the nodes (" + refused + (bad > 5 ? "; ..." : "") + ")");
    }
  }
  return Status::Ok();
}

Status Subscriber::SendPublish() {
  // No timeout hint: a Publish waits for data or a keep-alive.
  std::string body = session_.Header(0);
  Writer w(&body);
  w.I32(static_cast<int32_t>(acks_.size()));
  for (const uint32_t seq : acks_) {
    w.U32(subscription_id_);
    w.U32(seq);
  }
  uint32_t request = 0;
  const Status st = session_.channel().Send(type_id::kPublishRequest, body, &request);
  if (!st.ok()) return Lost("sending Publish: " + st.message());
  acks_.clear();
  publishes_.insert(request);
  return Status::Ok();
}

void Subscriber::Change(uint32_t handle, std::string_view members) {
  if (handle >= prefixes_.size()) {
    Refused(handle, "the server sent a change for client handle " + std::to_string(handle) +
                        ", which names no node");
    return;
  }
  std::string m;
  m.reserve(prefixes_[handle].size() + members.size() + 1);
  m.append(prefixes_[handle]).append(members).push_back('}');
  pending_.push_back(std::move(m));
}

void Subscriber::Refused(uint32_t handle, std::string_view why) {
  const std::string node = handle < o_.node_texts.size() ? o_.node_texts[handle] : "?";
  pending_errors_.push_back("node " + node + ": " + std::string(why));
}

Status Subscriber::TakeNotification(Reader* r) {
  uint32_t status = 0;
  std::string why;
  if (!ReadNotificationData(r, this, &status, &why)) return Lost(why);
  if (IsBad(status)) return Lost("the server ended the subscription: " + StatusName(status));
  return Status::Ok();
}

Status Subscriber::Republish(uint32_t sequence, bool* found) {
  *found = false;
  std::string body = session_.Header(static_cast<uint32_t>(o_.session.timeout_ms));
  Writer w(&body);
  w.U32(subscription_id_);
  w.U32(sequence);
  uint32_t request = 0;
  Status st = session_.channel().Send(type_id::kRepublishRequest, body, &request);
  if (!st.ok()) return Lost("sending Republish: " + st.message());
  const int64_t deadline = SteadyMs() + o_.session.timeout_ms;
  while (SteadyMs() < deadline) {
    Response resp;
    bool got = false;
    st = session_.channel().Receive(static_cast<int>(deadline - SteadyMs()), &resp, &got);
    if (!st.ok()) return Lost(st.message());
    if (!got) continue;
    if (resp.request_id != request) {
      stash_.push_back(std::move(resp));  // a Publish answer: taken after this one
      continue;
    }
    Reader r(resp.body);
    if (resp.type_id == type_id::kServiceFault) return Status::Ok();  // no longer there
    if (resp.type_id != type_id::kRepublishResponse) return Status::Ok();
    if (IsBad(r.ResponseHeader())) return Status::Ok();
    r.U32();  // sequence number
    r.I64();  // publish time
    *found = true;
    return TakeNotification(&r);
  }
  return Lost("no answer to Republish within " + std::to_string(o_.session.timeout_ms) + " ms");
}

Status Subscriber::Take(Response& resp) {
  const bool was_publish = publishes_.erase(resp.request_id) > 0;
  // A PublishResponse is the subscription's data whichever request it
  // answers; another answer matters only if it answers a Publish (a fault).
  if (resp.type_id != type_id::kPublishResponse && !was_publish) return Status::Ok();
  Reader r(resp.body);
  uint32_t result = 0;
  if (resp.type_id == type_id::kPublishResponse) {
    result = r.ResponseHeader();
  } else if (resp.type_id == type_id::kServiceFault) {
    result = r.ResponseHeader();
    if (!IsBad(result)) result = 0x80010000u;  // a fault that says Good: unexpected
  } else {
    return Lost("a Publish was answered with type " + std::to_string(resp.type_id));
  }
  if (IsBad(result)) {
    const std::string name = StatusName(result);
    if (name == "BadTimeout" || name == "BadRequestTimeout") return SendPublish();
    if (name == "BadTooManyPublishRequests") {
      publish_target_ = std::max<size_t>(1, publishes_.size());
      return Status::Ok();
    }
    return Lost("Publish failed: " + name);
  }
  last_heard_ms_ = SteadyMs();
  const uint32_t subscription = r.U32();
  const size_t available = r.ArrayLength(4);
  std::vector<uint32_t> available_seqs;
  for (size_t i = 0; i < available && !r.failed(); ++i) available_seqs.push_back(r.U32());
  r.Bool();  // more notifications: the next Publish asks for them
  const uint32_t sequence = r.U32();
  r.I64();  // publish time
  if (r.failed()) return Lost("a malformed Publish answer: " + r.why());
  if (subscription != subscription_id_) return SendPublish();
  const size_t notifications_at = resp.body.size() - r.left();
  Reader peek(std::string_view(resp.body).substr(notifications_at));
  const bool keepalive = peek.ArrayLength(8) == 0;
  if (!keepalive) {
    // A gap: ask again for what the server still has, in order, before
    // this message.
    if (last_sequence_ != 0 && sequence > last_sequence_ + 1) {
      for (uint32_t s = last_sequence_ + 1; s < sequence; ++s) {
        bool found = false;
        if (std::find(available_seqs.begin(), available_seqs.end(), s) != available_seqs.end()) {
          KAYAK_RETURN_IF_ERROR(Republish(s, &found));
        }
        if (found) {
          acks_.push_back(s);
        } else {
          ++missed_;
        }
      }
    }
    KAYAK_RETURN_IF_ERROR(TakeNotification(&r));
    if (sequence > last_sequence_) last_sequence_ = sequence;
    acks_.push_back(sequence);
  }
  if (publishes_.size() < publish_target_) return SendPublish();
  return Status::Ok();
}

Status Subscriber::Poll(int wait_ms, size_t max, std::vector<std::string>* out,
                        std::vector<std::string>* errors) {
  const int64_t deadline = SteadyMs() + wait_ms;
  while (pending_.empty() && pending_errors_.empty()) {
    if (!connected()) return Status::Unavailable("not connected");
    const int64_t now = SteadyMs();
    if (session_.channel().RenewDue(now)) {
      const Status st = session_.channel().SendRenew(now);
      if (!st.ok()) return Lost("renewing the secure channel: " + st.message());
    }
    // The server answers a Publish at least every keep-alive interval.
    const int64_t silent_ms =
        static_cast<int64_t>(revised_publishing_ms_ * std::max<uint32_t>(revised_keepalive_, 1)) *
            2 +
        o_.session.timeout_ms;
    if (now - last_heard_ms_ > silent_ms) {
      return Lost("no data or keep-alive from the server for " +
                  std::to_string((now - last_heard_ms_) / 1000) + " s");
    }
    Response resp;
    if (!stash_.empty()) {
      resp = std::move(stash_.front());
      stash_.pop_front();
    } else {
      if (now >= deadline) break;
      bool got = false;
      const int wait = static_cast<int>(std::min<int64_t>(deadline - now, 1000));
      const Status st = session_.channel().Receive(wait, &resp, &got);
      if (!st.ok()) return Lost(st.message());
      if (!got) continue;
    }
    KAYAK_RETURN_IF_ERROR(Take(resp));
  }
  for (auto& e : pending_errors_) errors->push_back(std::move(e));
  pending_errors_.clear();
  while (!pending_.empty() && out->size() < max) {
    out->push_back(std::move(pending_.front()));
    pending_.pop_front();
  }
  return Status::Ok();
}

void Subscriber::Disconnect() {
  session_.Close();
  subscription_id_ = 0;
}

void Session::Close() {
  if (!channel_.is_open()) return;
  if (!auth_token_.IsNull()) {
    std::string body = Header(static_cast<uint32_t>(o_.timeout_ms));
    Writer w(&body);
    w.Bool(true);  // delete the subscriptions
    uint32_t request = 0;
    if (channel_.Send(type_id::kCloseSessionRequest, body, &request).ok()) {
      // Publish answers may come first; the close's answer is waited for
      // briefly so the server has it before the channel goes.
      const int64_t deadline = SteadyMs() + std::min(o_.timeout_ms, 1000);
      while (channel_.is_open() && SteadyMs() < deadline) {
        Response resp;
        bool got = false;
        if (!channel_.Receive(static_cast<int>(deadline - SteadyMs()), &resp, &got).ok()) break;
        if (got && resp.request_id == request) break;
      }
    }
  }
  channel_.Close();
  auth_token_ = NodeId{};
}

}  // namespace kayak::opcua
