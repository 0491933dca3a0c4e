#include "connectors/redis/client.h"

#include <poll.h>

#include <charconv>

#include "common/host_port.h"
#include "common/log.h"

namespace kayak::redis {

bool ParseUrl(std::string_view url, Address* out, std::string* error) {
  *out = Address();
  std::string_view rest = url;
  if (rest.substr(0, 8) == "redis://") {
    rest.remove_prefix(8);
  } else if (rest.substr(0, 9) == "rediss://") {
    rest.remove_prefix(9);
    out->tls = true;
  } else {
    *error = "a redis URL begins with redis:// (or rediss:// for TLS)";
    return false;
  }
  const size_t at = rest.rfind('@');
  if (at != std::string_view::npos) {
    std::string_view cred = rest.substr(0, at);
    rest.remove_prefix(at + 1);
    const size_t colon = cred.find(':');
    if (colon == std::string_view::npos) {
      out->password.assign(cred);
    } else {
      out->user.assign(cred.substr(0, colon));
      out->password.assign(cred.substr(colon + 1));
    }
  }
  const size_t slash = rest.find('/');
  if (slash != std::string_view::npos) {
    std::string_view db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty()) {
      auto [p, ec] = std::from_chars(db.data(), db.data() + db.size(), out->db);
      if (ec != std::errc() || p != db.data() + db.size() || out->db < 0) {
        *error = "the database after / is not a number";
        return false;
      }
    }
  }
  if (!rest.empty() && !ParseHostMaybePort(std::string(rest), &out->host, &out->port)) {
    *error = "host:port, the port a number from 1 to 65535";
    return false;
  }
  return true;
}

std::string Client::Error(const std::string& doing) const {
  std::string why = c_ != nullptr && c_->err ? c_->errstr : "not connected";
  // A server that wants a client certificate closes a TLS 1.3 connection
  // after its handshake: say so where that may be why.
  if (tunnel_ && c_ != nullptr && (c_->err == REDIS_ERR_EOF || c_->err == REDIS_ERR_IO)) {
    why += ClientCertificateHint(tls_);
  }
  return what_ + ": " + doing + ": " + why;
}

Status Client::Broken(const std::string& doing) {
  Status st = Status::Unavailable(Error(doing));
  Close();
  return st;
}

void Client::SetTimeout(int timeout_ms) {
  if (timeout_ms == timeout_ms_) return;
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  redisSetTimeout(c_, tv);
  timeout_ms_ = timeout_ms;
}

Status Client::Ensure() {
  if (c_ != nullptr) return Status::Ok();
  const std::string where = address_.host + ":" + std::to_string(address_.port);
  if (tls_.enabled) {
    auto tunnel = TlsTunnel::Open(address_.host, address_.port, tls_, 2000);
    if (!tunnel.ok()) return Status::Unavailable(what_ + ": " + tunnel.status().message());
    tunnel_ = std::move(tunnel.value());
    c_ = redisConnectFd(tunnel_->TakeFd());
  } else {
    timeval tv{2, 0};
    c_ = redisConnectWithTimeout(address_.host.c_str(), address_.port, tv);
  }
  if (c_ == nullptr) return Status::Unavailable(what_ + ": out of memory");
  if (c_->err) return Broken("cannot connect to " + where);
  timeout_ms_ = -1;
  // The tunnel keeps its own TCP connection alive (keep-alive on its
  // local socket would fail).
  if (!tunnel_) redisEnableKeepAlive(c_);
  Reply r;
  auto ok = [&](const char* doing) -> Status {
    if (r && r->type == REDIS_REPLY_ERROR) {
      Status st = Status::Invalid(what_ + ": " + doing + ": " + r->str);
      Close();
      return st;
    }
    return Status::Ok();
  };
  if (!address_.password.empty()) {
    if (address_.user.empty()) {
      KAYAK_RETURN_IF_ERROR(Command({"AUTH", address_.password}, &r));
    } else {
      KAYAK_RETURN_IF_ERROR(Command({"AUTH", address_.user, address_.password}, &r));
    }
    KAYAK_RETURN_IF_ERROR(ok("AUTH"));
  }
  if (address_.db != 0) {
    const std::string db = std::to_string(address_.db);
    KAYAK_RETURN_IF_ERROR(Command({"SELECT", db}, &r));
    KAYAK_RETURN_IF_ERROR(ok("SELECT"));
  }
  KLOG_INFO("{}: connected to {}", what_, where);
  return Status::Ok();
}

void Client::Close() {
  if (c_ != nullptr) redisFree(c_);
  c_ = nullptr;
  tunnel_.reset();
}

void Client::Append(const std::vector<std::string_view>& args) {
  argv_.clear();
  argl_.clear();
  for (auto a : args) {
    argv_.push_back(a.data());
    argl_.push_back(a.size());
  }
  redisAppendCommandArgv(c_, static_cast<int>(args.size()), argv_.data(), argl_.data());
}

Status Client::ReadReply(Reply* out) {
  void* reply = nullptr;
  if (redisGetReply(c_, &reply) != REDIS_OK) return Broken("reading a reply");
  out->reset(static_cast<redisReply*>(reply));
  return Status::Ok();
}

Status Client::Command(const std::vector<std::string_view>& args, Reply* out, int timeout_ms) {
  KAYAK_RETURN_IF_ERROR(Ensure());
  SetTimeout(timeout_ms);
  Append(args);
  return ReadReply(out);
}

Status Client::Poll(int64_t wait_ms, Reply* out) {
  out->reset();
  KAYAK_RETURN_IF_ERROR(Ensure());
  void* reply = nullptr;
  if (redisGetReplyFromReader(c_, &reply) != REDIS_OK) return Broken("reading");
  if (reply == nullptr) {
    pollfd p{c_->fd, POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(std::max<int64_t>(wait_ms, 0)));
    if (n <= 0) return Status::Ok();
    if (redisBufferRead(c_) != REDIS_OK) return Broken("reading");
    if (redisGetReplyFromReader(c_, &reply) != REDIS_OK) return Broken("reading");
  }
  out->reset(static_cast<redisReply*>(reply));
  return Status::Ok();
}

EntryId ParseId(std::string_view id) {
  EntryId out{0, 0};
  const size_t dash = id.find('-');
  std::string_view ms = id.substr(0, dash);
  std::from_chars(ms.data(), ms.data() + ms.size(), out.first);
  if (dash != std::string_view::npos) {
    std::string_view seq = id.substr(dash + 1);
    std::from_chars(seq.data(), seq.data() + seq.size(), out.second);
  }
  return out;
}

std::string IdText(EntryId id) {
  return std::to_string(id.first) + "-" + std::to_string(id.second);
}

}  // namespace kayak::redis
