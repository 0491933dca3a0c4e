// The OPC UA TCP transport and a secure channel (OPC UA Part 6, sections 6.7
// and 7.1): Hello/Acknowledge, message chunks, OpenSecureChannel (issue and
// renew), CloseSecureChannel, error messages. With SecurityPolicy None the
// chunks go as they are; under a policy of security.h, OpenSecureChannel is
// signed with kayak's key and encrypted for the server's, and every chunk
// after is signed (mode Sign) or signed and encrypted (SignAndEncrypt) with
// the keys of its security token.
// One thread uses a channel; every wait is bounded by a timeout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "connectors/opcua/binary.h"
#include "connectors/opcua/security.h"
#include "kayak/status.h"

namespace kayak::opcua {

// "opc.tcp://host:port/path" (port 4840 when left out).
struct Endpoint {
  std::string url;
  std::string host;
  uint16_t port = 4840;
};
bool ParseEndpoint(std::string_view url, Endpoint* out, std::string* why);

// The steady clock in milliseconds (timeouts, renewals), and the wall clock
// as an OPC UA DateTime (request headers).
int64_t SteadyMs();
int64_t NowTicks();

// A service response: the request it answers, the numeric id of its
// encoding (type_id::kServiceFault for a fault) and the bytes after it.
struct Response {
  uint32_t request_id = 0;
  uint32_t type_id = 0;
  std::string body;
};

// MessageSecurityMode.
constexpr uint32_t kModeNone = 1, kModeSign = 2, kModeSignAndEncrypt = 3;

struct ChannelSecurity {
  const Policy* policy = nullptr;  // nullptr: SecurityPolicy None
  uint32_t mode = kModeNone;
  std::shared_ptr<const Identity> identity;  // kayak's certificate and key
  std::string server_certificate;            // DER, from the server's endpoint
};

class Channel {
 public:
  // `timeout_ms` bounds connecting and every exchange of the opening.
  explicit Channel(int timeout_ms) : timeout_ms_(timeout_ms) {}
  ~Channel() { Abort(); }
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Connects, says Hello and opens a secure channel. Unavailable when the
  // server cannot be reached or refuses; the message says which step.
  Status Open(const Endpoint& ep);
  bool is_open() const { return fd_ >= 0; }
  // The security of the channels opened from now on (None until set).
  void Secure(ChannelSecurity security) { sec_ = std::move(security); }
  bool secure() const { return sec_.policy != nullptr && sec_.mode != kModeNone; }

  // Sends a request: `body` is the encoded request after its type id,
  // split into chunks the server takes. Sets `*request_id`.
  Status Send(uint32_t type_id, std::string_view body, uint32_t* request_id);
  // Waits up to `wait_ms` for a whole response (`*got` false if none came).
  // A renewal's answer is taken here and not returned (`*got` false).
  Status Receive(int wait_ms, Response* out, bool* got);
  // Sends a request and waits for its answer: for the exchanges before any
  // other request is outstanding (a response to another is an error).
  Status Call(uint32_t type_id, std::string_view body, Response* out);

  // Times are steady-clock milliseconds.
  // True when three quarters of the security token's lifetime have passed
  // and no renewal is under way; SendRenew starts one.
  bool RenewDue(int64_t now_ms) const;
  Status SendRenew(int64_t now_ms);

  // Says CloseSecureChannel (no answer is expected) and closes the socket.
  void Close();
  // Closes the socket without a word.
  void Abort();

 private:
  Status WriteAll(std::string_view bytes);
  // Reads exactly `n` bytes into `out`, waiting up to `wait_ms` for the
  // first and the channel's timeout for the rest. `*got` false if the first
  // did not come in time.
  Status ReadExact(size_t n, std::string* out, int wait_ms, bool* got);
  Status SendOpen(uint32_t request_type, int64_t now_ms);
  // Signs and encrypts an OPN message whose header (up to the asymmetric
  // security header's end) is in `*m` and whose sequence header and body
  // are `plain`; appends the result.
  Status SealOpen(std::string* m, std::string plain);
  Status TakeOpenResponse(const std::string& head, std::string_view body, int64_t now_ms);
  // Appends one symmetric chunk (MSG or CLO) of `piece`, secured as the
  // channel is.
  Status AppendChunk(std::string* out, const char type[3], char chunk, uint32_t request,
                     std::string_view piece);
  // The most bytes of a message one chunk carries.
  size_t ChunkPayload() const;
  // Checks and strips a received MSG or CLO chunk's security in place:
  // `body` is what follows the header.
  Status Unseal(const std::string& head, std::string* body);
  Status Fail(const std::string& what);

  const int timeout_ms_;
  int fd_ = -1;
  std::string endpoint_url_;
  std::string rbuf_;  // bytes read, not yet taken
  size_t rpos_ = 0;
  // Limits from the server's Acknowledge.
  uint32_t send_chunk_ = 8192;
  uint32_t max_send_message_ = 0;  // 0: no limit
  uint32_t channel_id_ = 0;
  uint32_t token_id_ = 0;
  int64_t token_at_ms_ = 0;
  uint32_t lifetime_ms_ = 0;
  uint32_t sequence_ = 0;
  uint32_t request_id_ = 0;
  uint32_t renew_request_ = 0;  // the request id of a renewal under way, else 0
  ChannelSecurity sec_;
  EvpKey server_key_{nullptr, EVP_PKEY_free};
  std::string client_nonce_;  // of the last OpenSecureChannel sent
  // The keys of the newest security token and of the one before, which the
  // server may still use until it sees the new one.
  struct TokenKeys {
    uint32_t id = 0;
    SymKeys local, remote;
  };
  TokenKeys keys_[2];
  // Chunks of responses not yet whole, by request id.
  std::unordered_map<uint32_t, std::string> partial_;
  size_t partial_bytes_ = 0;
};

// What a client of this channel receives at most: one response, whole.
constexpr uint32_t kMaxMessageBytes = 64u << 20;
// The largest chunk this client takes (its ReceiveBufferSize).
constexpr uint32_t kReceiveChunkBytes = 1u << 16;

}  // namespace kayak::opcua
