#include "connectors/opcua/channel.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <openssl/crypto.h>

namespace kayak::opcua {

namespace {

constexpr uint32_t kRequestedLifetimeMs = 3600 * 1000;
// A message header: type (3), chunk type (1), size (4).
constexpr size_t kHeaderBytes = 8;
// After the header of a MSG or CLO chunk: channel id, token id, sequence
// number, request id.
constexpr size_t kSymmetricBytes = 16;

uint32_t ReadU32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}

void PatchU32(std::string* s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) (*s)[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// The message header with a size to patch once the chunk is whole.
void BeginChunk(std::string* out, const char type[3], char chunk) {
  out->append(type, 3);
  out->push_back(chunk);
  out->append(4, '\0');
}

}  // namespace

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t NowTicks() {
  return TicksFromUnixMs(std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count());
}

bool ParseEndpoint(std::string_view url, Endpoint* out, std::string* why) {
  constexpr std::string_view kScheme = "opc.tcp://";
  if (url.substr(0, kScheme.size()) != kScheme) {
    *why = "'" + std::string(url) + "' is not an opc.tcp:// URL";
    return false;
  }
  std::string_view rest = url.substr(kScheme.size());
  const std::string_view hostport = rest.substr(0, rest.find('/'));
  if (hostport.find('@') != std::string_view::npos) {
    *why = "give the user name and password as username and password, not in the URL";
    return false;
  }
  Endpoint ep;
  ep.url = std::string(url);
  std::string_view host = hostport;
  std::string_view port;
  if (!hostport.empty() && hostport[0] == '[') {
    const size_t close = hostport.find(']');
    if (close == std::string_view::npos) {
      *why = "'" + std::string(url) + "': an IPv6 address needs its closing ]";
      return false;
    }
    host = hostport.substr(1, close - 1);
    if (close + 1 < hostport.size()) {
      if (hostport[close + 1] != ':') {
        *why = "'" + std::string(url) + "' has something after the address that is not a port";
        return false;
      }
      port = hostport.substr(close + 2);
    }
  } else if (const size_t colon = hostport.rfind(':'); colon != std::string_view::npos) {
    host = hostport.substr(0, colon);
    port = hostport.substr(colon + 1);
  }
  if (host.empty()) {
    *why = "'" + std::string(url) + "' names no host";
    return false;
  }
  ep.host = std::string(host);
  if (!port.empty() || hostport.find(':') != std::string_view::npos) {
    int p = 0;
    for (const char c : port) {
      if (c < '0' || c > '9' || p > 65535) {
        p = -1;
        break;
      }
      p = p * 10 + (c - '0');
    }
    if (port.empty() || p < 1 || p > 65535) {
      *why = "'" + std::string(url) + "': the port must be 1 to 65535";
      return false;
    }
    ep.port = static_cast<uint16_t>(p);
  }
  *out = std::move(ep);
  return true;
}

Status Channel::Fail(const std::string& what) {
  Abort();
  return Status::Unavailable(what);
}

Status Channel::Open(const Endpoint& ep) {
  Abort();
  endpoint_url_ = ep.url;
  if (secure()) {
    if (!sec_.identity) return Status::Invalid("a secure channel needs kayak's certificate");
    KAYAK_RETURN_IF_ERROR(PublicKey(sec_.server_certificate, &server_key_));
  }
  const std::string where = ep.host + ":" + std::to_string(ep.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int gai = getaddrinfo(ep.host.c_str(), std::to_string(ep.port).c_str(), &hints, &res);
  if (gai != 0) return Status::Unavailable("cannot resolve " + ep.host + ": " + gai_strerror(gai));
  int err = 0;
  for (addrinfo* a = res; a != nullptr && fd_ < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err = errno;
      continue;
    }
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      err = errno;
      close(fd);
      continue;
    }
    pollfd p{fd, POLLOUT, 0};
    const int n = poll(&p, 1, timeout_ms_);
    socklen_t len = sizeof err;
    if (n <= 0) {
      err = n == 0 ? ETIMEDOUT : errno;
    } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
      err = errno;
    }
    if (err != 0) {
      close(fd);
      continue;
    }
    fd_ = fd;
  }
  freeaddrinfo(res);
  if (fd_ < 0) return Status::Unavailable("cannot connect to " + where + ": " + std::strerror(err));
  const int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

  // Hello: our limits and the URL the server is asked for.
  std::string hel;
  BeginChunk(&hel, "HEL", 'F');
  Writer w(&hel);
  w.U32(0);                   // protocol version
  w.U32(kReceiveChunkBytes);  // receive buffer size
  w.U32(kReceiveChunkBytes);  // send buffer size
  w.U32(kMaxMessageBytes);    // max message size
  w.U32(0);                   // max chunk count: no limit of its own
  w.String(ep.url);
  PatchU32(&hel, 4, static_cast<uint32_t>(hel.size()));
  KAYAK_RETURN_IF_ERROR(WriteAll(hel));
  std::string head;
  bool got = false;
  Status st = ReadExact(kHeaderBytes, &head, timeout_ms_, &got);
  if (st.ok() && !got) st = Fail("no Acknowledge from " + where + " within the timeout");
  if (!st.ok()) return st;
  const uint32_t size = ReadU32(head, 4);
  if (size < kHeaderBytes || size > kReceiveChunkBytes) {
    return Fail(where + " answered Hello with a message of " + std::to_string(size) + " bytes");
  }
  std::string body;
  KAYAK_RETURN_IF_ERROR(ReadExact(size - kHeaderBytes, &body, timeout_ms_, &got));
  Reader r(body);
  if (head.compare(0, 3, "ERR") == 0) {
    const uint32_t code = r.U32();
    const std::string reason(r.String());
    return Fail(where + " refused the connection: " + StatusName(code) +
                (reason.empty() ? "" : " (" + reason + ")"));
  }
  if (head.compare(0, 3, "ACK") != 0) {
    return Fail(where + " is not an OPC UA server (no Acknowledge)");
  }
  r.U32();  // protocol version
  const uint32_t server_receive = r.U32();
  r.U32();  // its send buffer size
  max_send_message_ = r.U32();
  r.U32();  // max chunk count
  if (r.failed() || server_receive < 8192) {
    return Fail(where + " sent a malformed Acknowledge");
  }
  send_chunk_ = std::min<uint32_t>(server_receive, kReceiveChunkBytes);

  KAYAK_RETURN_IF_ERROR(SendOpen(0, SteadyMs()));
  // The answer to OpenSecureChannel comes as an OPN message.
  Response resp;
  st = Receive(timeout_ms_, &resp, &got);
  if (!st.ok()) return st;
  if (token_id_ == 0) {
    return Fail(where + " did not answer OpenSecureChannel within the timeout");
  }
  return Status::Ok();
}

