// The redis connector's client side (hiredis 0.14): a connection made on
// first use and again after it broke, commands as argument vectors, replies
// owned by a smart pointer, and the stream entry ids it compares. hiredis
// 0.14 has no TLS: over TLS it speaks through a TlsTunnel's local socket.
#pragma once

#include <hiredis/hiredis.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "connectors/shared/tls.h"
#include "connectors/shared/tls_client.h"
#include "kayak/status.h"

namespace kayak::redis {

struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;

// redis://[[user]:password@]host[:port][/db], or rediss:// for TLS
struct Address {
  bool tls = false;  // rediss://
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string user, password;
  int db = 0;
};
// False with `error` when `url` is not such an address.
bool ParseUrl(std::string_view url, Address* out, std::string* error);

class Client {
 public:
  // Over TLS when the address is rediss:// or `tls.enabled`.
  Client(Address address, std::string what, TlsOptions tls = {})
      : address_(std::move(address)), what_(std::move(what)), tls_(std::move(tls)) {
    tls_.enabled = tls_.enabled || address_.tls;
  }
  ~Client() { Close(); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Connects (and authenticates, selects the database) if not connected.
  Status Ensure();
  void Close();
  bool connected() const { return c_ != nullptr; }
  redisContext* get() const { return c_; }

  // One command; a reply of type error is returned as a reply (the caller
  // decides), a broken connection as Unavailable (and closed).
  Status Command(const std::vector<std::string_view>& args, Reply* out, int timeout_ms = 10000);
  // Queues a command; its reply is read by ReadReply, in order.
  void Append(const std::vector<std::string_view>& args);
  Status ReadReply(Reply* out);
  // Waits up to `wait_ms` for a reply (a pushed pub/sub message): an empty
  // `out` when none came.
  Status Poll(int64_t wait_ms, Reply* out);

  std::string Error(const std::string& doing) const;
  const std::string& what() const { return what_; }

 private:
  Status Broken(const std::string& doing);
  void SetTimeout(int timeout_ms);

  const Address address_;
  const std::string what_;
  TlsOptions tls_;
  std::unique_ptr<TlsTunnel> tunnel_;  // over TLS: what c_'s socket leads through
  redisContext* c_ = nullptr;
  int timeout_ms_ = -1;
  std::vector<const char*> argv_;  // reused
  std::vector<size_t> argl_;
};

// A stream entry id, "ms-seq"; {0, 0} for text that is not one.
using EntryId = std::pair<uint64_t, uint64_t>;
EntryId ParseId(std::string_view id);
std::string IdText(EntryId id);

}  // namespace kayak::redis
