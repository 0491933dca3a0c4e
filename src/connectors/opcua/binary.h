// OPC UA Binary encoding (OPC UA Part 6, section 5.2): the built-in types a
// client of the services in client.h meets, written little-endian into a
// std::string and read back by a bounds-checked reader. Values an input
// hands on become JSON text (DataValueToJson).
//
// The reader never throws and never reads past its bytes: a read that does
// not fit sets failed() and returns zero, and a length is checked against the
// bytes left before anything is allocated for it, so hostile lengths cost
// nothing (tests/fuzz/opcua_fuzz.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kayak::opcua {

// Numeric ids of the binary encodings of the structures client.cc sends and
// reads (the namespace 0 NodeIds "<Type>_Encoding_DefaultBinary").
namespace type_id {
constexpr uint32_t kServiceFault = 397;
constexpr uint32_t kGetEndpointsRequest = 428, kGetEndpointsResponse = 431;
constexpr uint32_t kOpenSecureChannelRequest = 446, kOpenSecureChannelResponse = 449;
constexpr uint32_t kCloseSecureChannelRequest = 452;
constexpr uint32_t kCreateSessionRequest = 461, kCreateSessionResponse = 464;
constexpr uint32_t kActivateSessionRequest = 467, kActivateSessionResponse = 470;
constexpr uint32_t kCloseSessionRequest = 473, kCloseSessionResponse = 476;
constexpr uint32_t kBrowseRequest = 527, kBrowseResponse = 530;
constexpr uint32_t kBrowseNextRequest = 533, kBrowseNextResponse = 536;
constexpr uint32_t kReadRequest = 631, kReadResponse = 634;
constexpr uint32_t kCreateMonitoredItemsRequest = 751, kCreateMonitoredItemsResponse = 754;
constexpr uint32_t kCreateSubscriptionRequest = 787, kCreateSubscriptionResponse = 790;
constexpr uint32_t kPublishRequest = 826, kPublishResponse = 829;
constexpr uint32_t kRepublishRequest = 832, kRepublishResponse = 835;
constexpr uint32_t kAnonymousIdentityToken = 321, kUserNameIdentityToken = 324,
                   kX509IdentityToken = 327;
constexpr uint32_t kDataChangeNotification = 811, kStatusChangeNotification = 820;
}  // namespace type_id

// A NodeId in any of its forms. `text` holds a String or ByteString
// identifier, or a Guid's 16 bytes in their encoded order.
struct NodeId {
  enum class Kind : uint8_t { kNumeric, kString, kGuid, kBytes };
  uint16_t ns = 0;
  Kind kind = Kind::kNumeric;
  uint32_t numeric = 0;
  std::string text;

  static NodeId Numeric(uint16_t ns, uint32_t id) { return NodeId{ns, Kind::kNumeric, id, {}}; }
  bool IsNull() const { return ns == 0 && kind == Kind::kNumeric && numeric == 0; }
  bool operator==(const NodeId& o) const {
    return ns == o.ns && kind == o.kind && numeric == o.numeric && text == o.text;
  }
};

// Parses the text form of Part 6, 5.3.1.10: "i=2258", "ns=1;s=Plant.Counter",
// "ns=2;g=72962B91-FA75-4AE6-8D28-B404DC7DAF63", "ns=1;b=<base64>". False
// with `*why` when it is not one.
bool ParseNodeId(std::string_view text, NodeId* out, std::string* why);
// The same form back ("ns=0;" left out).
std::string FormatNodeId(const NodeId& id);

// DateTime: 100 ns ticks since 1601-01-01 UTC.
int64_t TicksFromUnixMs(int64_t ms);
// ISO 8601 in UTC with milliseconds ("2026-12-02T07:35:54.123Z"), or with
// all seven digits when the value has more than milliseconds. False for
// 0 and the maximum (the "no time" values) and for years past 9999.
bool FormatDateTime(int64_t ticks, std::string* out);

// A StatusCode's symbolic name for the codes an input reports ("Good",
// "BadNodeIdUnknown"), else its severity and the code in hex
// ("Bad (0x80ab0000)").
std::string StatusName(uint32_t code);
inline bool IsBad(uint32_t code) { return (code & 0x80000000u) != 0; }