Status Channel::SendOpen(uint32_t request_type, int64_t now_ms) {
  const bool sealed = secure();
  client_nonce_ = sealed ? RandomBytes(kNonceBytes) : std::string();
  std::string m;
  BeginChunk(&m, "OPN", 'F');
  Writer w(&m);
  w.U32(channel_id_);
  if (sealed) {
    w.String(sec_.policy->uri);
    w.String(sec_.identity->certificate);
    w.String(Thumbprint(sec_.server_certificate));
  } else {
    w.String(kPolicyNoneUri);
    w.NullString();  // sender certificate
    w.NullString();  // receiver certificate thumbprint
  }
  std::string plain;
  Writer p(&plain);
  p.U32(++sequence_);
  const uint32_t request = ++request_id_;
  p.U32(request);
  p.NodeId(NodeId::Numeric(0, type_id::kOpenSecureChannelRequest));
  p.RequestHeader(NodeId{}, NowTicks(), request, static_cast<uint32_t>(timeout_ms_));
  p.U32(0);             // client protocol version
  p.U32(request_type);  // 0 issue, 1 renew
  p.U32(sealed ? sec_.mode : kModeNone);
  p.String(client_nonce_);
  p.U32(kRequestedLifetimeMs);
  if (sealed) {
    KAYAK_RETURN_IF_ERROR(SealOpen(&m, std::move(plain)));
  } else {
    m += plain;
    PatchU32(&m, 4, static_cast<uint32_t>(m.size()));
  }
  renew_request_ = request;
  token_at_ms_ = now_ms;  // the renewal clock starts when it was asked
  return WriteAll(m);
}

