// An OPC UA client of the services an input needs (OPC UA Part 4): finds the
// server's endpoint of the configured SecurityPolicy and mode (GetEndpoints
// on a None channel), opens a channel to it, opens a session (CreateSession,
// ActivateSession: anonymous, user name and password, or a user certificate;
// on a secure channel each side proves it holds its certificate's key),
// browses and reads (Browse, BrowseNext, Read: the `kayak tool opcua`
// helper), subscribes to data changes of a list of variables
// (CreateSubscription, CreateMonitoredItems) and keeps Publish requests in
// flight, acknowledging what it received and asking again for what it
// missed (Republish).
//
// It runs on its caller's thread, which calls Poll() as it wants data: while
// it does not, the server's queues hold (or drop, by their size) the changes.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "connectors/opcua/binary.h"
#include "connectors/opcua/channel.h"
#include "kayak/status.h"

namespace kayak::opcua {

struct SessionOptions {
  Endpoint endpoint;
  // The channel's security: SecurityPolicy None unless `policy` is set,
  // with kayak's application instance certificate.
  const Policy* policy = nullptr;
  uint32_t mode = kModeNone;
  std::shared_ptr<const Identity> identity;
  // Certificates (or issuers) the server's certificate must be one of or
  // chain to; empty: the endpoint's certificate is taken as it comes.
  std::string server_trust_file;
  std::string username;  // empty: anonymous (or a user certificate)
  std::string password;
  std::shared_ptr<const Identity> user;  // log in with a user certificate
  int timeout_ms = 5000;
  std::string session_name = "kayak";
};

// A secure channel and a session activated on it, with the one-shot services
// a caller may want besides a subscription.
class Session {
 public:
  explicit Session(SessionOptions options) : o_(std::move(options)), channel_(o_.timeout_ms) {}
  ~Session() { Close(); }

  // Connects, finds the endpoint and its token policy, opens its channel,
  // creates and activates the session. Invalid for what connecting again
  // will not mend (no endpoint of the policy and mode, no token policy for
  // the login, a refused login, an untrusted server certificate);
  // Unavailable otherwise.
  Status Open();
  bool is_open() const { return channel_.is_open() && !auth_token_.IsNull(); }
  Channel& channel() { return channel_; }
  // The SHA-1 thumbprint (hex) of the server's certificate, once opened
  // under a policy; empty with SecurityPolicy None.
  const std::string& server_thumbprint() const { return server_thumbprint_; }
  // A RequestHeader carrying the session's token.
  std::string Header(uint32_t timeout_ms);

  // The forward hierarchical references of `node` (its children), all of
  // them (BrowseNext follows a continuation point).
  struct Reference {
    NodeId id;
    std::string browse_name;  // "ns:name" outside namespace 0
    std::string display_name;
    uint32_t node_class = 0;  // 1 Object, 2 Variable, 4 Method, ...
  };
  Status Browse(const NodeId& node, std::vector<Reference>* out);
  // The Value attribute of each of `nodes`, as DataValueToJson's members
  // (or {"error": ...} members when it cannot be handed on).
  Status Read(const std::vector<NodeId>& nodes, std::vector<std::string>* out);

  // Closes the session (deleting its subscriptions) and the channel; other
  // answers that come in between are dropped.
  void Close();
  // Closes the socket without a word.
  void Abort();

 private:
  Status CheckEndpoints();
  // Checks the chosen endpoint's certificate and opens a channel under the
  // policy.
  Status OpenSecure();
  Status CreateSession();
  Status ActivateSession();

  const SessionOptions o_;
  Channel channel_;
  NodeId auth_token_;
  std::string server_nonce_;
  std::string server_certificate_;  // DER, from the chosen endpoint
  std::string server_thumbprint_;
  std::string client_nonce_;
  std::string user_policy_id_;
  // The policy that encrypts the password or signs the user certificate's
  // proof: the token's own, else the channel's; nullptr: none (plain text).
  const Policy* user_policy_ = nullptr;
  uint32_t request_handle_ = 0;
};

struct SubscriberOptions {
  SessionOptions session;
  // The variables, as configured (each message's "node") and parsed.
  std::vector<std::string> node_texts;
  std::vector<NodeId> nodes;
  double sampling_ms = 100;
  double publishing_ms = 500;
  uint32_t queue_size = 10;
};

class Subscriber final : public NotificationSink {
 public:
  explicit Subscriber(SubscriberOptions options);
  ~Subscriber() override { Disconnect(); }

  // Connects and subscribes. Invalid for what connecting again will not
  // mend (Session::Open); Unavailable otherwise.
  Status Connect();
  bool connected() const { return session_.is_open() && subscription_id_ != 0; }
  const Session& session() const { return session_; }

  // Waits up to `wait_ms` for data changes and appends up to `max` of them,
  // each one message of JSON text, to `out`; a change that cannot be handed
  // on (a value of a type the input does not decode) goes to `errors`
  // instead. Unavailable when the connection or the subscription is lost
  // (connected() is then false).
  Status Poll(int wait_ms, size_t max, std::vector<std::string>* out,
              std::vector<std::string>* errors);

  // Closes the session (deleting its subscription) and the secure channel.
  void Disconnect();

  // Notifications the server no longer had when asked again.
  uint64_t missed() const { return missed_; }
  double revised_publishing_ms() const { return revised_publishing_ms_; }

 private:
  Status Lost(const std::string& why);
  Status CreateSubscription();
  Status CreateItems();
  Status SendPublish();
  // Takes one response of the publish loop.
  Status Take(Response& resp);
  // Reads a NotificationMessage's data into pending_ (NotificationSink).
  Status TakeNotification(Reader* r);
  void Change(uint32_t handle, std::string_view members) override;
  void Refused(uint32_t handle, std::string_view why) override;
  Status Republish(uint32_t sequence, bool* found);

  const SubscriberOptions o_;
  std::vector<std::string> prefixes_;  // per node: {"node":"<its text>",
  Session session_;
  uint32_t subscription_id_ = 0;
  double revised_publishing_ms_ = 0;
  uint32_t revised_keepalive_ = 0;
  std::unordered_set<uint32_t> publishes_;  // request ids of Publish requests in flight
  size_t publish_target_ = 3;
  std::vector<uint32_t> acks_;  // sequence numbers to acknowledge
  uint32_t last_sequence_ = 0;
  int64_t last_heard_ms_ = 0;
  std::deque<std::string> pending_;  // changes received, not yet handed on
  std::vector<std::string> pending_errors_;
  std::deque<Response> stash_;  // publish answers that came during a Republish
  uint64_t missed_ = 0;
};

}  // namespace kayak::opcua
