#include "connectors/nats/conn.h"

#include <unistd.h>

#include <chrono>

#include "common/log.h"

namespace kayak::nats {

Status ToStatus(natsStatus s, std::string message) {
  switch (s) {
    case NATS_OK:
      return Status::Ok();
    case NATS_INVALID_ARG:
    case NATS_INVALID_SUBJECT:
    case NATS_NOT_PERMITTED:
    case NATS_MAX_PAYLOAD:
      return Status::Invalid(std::move(message));
    default:
      return Status::Unavailable(std::move(message));
  }
}

std::string Connection::Error(const std::string& doing, natsStatus s) const {
  std::string out = what_ + ": " + doing + ": " + natsStatus_GetText(s);
  natsStatus last = NATS_OK;
  const char* text = nats_GetLastError(&last);
  if (text != nullptr && *text != '\0' && last == s) {
    const std::string detail = text;
    if (detail != natsStatus_GetText(s)) out += " (" + detail + ")";
  }
  return out;
}

std::vector<PropDef> LoginProps() {
  return {
      PropDef{"user", PropType::kString, false, "", "log in as this user (with `password`)",
              PropRole::kTuning},
      PropDef{"password", PropType::kString, false, "",
              "the user's password, as ${ENV} or ${file:...}", PropRole::kTuning}
          .Secret(),
      PropDef{"token", PropType::kString, false, "",
              "log in with this token instead, as ${ENV} or ${file:...}", PropRole::kTuning}
          .Secret(),
      PropDef{"nkey", PropType::kString, false, "",
              "log in as this nkey user (its public key, U...), proving it with "
              "`nkey_seed_file`",
              PropRole::kTuning},
      PropDef{"nkey_seed_file", PropType::kString, false, "",
              "the file holding the nkey's seed (SU...), read at each connection",
              PropRole::kTuning},
      PropDef{"credentials_file", PropType::kString, false, "",
              "log in with a .creds file (a user JWT and its nkey seed, as `nsc` writes it), "
              "read at each connection",
              PropRole::kTuning},
  };
}

Login ReadLogin(const Options& o) {
  Login l{o.String("user"),  o.String("password"),       o.String("token"),
          o.String("nkey"),  o.String("nkey_seed_file"), o.String("credentials_file")};
  if (!l.password.empty() && l.user.empty()) o.Error("password", "give `user` too");
  const int ways = !l.user.empty() + !l.token.empty() + !l.nkey.empty() +
                   !l.credentials_file.empty();
  if (ways > 1) {
    o.Error(!l.token.empty() ? "token" : !l.nkey.empty() ? "nkey" : "credentials_file",
            "one way to log in: user, token, nkey or credentials_file, not two");
  }
  if (l.nkey.empty() != l.nkey_seed_file.empty()) {
    o.Error(l.nkey.empty() ? "nkey" : "nkey_seed_file", "nkey and nkey_seed_file go together");
  } else if (!l.nkey.empty() && l.nkey[0] != 'U') {
    o.Error("nkey", "a user's public nkey starts with U (the seed goes in nkey_seed_file)");
  }
  for (const char* name : {"nkey_seed_file", "credentials_file"}) {
    const std::string file = o.String(name);
    if (!file.empty() && access(file.c_str(), R_OK) != 0) {
      o.Error(name, file + " cannot be read");
    }
  }
  return l;
}

Status Connection::SetTls(natsOptions* opts) const {
  if (!tls_.enabled) return Status::Ok();
  natsStatus s = natsOptions_SetSecure(opts, true);
  const char* doing = "tls";
  if (s == NATS_OK && !tls_.ca_file.empty()) {
    doing = "tls.ca_file";
    s = natsOptions_LoadCATrustedCertificates(opts, tls_.ca_file.c_str());
  }
  if (s == NATS_OK && !tls_.cert_file.empty()) {
    doing = "tls.cert_file and key_file";
    s = natsOptions_LoadCertificatesChain(opts, tls_.cert_file.c_str(), tls_.key_file.c_str());
  }
  if (s == NATS_OK && !tls_.server_name.empty()) {
    doing = "tls.server_name";
    s = natsOptions_SetExpectedHostname(opts, tls_.server_name.c_str());
  }
  if (s == NATS_OK && tls_.insecure_skip_verify) {
    doing = "tls.insecure_skip_verify";
    s = natsOptions_SkipServerVerification(opts, true);
  }
  if (s != NATS_OK) return Status::Invalid(Error(std::string("cannot use ") + doing, s));
  return Status::Ok();
}

Status Connection::Ensure() {
  if (nc_ != nullptr) return Status::Ok();
  if (stats_ == nullptr && natsStatistics_Create(&stats_) != NATS_OK) {
    return Status::Unavailable(what_ + ": out of memory for the connection's statistics");
  }
  natsOptions* opts = nullptr;
  natsStatus s = natsOptions_Create(&opts);
  if (s == NATS_OK) s = natsOptions_SetURL(opts, url_.c_str());
  if (s != NATS_OK) {
    natsOptions_Destroy(opts);
    return Status::Invalid(what_ + ": url: " + natsStatus_GetText(s));
  }
  natsOptions_SetName(opts, "kayak");
  natsOptions_SetTimeout(opts, 2000);
  natsOptions_SetMaxReconnect(opts, -1);  // forever: the card says it is down
  natsOptions_SetReconnectWait(opts, 250);
  // While reconnecting, what is published waits in this buffer (then the
  // publish fails and the output retries the batch).
  natsOptions_SetReconnectBufSize(opts, 8 * 1024 * 1024);
  natsOptions_SetDisconnectedCB(opts, &Connection::OnDisconnected, this);
  natsOptions_SetReconnectedCB(opts, &Connection::OnReconnected, this);
  natsOptions_SetClosedCB(opts, &Connection::OnClosed, this);
  if (Status st = SetTls(opts); !st.ok()) {
    natsOptions_Destroy(opts);
    return st;
  }
  if (!login_.user.empty()) {
    natsOptions_SetUserInfo(opts, login_.user.c_str(), login_.password.c_str());
  } else if (!login_.token.empty()) {
    natsOptions_SetToken(opts, login_.token.c_str());
  } else if (!login_.nkey.empty()) {
    s = natsOptions_SetNKeyFromSeed(opts, login_.nkey.c_str(), login_.nkey_seed_file.c_str());
  } else if (!login_.credentials_file.empty()) {
    s = natsOptions_SetUserCredentialsFromFiles(opts, login_.credentials_file.c_str(), nullptr);
  }
  if (s != NATS_OK) {
    natsOptions_Destroy(opts);
    return Status::Invalid(Error("cannot use the login's files", s));
  }
  {
    std::lock_guard<std::mutex> lock(closed_mu_);
    closed_ = false;
  }
  s = natsConnection_Connect(&nc_, opts);
  natsOptions_Destroy(opts);
  if (s != NATS_OK) {
    nc_ = nullptr;
    {
      std::lock_guard<std::mutex> lock(closed_mu_);
      closed_ = true;  // never connected: no callback comes
    }
    std::string why = Error("cannot connect to " + url_, s);
    if (tls_.enabled && tls_.cert_file.empty() &&
        (s == NATS_PROTOCOL_ERROR || s == NATS_CONNECTION_CLOSED || s == NATS_IO_ERROR)) {
      // TLS 1.3: the handshake ends before the server checks the client's
      // certificate, so a refusal arrives as the connection closing.
      why += "; the server closed the connection after the TLS handshake (a server that "
             "requires a client certificate does so: tls.cert_file)";
    }
    return Status::Unavailable(why);
  }
  down_.store(false);
  ++made_;
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.Wait = 5000;
  if (async_max_pending_ > 0) {
    jo.PublishAsync.MaxPending = async_max_pending_;
    jo.PublishAsync.ErrHandler = async_error_;
    jo.PublishAsync.ErrHandlerClosure = async_closure_;
  }
  s = natsConnection_JetStream(&js_, nc_, &jo);
  if (s != NATS_OK) {
    const std::string why = Error("JetStream context", s);
    Close();
    return Status::Unavailable(why);
  }
  KLOG_INFO("{}: connected to {}", what_, url_);
  return Status::Ok();
}

Status Connection::Up() const {
  if (nc_ == nullptr) return Status::Unavailable(what_ + ": not connected");
  if (down_.load()) {
    return Status::Unavailable(what_ + ": disconnected from " + url_ + ", reconnecting");
  }
  return Status::Ok();
}

natsStatus Connection::Flush(int64_t timeout_ms) {
  if (nc_ == nullptr) return NATS_OK;
  if (down_.load()) return NATS_CONNECTION_DISCONNECTED;
  return natsConnection_FlushTimeout(nc_, timeout_ms);
}

uint64_t Connection::connections() const {
  if (nc_ == nullptr) return made_;
  // Neither fails with both made (Ensure).
  uint64_t reconnects = 0;
  natsConnection_GetStats(nc_, stats_);
  natsStatistics_GetCounts(stats_, nullptr, nullptr, nullptr, nullptr, &reconnects);
  return (made_ << 32) + reconnects;
}

void Connection::Close() {
  if (js_ != nullptr) jsCtx_Destroy(js_);
  js_ = nullptr;
  if (nc_ != nullptr) {
    natsConnection_Close(nc_);
    // cnats delivers the disconnected and closed callbacks on its own thread,
    // after Close returns; they reach this object, so it waits for the last.
    std::unique_lock<std::mutex> lock(closed_mu_);
    if (!closed_cv_.wait_for(lock, std::chrono::seconds(10), [this] { return closed_; })) {
      KLOG_WARN("{}: the client library did not report the connection closed within 10 s",
                what_);
    }
    lock.unlock();
    natsConnection_Destroy(nc_);
  }
  nc_ = nullptr;
}

void Connection::OnClosed(natsConnection* nc, void* self) {
  (void)nc;
  auto* c = static_cast<Connection*>(self);
  std::lock_guard<std::mutex> lock(c->closed_mu_);
  c->closed_ = true;
  c->closed_cv_.notify_all();
}

void Connection::OnDisconnected(natsConnection* nc, void* self) {
  (void)nc;
  auto* c = static_cast<Connection*>(self);
  c->losses_.fetch_add(1);
  if (!c->down_.exchange(true)) KLOG_WARN("{}: disconnected from {}", c->what_, c->url_);
}

void Connection::OnReconnected(natsConnection* nc, void* self) {
  (void)nc;
  auto* c = static_cast<Connection*>(self);
  c->down_.store(false);
  KLOG_INFO("{}: reconnected to {}", c->what_, c->url_);
}

}  // namespace kayak::nats