// Part 6, 6.7.2: the sequence header, body, padding and signature are
// encrypted with the server's public key in blocks; the signature, made with
// kayak's key, covers everything before it in plain text, with the size of
// the message as sent.
Status Channel::SealOpen(std::string* m, std::string plain) {
  const Policy& policy = *sec_.policy;
  EVP_PKEY* own = sec_.identity->key.get();
  const size_t signature = KeyBytes(own);
  const size_t block = PlainBlockBytes(policy, server_key_.get());
  const size_t cipher_block = KeyBytes(server_key_.get());
  // Keys past 2048 bits take a second byte of padding size.
  const bool extra = cipher_block > 256;
  const size_t fixed = plain.size() + 1 + (extra ? 1 : 0) + signature;
  const size_t pad = (block - fixed % block) % block;
  plain.append(pad + 1, static_cast<char>(pad & 0xff));
  if (extra) plain.push_back(static_cast<char>(pad >> 8));
  const size_t total = m->size() + (plain.size() + signature) / block * cipher_block;
  if (total > send_chunk_) {
    return Fail("an OpenSecureChannel of " + std::to_string(total) +
                " bytes does not fit the server's buffer of " + std::to_string(send_chunk_) +
                " (a certificate too large?)");
  }
  PatchU32(m, 4, static_cast<uint32_t>(total));
  std::string sig;
  std::string to_sign = *m + plain;
  KAYAK_RETURN_IF_ERROR(Sign(policy, own, to_sign, &sig));
  plain += sig;
  std::string cipher;
  KAYAK_RETURN_IF_ERROR(Encrypt(policy, server_key_.get(), plain, &cipher));
  *m += cipher;
  return Status::Ok();
}

Status Channel::TakeOpenResponse(const std::string& head, std::string_view body, int64_t now_ms) {
  Reader h(body);
  h.U32();  // secure channel id
  const std::string_view policy = h.String();
  const std::string_view sender = h.String();
  h.String();  // receiver thumbprint
  if (h.failed()) return Fail("a malformed OpenSecureChannel answer: " + h.why());
  const size_t at = body.size() - h.left();
  std::string plain;
  if (secure()) {
    if (policy != sec_.policy->uri) {
      return Fail("an OpenSecureChannel answer under another policy (" + std::string(policy) +
                  ")");
    }
    if (sender != sec_.server_certificate) {
      return Fail("the OpenSecureChannel answer comes with another certificate than the "
                  "server's endpoint gave");
    }
    KAYAK_RETURN_IF_ERROR(
        Decrypt(*sec_.policy, sec_.identity->key.get(), body.substr(at), &plain));
    const size_t signature = KeyBytes(server_key_.get());
    if (plain.size() < signature + 9) return Fail("a truncated OpenSecureChannel answer");
    const std::string_view sig = std::string_view(plain).substr(plain.size() - signature);
    std::string signed_part = head;
    signed_part.append(body.substr(0, at));
    signed_part.append(plain, 0, plain.size() - signature);
    if (!Verify(*sec_.policy, server_key_.get(), signed_part, sig)) {
      return Fail("the server's OpenSecureChannel answer has a signature that does not verify "
                  "with its certificate");
    }
    plain.resize(plain.size() - signature);
    size_t strip = static_cast<uint8_t>(plain.back()) + 1u;
    if (KeyBytes(sec_.identity->key.get()) > 256) {
      strip = ((static_cast<size_t>(static_cast<uint8_t>(plain.back())) << 8) |
               static_cast<uint8_t>(plain[plain.size() - 2])) +
              2;
    }
    if (strip + 8 > plain.size()) return Fail("an OpenSecureChannel answer of bad padding");
    plain.resize(plain.size() - strip);
  } else {
    if (policy != kPolicyNoneUri) return Fail("an OpenSecureChannel answer of another policy");
    plain.assign(body.substr(at));
  }
  Reader r(plain);
  r.U32();  // sequence number
  r.U32();  // request id
  const NodeId type = r.NodeId();
  if (r.failed()) return Fail("a malformed OpenSecureChannel answer: " + r.why());
  if (type.numeric == type_id::kServiceFault) {
    return Fail("the server refused to open a secure channel: " + StatusName(r.ResponseHeader()));
  }
  if (type.numeric != type_id::kOpenSecureChannelResponse) {
    return Fail("an OpenSecureChannel answer of another type");
  }
  const uint32_t result = r.ResponseHeader();
  if (IsBad(result)) {
    return Fail("the server refused to open a secure channel: " + StatusName(result));
  }
  r.U32();  // server protocol version
  channel_id_ = r.U32();
  token_id_ = r.U32();
  r.I64();  // created at
  lifetime_ms_ = r.U32();
  const std::string_view server_nonce = r.String();
  if (r.failed()) return Fail("a malformed OpenSecureChannel answer: " + r.why());
  if (secure()) {
    if (server_nonce.size() != kNonceBytes) {
      return Fail("the server's nonce has " + std::to_string(server_nonce.size()) +
                  " bytes, not " + std::to_string(kNonceBytes));
    }
    keys_[1] = std::move(keys_[0]);
    keys_[0].id = token_id_;
    keys_[0].local = DeriveKeys(*sec_.policy, server_nonce, client_nonce_);
    keys_[0].remote = DeriveKeys(*sec_.policy, client_nonce_, server_nonce);
  }
  token_at_ms_ = now_ms;
  renew_request_ = 0;
  return Status::Ok();
}