class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}
  void Byte(uint8_t v) { out_->push_back(static_cast<char>(v)); }
  void Bool(bool v) { Byte(v ? 1 : 0); }
  void U16(uint16_t v) { Fixed(v, 2); }
  void U32(uint32_t v) { Fixed(v, 4); }
  void I32(int32_t v) { Fixed(static_cast<uint32_t>(v), 4); }
  void I64(int64_t v) { Fixed(static_cast<uint64_t>(v), 8); }
  void Double(double v);
  void String(std::string_view s);  // also ByteString
  void NullString() { I32(-1); }
  void NodeId(const opcua::NodeId& id);
  // An ExtensionObject holding a binary body of type `encoding_id` (ns 0).
  void ExtensionObject(uint32_t encoding_id, std::string_view body);
  void NullExtensionObject() { NodeId(opcua::NodeId{}), Byte(0); }
  // An empty array (length 0) and a null one (-1).
  void EmptyArray() { I32(0); }
  void NullArray() { I32(-1); }
  // The RequestHeader every service request starts with.
  void RequestHeader(const opcua::NodeId& auth_token, int64_t now_ticks, uint32_t handle,
                     uint32_t timeout_ms);
  std::string* out() { return out_; }

 private:
  void Fixed(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string* out_;
};

class Reader {
 public:
  explicit Reader(std::string_view bytes) : p_(bytes.data()), end_(bytes.data() + bytes.size()) {}

  bool failed() const { return failed_; }
  // Why it failed: the first problem met ("truncated", "a negative length").
  const std::string& why() const { return why_; }
  void Fail(std::string why) {
    if (!failed_) why_ = std::move(why);
    failed_ = true;
  }
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  std::string_view Rest() const { return {p_, left()}; }

  uint8_t Byte();
  bool Bool() { return Byte() != 0; }
  uint16_t U16() { return static_cast<uint16_t>(Fixed(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Fixed(4)); }
  int32_t I32() { return static_cast<int32_t>(Fixed(4)); }
  int64_t I64() { return static_cast<int64_t>(Fixed(8)); }
  uint64_t U64() { return Fixed(8); }
  float Float();
  double Double();
  // A String or ByteString as a view of the bytes (null and empty alike: ""),
  // `*is_null` set for a null one when given.
  std::string_view String(bool* is_null = nullptr);
  opcua::NodeId NodeId();
  // An ExpandedNodeId: the NodeId, with namespace URI and server index read
  // and dropped.
  opcua::NodeId ExpandedNodeId();
  // An array's length: -1 (null) becomes 0; a length that cannot fit in the
  // bytes left (each element takes at least `min_element_bytes`) fails.
  size_t ArrayLength(size_t min_element_bytes = 1);
  // An ExtensionObject: its type's NodeId and its binary body (an XML body
  // fails: a client of this library never asks for one).
  opcua::NodeId ExtensionObject(std::string_view* body);
  void SkipString() { String(); }
  void SkipStringArray();
  void SkipLocalizedText();
  void SkipDiagnosticInfo(int depth = 0);
  void SkipDiagnosticInfos();
  // The ResponseHeader every service response starts with; returns its
  // serviceResult.
  uint32_t ResponseHeader();

 private:
  uint64_t Fixed(int bytes);
  const char* p_;
  const char* end_;
  bool failed_ = false;
  bool expanding_ = false;  // reading an ExpandedNodeId: its flags are allowed
  uint8_t last_flags_ = 0;  // the ExpandedNodeId flags of the last NodeId read
  std::string why_;
};

// Reads a DataValue and appends its parts as JSON members (without braces):
// "value":...,"status":"Good","source_ts":"...","server_ts":"..." (a part
// the server left out is left out, but value and status are always there).
// False with `*why` for a value of a type an input cannot hand on (a
// structure in an ExtensionObject, a DiagnosticInfo) or malformed bytes;
// the reader has then skipped the DataValue when its bytes were whole.
bool DataValueToJson(Reader* r, std::string* out, std::string* why);
// A Variant as one JSON value: numbers as numbers (Int64 and UInt64 exact),
// strings as strings, DateTime as ISO 8601, ByteString as base64, Guid in
// its text form, NodeId in its text form, LocalizedText as its text,
// QualifiedName as "ns:name" ("name" in namespace 0), StatusCode as its
// name, arrays as arrays (a matrix flattened, in its row order), a null
// Variant as null. NaN and infinities become null.
bool VariantToJson(Reader* r, std::string* out, std::string* why, int depth = 0);

// Where ReadNotificationData hands what a NotificationMessage holds.
class NotificationSink {
 public:
  virtual ~NotificationSink() = default;
  // A data change of the monitored item with client handle `handle`: its
  // DataValue as JSON members (DataValueToJson), valid during the call.
  virtual void Change(uint32_t handle, std::string_view members) = 0;
  // A data change that cannot be handed on, and why.
  virtual void Refused(uint32_t handle, std::string_view why) = 0;
};

// Reads a NotificationMessage's notificationData (an array of
// ExtensionObjects): each data change goes to `sink`; event notifications
// are skipped; a StatusChangeNotification's status goes to `*status_change`
// (left as it is when there is none). False with `*why` when the bytes are
// malformed (the changes before the fault were handed on).
bool ReadNotificationData(Reader* r, NotificationSink* sink, uint32_t* status_change,
                          std::string* why);

}  // namespace kayak::opcua