bool Channel::RenewDue(int64_t now_ms) const {
  return fd_ >= 0 && renew_request_ == 0 && lifetime_ms_ > 0 &&
         now_ms - token_at_ms_ >= static_cast<int64_t>(lifetime_ms_) * 3 / 4;
}

Status Channel::SendRenew(int64_t now_ms) { return SendOpen(1, now_ms); }

size_t Channel::ChunkPayload() const {
  // After the header: channel id, token id, then the sequence header.
  size_t room = send_chunk_ - kHeaderBytes - 8;
  if (!secure()) return room - 8;
  const bool encrypt = sec_.mode == kModeSignAndEncrypt;
  if (encrypt) room -= room % kAesBlock;
  return room - 8 - kSymSignatureBytes - (encrypt ? 1 : 0);
}

// Part 6, 6.7.2 with symmetric keys: padding to whole AES blocks when
// encrypting, an HMAC of all before it, then the sequence header onwards
// encrypted with the token's key and IV.
Status Channel::AppendChunk(std::string* out, const char type[3], char chunk, uint32_t request,
                            std::string_view piece) {
  const size_t start = out->size();
  BeginChunk(out, type, chunk);
  Writer c(out);
  c.U32(channel_id_);
  c.U32(token_id_);
  c.U32(++sequence_);
  c.U32(request);
  out->append(piece.data(), piece.size());
  if (!secure()) {
    PatchU32(out, start + 4, static_cast<uint32_t>(out->size() - start));
    return Status::Ok();
  }
  const bool encrypt = sec_.mode == kModeSignAndEncrypt;
  const size_t plain_at = start + kHeaderBytes + 8;
  if (encrypt) {
    const size_t n = out->size() - plain_at + 1 + kSymSignatureBytes;
    const size_t pad = (kAesBlock - n % kAesBlock) % kAesBlock;
    out->append(pad + 1, static_cast<char>(pad));
  }
  PatchU32(out, start + 4, static_cast<uint32_t>(out->size() - start + kSymSignatureBytes));
  out->append(HmacSha256(keys_[0].local.signing, {std::string_view(*out).substr(start)}));
  if (encrypt) {
    KAYAK_RETURN_IF_ERROR(
        AesCbc(true, keys_[0].local, out->data() + plain_at, out->size() - plain_at));
  }
  return Status::Ok();
}

Status Channel::Unseal(const std::string& head, std::string* body) {
  if (body->size() < 8) return Fail("the server sent a truncated chunk");
  const uint32_t token = ReadU32(*body, 4);
  const TokenKeys* k = token == keys_[0].id   ? &keys_[0]
                       : token == keys_[1].id ? &keys_[1]
                                              : nullptr;
  if (k == nullptr || token == 0) {
    return Fail("the server used security token " + std::to_string(token) +
                ", which this channel was not given");
  }
  const bool encrypt = sec_.mode == kModeSignAndEncrypt;
  if (encrypt) {
    KAYAK_RETURN_IF_ERROR(AesCbc(false, k->remote, body->data() + 8, body->size() - 8));
  }
  if (body->size() < 8 + 8 + kSymSignatureBytes) return Fail("the server sent a truncated chunk");
  const size_t end = body->size() - kSymSignatureBytes;
  const std::string mac =
      HmacSha256(k->remote.signing, {head, std::string_view(*body).substr(0, end)});
  if (CRYPTO_memcmp(mac.data(), body->data() + end, kSymSignatureBytes) != 0) {
    return Fail("the server sent a chunk whose signature does not verify");
  }
  body->resize(end);
  if (encrypt) {
    const size_t strip = static_cast<uint8_t>(body->back()) + 1u;
    if (strip + 16 > body->size()) return Fail("the server sent a chunk of bad padding");
    body->resize(body->size() - strip);
  }
  return Status::Ok();
}

Status Channel::Send(uint32_t type_id, std::string_view body, uint32_t* request_id) {
  if (fd_ < 0) return Status::Unavailable("the connection is closed");
  std::string payload;
  payload.reserve(body.size() + 8);
  Writer w(&payload);
  w.NodeId(NodeId::Numeric(0, type_id));
  payload.append(body.data(), body.size());
  if (max_send_message_ != 0 && payload.size() > max_send_message_) {
    return Status::Invalid("a request of " + std::to_string(payload.size()) +
                           " bytes is larger than the server takes (" +
                           std::to_string(max_send_message_) + ")");
  }
  const uint32_t request = ++request_id_;
  *request_id = request;
  const size_t per_chunk = ChunkPayload();
  std::string out;
  for (size_t at = 0; at < payload.size() || at == 0;) {
    const size_t n = std::min(per_chunk, payload.size() - at);
    const bool last = at + n >= payload.size();
    KAYAK_RETURN_IF_ERROR(AppendChunk(&out, "MSG", last ? 'F' : 'C', request,
                                      std::string_view(payload).substr(at, n)));
    at += n;
    if (last) break;
  }
  return WriteAll(out);
}

Status Channel::Receive(int wait_ms, Response* out, bool* got) {
  *got = false;
  const int64_t deadline = SteadyMs() + wait_ms;
  while (fd_ >= 0) {
    const int64_t left = deadline - SteadyMs();
    std::string head;
    bool any = false;
    KAYAK_RETURN_IF_ERROR(
        ReadExact(kHeaderBytes, &head, static_cast<int>(std::max<int64_t>(left, 0)), &any));
    if (!any) return Status::Ok();
    const uint32_t size = ReadU32(head, 4);
    if (size < kHeaderBytes || size > kReceiveChunkBytes) {
      return Fail("the server sent a chunk of " + std::to_string(size) + " bytes (at most " +
                  std::to_string(kReceiveChunkBytes) + " were agreed)");
    }
    std::string body;
    KAYAK_RETURN_IF_ERROR(ReadExact(size - kHeaderBytes, &body, timeout_ms_, &any));
    const std::string_view type(head.data(), 3);
    const char chunk = head[3];
    if (type == "ERR") {
      Reader r(body);
      const uint32_t code = r.U32();
      const std::string reason(r.String());
      return Fail("the server closed the connection: " + StatusName(code) +
                  (reason.empty() ? "" : " (" + reason + ")"));
    }
    if (type == "OPN") {
      // A renewal's answer: taken here; the caller waits on.
      return TakeOpenResponse(head, body, SteadyMs());
    }
    if (type != "MSG") {
      return Fail("the server sent a message of unknown type " + std::string(type));
    }
    if (secure()) KAYAK_RETURN_IF_ERROR(Unseal(head, &body));
    if (body.size() < kSymmetricBytes) return Fail("the server sent a truncated chunk");
    const uint32_t request = ReadU32(body, 12);
    if (chunk == 'A') {
      partial_bytes_ -= partial_[request].size();
      partial_.erase(request);
      Reader r(std::string_view(body).substr(kSymmetricBytes));
      const uint32_t code = r.U32();
      return Fail("the server aborted its answer to request " + std::to_string(request) + ": " +
                  StatusName(code));
    }
    if (chunk != 'C' && chunk != 'F') return Fail("the server sent a chunk of unknown kind");
    std::string& whole = partial_[request];
    whole.append(body, kSymmetricBytes, std::string::npos);
    partial_bytes_ += body.size() - kSymmetricBytes;
    if (partial_bytes_ > kMaxMessageBytes) {
      return Fail("the server's answers in progress pass " + std::to_string(kMaxMessageBytes) +
                  " bytes");
    }
    if (chunk == 'C') continue;
    std::string payload = std::move(whole);
    partial_.erase(request);
    partial_bytes_ -= payload.size();
    Reader r(payload);
    const NodeId t = r.NodeId();
    if (r.failed() || t.ns != 0 || t.kind != NodeId::Kind::kNumeric) {
      return Fail("the server sent an answer of an unknown type");
    }
    out->request_id = request;
    out->type_id = t.numeric;
    out->body.assign(payload, payload.size() - r.left(), std::string::npos);
    *got = true;
    return Status::Ok();
  }
  return Status::Unavailable("the connection is closed");
}

Status Channel::Call(uint32_t type_id, std::string_view body, Response* out) {
  uint32_t request = 0;
  KAYAK_RETURN_IF_ERROR(Send(type_id, body, &request));
  bool got = false;
  KAYAK_RETURN_IF_ERROR(Receive(timeout_ms_, out, &got));
  if (!got) return Fail("no answer within " + std::to_string(timeout_ms_) + " ms");
  if (out->request_id != request) return Fail("the server answered a request not made");
  return Status::Ok();
}

void Channel::Close() {
  if (fd_ < 0) return;
  std::string body;
  Writer w(&body);
  const uint32_t request = ++request_id_;
  w.NodeId(NodeId::Numeric(0, type_id::kCloseSecureChannelRequest));
  w.RequestHeader(NodeId{}, NowTicks(), request, static_cast<uint32_t>(timeout_ms_));
  std::string m;
  if (AppendChunk(&m, "CLO", 'F', request, body).ok()) (void)WriteAll(m);
  Abort();
}

void Channel::Abort() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  rbuf_.clear();
  rpos_ = 0;
  partial_.clear();
  partial_bytes_ = 0;
  channel_id_ = token_id_ = 0;
  lifetime_ms_ = 0;
  renew_request_ = 0;
  keys_[0] = keys_[1] = TokenKeys{};
  client_nonce_.clear();
}

Status Channel::WriteAll(std::string_view bytes) {
  const int64_t deadline = SteadyMs() + timeout_ms_;
  while (!bytes.empty()) {
    const ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const int64_t left = deadline - SteadyMs();
      pollfd p{fd_, POLLOUT, 0};
      if (left <= 0 || poll(&p, 1, static_cast<int>(left)) == 0) {
        return Fail("the server took nothing for " + std::to_string(timeout_ms_) + " ms");
      }
      continue;
    }
    return Fail(std::string("sending to the server: ") + std::strerror(errno));
  }
  return Status::Ok();
}

Status Channel::ReadExact(size_t n, std::string* out, int wait_ms, bool* got) {
  *got = false;
  int64_t deadline = SteadyMs() + wait_ms;
  while (rbuf_.size() - rpos_ < n) {
    if (rpos_ > 0) {
      rbuf_.erase(0, rpos_);
      rpos_ = 0;
    }
    // Once the first byte is here the rest may take the channel's timeout.
    if (!rbuf_.empty()) deadline = std::max(deadline, SteadyMs() + timeout_ms_);
    const size_t have = rbuf_.size();
    rbuf_.resize(have + std::max<size_t>(n - have, kReceiveChunkBytes));
    const ssize_t r = recv(fd_, rbuf_.data() + have, rbuf_.size() - have, 0);
    rbuf_.resize(have + static_cast<size_t>(std::max<ssize_t>(r, 0)));
    if (r > 0) continue;
    if (r == 0) return Fail("the server closed the connection");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Fail(std::string("reading from the server: ") + std::strerror(errno));
    }
    const int64_t left = deadline - SteadyMs();
    pollfd p{fd_, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, static_cast<int>(left)) == 0) {
      if (rbuf_.empty()) return Status::Ok();  // nothing came: not an error
      return Fail("the server stopped in the middle of a message");
    }
  }
  out->assign(rbuf_, rpos_, n);
  rpos_ += n;
  *got = true;
  return Status::Ok();
}

}  // namespace kayak::opcua
