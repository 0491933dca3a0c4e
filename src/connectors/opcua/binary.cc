#include "connectors/opcua/binary.h"

#include <simdjson.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "common/base64.h"
#include "common/json_text.h"

namespace kayak::opcua {

namespace {

// Ticks between 1601-01-01 and 1970-01-01.
constexpr int64_t kUnixEpochTicks = 116444736000000000LL;
// Nested Variants (an array of Variants holding arrays ...) and
// DiagnosticInfos are bounded so a hostile message cannot exhaust the stack.
constexpr int kMaxDepth = 16;

bool DecodeBase64(std::string_view in, std::string* out) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  uint32_t acc = 0;
  int bits = 0;
  for (const char c : in) {
    const int v = val(c);
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return true;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A Guid's text form "XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX" to its 16 encoded
// bytes (Data1 to Data3 little-endian, Data4 as it is).
bool ParseGuid(std::string_view s, std::string* out) {
  if (s.size() != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-') return false;
  uint8_t b[16];
  int n = 0;
  for (size_t i = 0; i < s.size(); i += 2) {
    if (i == 8 || i == 13 || i == 18 || i == 23) ++i;  // the dashes, checked above
    const int hi = HexValue(s[i]), lo = HexValue(s[i + 1]);
    if (hi < 0 || lo < 0) return false;
    b[n++] = static_cast<uint8_t>(hi * 16 + lo);
  }
  // Text order is big-endian; the first three fields are encoded little-endian.
  const uint8_t enc[16] = {b[3], b[2], b[1],  b[0],  b[5],  b[4],  b[7],  b[6],
                           b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]};
  out->assign(reinterpret_cast<const char*>(enc), 16);
  return true;
}

void AppendGuid(std::string_view enc, std::string* out) {
  const auto* e = reinterpret_cast<const uint8_t*>(enc.data());
  char buf[40];
  std::snprintf(buf, sizeof buf,
                "%02X%02X%02X%02X-%02X%02X-%02X%02X-%02X%02X-%02X%02X%02X%02X%02X%02X", e[3], e[2],
                e[1], e[0], e[5], e[4], e[7], e[6], e[8], e[9], e[10], e[11], e[12], e[13], e[14],
                e[15]);
  out->append(buf);
}

bool ParseUint(std::string_view s, uint64_t max, uint64_t* out) {
  if (s.empty() || s.size() > 10) return false;
  uint64_t v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > max) return false;
  *out = v;
  return true;
}

}  // namespace

bool ParseNodeId(std::string_view text, NodeId* out, std::string* why) {
  NodeId id;
  std::string_view rest = text;
  if (rest.substr(0, 3) == "ns=") {
    const size_t semi = rest.find(';');
    uint64_t ns = 0;
    if (semi == std::string_view::npos || !ParseUint(rest.substr(3, semi - 3), 65535, &ns)) {
      *why = "'" + std::string(text) + "' is not a NodeId: ns= takes a number 0 to 65535, then ';'";
      return false;
    }
    id.ns = static_cast<uint16_t>(ns);
    rest.remove_prefix(semi + 1);
  } else if (rest.substr(0, 4) == "nsu=") {
    *why = "'" + std::string(text) +
           "': a namespace URI (nsu=) is not supported; give its index (ns=)";
    return false;
  }
  if (rest.size() < 2 || rest[1] != '=') {
    *why = "'" + std::string(text) +
           "' is not a NodeId: expected i=, s=, g= or b= (for example ns=1;s=Plant.Counter)";
    return false;
  }
  const std::string_view value = rest.substr(2);
  switch (rest[0]) {
    case 'i': {
      uint64_t v = 0;
      if (!ParseUint(value, 0xffffffffu, &v)) {
        *why = "'" + std::string(text) + "': i= takes a number 0 to 4294967295";
        return false;
      }
      id.kind = NodeId::Kind::kNumeric;
      id.numeric = static_cast<uint32_t>(v);
      break;
    }
    case 's':
      if (value.empty()) {
        *why = "'" + std::string(text) + "': s= takes a non-empty string";
        return false;
      }
      id.kind = NodeId::Kind::kString;
      id.text = std::string(value);
      break;
    case 'g':
      id.kind = NodeId::Kind::kGuid;
      if (!ParseGuid(value, &id.text)) {
        *why =
            "'" + std::string(text) + "': g= takes a Guid (XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX)";
        return false;
      }
      break;
    case 'b':
      id.kind = NodeId::Kind::kBytes;
      if (value.empty() || !DecodeBase64(value, &id.text) || id.text.empty()) {
        *why = "'" + std::string(text) + "': b= takes base64";
        return false;
      }
      break;
    default:
      *why = "'" + std::string(text) +
             "' is not a NodeId: expected i=, s=, g= or b= (for example ns=1;s=Plant.Counter)";
      return false;
  }
  *out = std::move(id);
  return true;
}

std::string FormatNodeId(const NodeId& id) {
  std::string s;
  if (id.ns != 0) s = "ns=" + std::to_string(id.ns) + ";";
  switch (id.kind) {
    case NodeId::Kind::kNumeric:
      s += "i=" + std::to_string(id.numeric);
      break;
    case NodeId::Kind::kString:
      s += "s=" + id.text;
      break;
    case NodeId::Kind::kGuid:
      s += "g=";
      if (id.text.size() == 16) AppendGuid(id.text, &s);
      break;
    case NodeId::Kind::kBytes:
      s += "b=";
      AppendBase64(id.text, &s);
      break;
  }
  return s;
}

int64_t TicksFromUnixMs(int64_t ms) { return ms * 10000 + kUnixEpochTicks; }

bool FormatDateTime(int64_t ticks, std::string* out) {
  if (ticks <= 0 || ticks == INT64_MAX) return false;
  const int64_t since_unix = ticks - kUnixEpochTicks;
  int64_t secs = since_unix / 10000000;
  int64_t frac = since_unix % 10000000;
  if (frac < 0) {
    frac += 10000000;
    --secs;
  }
  const time_t t = static_cast<time_t>(secs);
  struct tm tm {};
  if (gmtime_r(&t, &tm) == nullptr || tm.tm_year + 1900 > 9999) return false;
  char buf[48];
  if (frac % 10000 == 0) {
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  static_cast<int>(frac / 10000));
  } else {
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%07dZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  static_cast<int>(frac));
  }
  out->append(buf);
  return true;
}

std::string StatusName(uint32_t code) {
  static constexpr struct {
    uint32_t code;
    const char* name;
  } kNames[] = {
      {0x00000000u, "Good"},
      {0x002f0000u, "GoodOverload"},
      {0x40900000u, "UncertainLastUsableValue"},
      {0x408f0000u, "UncertainNoCommunicationLastUsableValue"},
      {0x40930000u, "UncertainSensorNotAccurate"},
      {0x40920000u, "UncertainInitialValue"},
      {0x80010000u, "BadUnexpectedError"},
      {0x80020000u, "BadInternalError"},
      {0x80030000u, "BadOutOfMemory"},
      {0x80050000u, "BadCommunicationError"},
      {0x80060000u, "BadEncodingError"},
      {0x80070000u, "BadDecodingError"},
      {0x800a0000u, "BadTimeout"},
      {0x800b0000u, "BadServiceUnsupported"},
      {0x800c0000u, "BadShutdown"},
      {0x800d0000u, "BadServerNotConnected"},
      {0x800e0000u, "BadServerHalted"},
      {0x800f0000u, "BadNothingToDo"},
      {0x80100000u, "BadTooManyOperations"},
      {0x80120000u, "BadCertificateInvalid"},
      {0x80130000u, "BadSecurityChecksFailed"},
      {0x801f0000u, "BadUserAccessDenied"},
      {0x80200000u, "BadIdentityTokenInvalid"},
      {0x80210000u, "BadIdentityTokenRejected"},
      {0x80220000u, "BadSecureChannelIdInvalid"},
      {0x80250000u, "BadSessionIdInvalid"},
      {0x80260000u, "BadSessionClosed"},
      {0x80270000u, "BadSessionNotActivated"},
      {0x80280000u, "BadSubscriptionIdInvalid"},
      {0x80310000u, "BadNoCommunication"},
      {0x80320000u, "BadWaitingForInitialData"},
      {0x80330000u, "BadNodeIdInvalid"},
      {0x80340000u, "BadNodeIdUnknown"},
      {0x80350000u, "BadAttributeIdInvalid"},
      {0x803a0000u, "BadNotReadable"},
      {0x80420000u, "BadMonitoredItemIdInvalid"},
      {0x80550000u, "BadSecurityPolicyRejected"},
      {0x80560000u, "BadTooManySessions"},
      {0x80740000u, "BadTypeMismatch"},
      {0x80770000u, "BadTooManySubscriptions"},
      {0x80780000u, "BadTooManyPublishRequests"},
      {0x80790000u, "BadNoSubscription"},
      {0x807a0000u, "BadSequenceNumberUnknown"},
      {0x807b0000u, "BadMessageNotAvailable"},
      {0x807d0000u, "BadTcpServerTooBusy"},
      {0x80800000u, "BadTcpMessageTooLarge"},
      {0x80830000u, "BadTcpEndpointUrlInvalid"},
      {0x80850000u, "BadRequestTimeout"},
      {0x80860000u, "BadSecureChannelClosed"},
      {0x80870000u, "BadSecureChannelTokenUnknown"},
      {0x80880000u, "BadSequenceNumberInvalid"},
      {0x80890000u, "BadConfigurationError"},
      {0x808a0000u, "BadNotConnected"},
      {0x808b0000u, "BadDeviceFailure"},
      {0x808c0000u, "BadSensorFailure"},
      {0x808d0000u, "BadOutOfService"},
      {0x80ae0000u, "BadConnectionClosed"},
      {0x80b80000u, "BadRequestTooLarge"},
      {0x80b90000u, "BadResponseTooLarge"},
      {0x80db0000u, "BadTooManyMonitoredItems"},
  };
  // The low 16 bits are flags (overflow, limits) on the same condition.
  const uint32_t condition = code & 0xffff0000u;
  for (const auto& n : kNames) {
    if (n.code == condition) return n.name;
  }
  char buf[40];
  const char* severity = IsBad(code) ? "Bad" : (code & 0x40000000u) ? "Uncertain" : "Good";
  std::snprintf(buf, sizeof buf, "%s (0x%08x)", severity, code);
  return buf;
}

// ---------------- Writer ----------------

void Writer::Double(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  Fixed(bits, 8);
}

void Writer::String(std::string_view s) {
  I32(static_cast<int32_t>(s.size()));
  out_->append(s.data(), s.size());
}

void Writer::NodeId(const opcua::NodeId& id) {
  switch (id.kind) {
    case opcua::NodeId::Kind::kNumeric:
      if (id.ns == 0 && id.numeric <= 0xff) {
        Byte(0);
        Byte(static_cast<uint8_t>(id.numeric));
      } else if (id.ns <= 0xff && id.numeric <= 0xffff) {
        Byte(1);
        Byte(static_cast<uint8_t>(id.ns));
        U16(static_cast<uint16_t>(id.numeric));
      } else {
        Byte(2);
        U16(id.ns);
        U32(id.numeric);
      }
      return;
    case opcua::NodeId::Kind::kString:
      Byte(3);
      U16(id.ns);
      String(id.text);
      return;
    case opcua::NodeId::Kind::kGuid:
      Byte(4);
      U16(id.ns);
      out_->append(id.text.data(), 16);
      return;
    case opcua::NodeId::Kind::kBytes:
      Byte(5);
      U16(id.ns);
      String(id.text);
      return;
  }
}

void Writer::ExtensionObject(uint32_t encoding_id, std::string_view body) {
  NodeId(opcua::NodeId::Numeric(0, encoding_id));
  Byte(1);
  String(body);
}

void Writer::RequestHeader(const opcua::NodeId& auth_token, int64_t now_ticks, uint32_t handle,
                           uint32_t timeout_ms) {
  NodeId(auth_token);
  I64(now_ticks);
  U32(handle);
  U32(0);        // returnDiagnostics: none
  NullString();  // auditEntryId
  U32(timeout_ms);
  NullExtensionObject();  // additionalHeader
}

// ---------------- Reader ----------------

uint64_t Reader::Fixed(int bytes) {
  if (failed_ || left() < static_cast<size_t>(bytes)) {
    Fail("truncated");
    p_ = end_;
    return 0;
  }
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<uint8_t>(p_[i])) << (8 * i);
  p_ += bytes;
  return v;
}

uint8_t Reader::Byte() { return static_cast<uint8_t>(Fixed(1)); }

float Reader::Float() {
  const uint32_t bits = U32();
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

double Reader::Double() {
  const uint64_t bits = U64();
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

std::string_view Reader::String(bool* is_null) {
  const int32_t n = I32();
  if (is_null != nullptr) *is_null = n < 0;
  if (n <= 0 || failed_) return {};
  if (static_cast<size_t>(n) > left()) {
    Fail("truncated");
    p_ = end_;
    return {};
  }
  std::string_view s(p_, static_cast<size_t>(n));
  p_ += n;
  return s;
}

opcua::NodeId Reader::NodeId() {
  opcua::NodeId id;
  const uint8_t enc = Byte();
  switch (enc & 0x3f) {
    case 0:
      id.numeric = Byte();
      break;
    case 1:
      id.ns = Byte();
      id.numeric = U16();
      break;
    case 2:
      id.ns = U16();
      id.numeric = U32();
      break;
    case 3:
      id.ns = U16();
      id.kind = opcua::NodeId::Kind::kString;
      id.text = std::string(String());
      break;
    case 4:
      id.ns = U16();
      id.kind = opcua::NodeId::Kind::kGuid;
      if (left() < 16) {
        Fail("truncated");
        p_ = end_;
        break;
      }
      id.text.assign(p_, 16);
      p_ += 16;
      break;
    case 5:
      id.ns = U16();
      id.kind = opcua::NodeId::Kind::kBytes;
      id.text = std::string(String());
      break;
    default:
      Fail("a NodeId of unknown encoding " + std::to_string(enc));
  }
  // Only an ExpandedNodeId may carry these flags.
  if ((enc & 0xc0) != 0 && !expanding_) Fail("a NodeId with ExpandedNodeId flags");
  last_flags_ = enc & 0xc0;
  return id;
}

opcua::NodeId Reader::ExpandedNodeId() {
  expanding_ = true;
  opcua::NodeId id = NodeId();
  expanding_ = false;
  if (last_flags_ & 0x80) SkipString();  // namespace URI
  if (last_flags_ & 0x40) U32();         // server index
  return id;
}

size_t Reader::ArrayLength(size_t min_element_bytes) {
  const int32_t n = I32();
  if (n <= 0 || failed_) return 0;
  if (static_cast<size_t>(n) > left() / std::max<size_t>(min_element_bytes, 1)) {
    Fail("an array of " + std::to_string(n) + " elements in " + std::to_string(left()) + " bytes");
    p_ = end_;
    return 0;
  }
  return static_cast<size_t>(n);
}

opcua::NodeId Reader::ExtensionObject(std::string_view* body) {
  opcua::NodeId type = NodeId();
  const uint8_t enc = Byte();
  *body = {};
  if (enc == 1) {
    *body = String();
  } else if (enc == 2) {
    Fail("an ExtensionObject in XML");
  } else if (enc != 0) {
    Fail("an ExtensionObject of unknown encoding " + std::to_string(enc));
  }
  return type;
}

void Reader::SkipStringArray() {
  const size_t n = ArrayLength(4);
  for (size_t i = 0; i < n && !failed_; ++i) SkipString();
}

void Reader::SkipLocalizedText() {
  const uint8_t mask = Byte();
  if (mask & 0x01) SkipString();
  if (mask & 0x02) SkipString();
}

void Reader::SkipDiagnosticInfo(int depth) {
  if (depth > kMaxDepth) {
    Fail("DiagnosticInfos nested too deep");
    return;
  }
  const uint8_t mask = Byte();
  if (mask & 0x01) I32();         // symbolic id
  if (mask & 0x02) I32();         // namespace URI
  if (mask & 0x08) I32();         // locale
  if (mask & 0x04) I32();         // localized text
  if (mask & 0x10) SkipString();  // additional info
  if (mask & 0x20) U32();         // inner status code
  if (mask & 0x40) SkipDiagnosticInfo(depth + 1);
}

void Reader::SkipDiagnosticInfos() {
  const size_t n = ArrayLength(1);
  for (size_t i = 0; i < n && !failed_; ++i) SkipDiagnosticInfo();
}

uint32_t Reader::ResponseHeader() {
  I64();  // timestamp
  U32();  // requestHandle
  const uint32_t result = U32();
  SkipDiagnosticInfo();
  SkipStringArray();  // stringTable
  std::string_view body;
  ExtensionObject(&body);  // additionalHeader
  return result;
}

// ---------------- Variant and DataValue as JSON ----------------

namespace {

bool AppendUtf8(std::string_view s, std::string* out, std::string* why) {
  if (!simdjson::validate_utf8(s.data(), s.size())) {
    *why = "a string that is not UTF-8";
    return false;
  }
  jtext::AppendString(out, s);
  return true;
}

void AppendFloating(double v, std::string* out) {
  if (!std::isfinite(v)) {
    out->append("null");
    return;
  }
  jtext::AppendDouble(out, v);
}

// One scalar of built-in type `type` as JSON.
bool ScalarToJson(Reader* r, uint8_t type, std::string* out, std::string* why, int depth) {
  switch (type) {
    case 1:
      out->append(r->Bool() ? "true" : "false");
      return true;
    case 2:
      jtext::AppendInt(out, static_cast<int8_t>(r->Byte()));
      return true;
    case 3:
      jtext::AppendInt(out, r->Byte());
      return true;
    case 4:
      jtext::AppendInt(out, static_cast<int16_t>(r->U16()));
      return true;
    case 5:
      jtext::AppendInt(out, r->U16());
      return true;
    case 6:
      jtext::AppendInt(out, r->I32());
      return true;
    case 7:
      jtext::AppendInt(out, r->U32());
      return true;
    case 8:
      jtext::AppendInt(out, r->I64());
      return true;
    case 9:
      jtext::AppendUint(out, r->U64());
      return true;
    case 10:
      AppendFloating(r->Float(), out);
      return true;
    case 11:
      AppendFloating(r->Double(), out);
      return true;
    case 12:
    case 16: {  // String, XmlElement
      bool null = false;
      const std::string_view s = r->String(&null);
      if (null) {
        out->append("null");
        return true;
      }
      return AppendUtf8(s, out, why);
    }
    case 13: {
      const int64_t ticks = r->I64();
      std::string ts;
      if (FormatDateTime(ticks, &ts)) {
        out->push_back('"');
        out->append(ts);
        out->push_back('"');
      } else {
        out->append("null");
      }
      return true;
    }
    case 14: {
      if (r->left() < 16) {
        r->Fail("truncated");
        return true;
      }
      const std::string_view g = r->Rest().substr(0, 16);
      out->push_back('"');
      AppendGuid(g, out);
      out->push_back('"');
      for (int i = 0; i < 4; ++i) r->U32();
      return true;
    }
    case 15: {
      bool null = false;
      const std::string_view s = r->String(&null);
      if (null) {
        out->append("null");
        return true;
      }
      out->push_back('"');
      AppendBase64(s, out);
      out->push_back('"');
      return true;
    }
    case 17:
    case 18: {
      const NodeId id = type == 17 ? r->NodeId() : r->ExpandedNodeId();
      if (id.kind == NodeId::Kind::kString &&
          !simdjson::validate_utf8(id.text.data(), id.text.size())) {
        *why = "a NodeId that is not UTF-8";
        return false;
      }
      jtext::AppendString(out, FormatNodeId(id));
      return true;
    }
    case 19:
      jtext::AppendString(out, StatusName(r->U32()));
      return true;
    case 20: {
      const uint16_t ns = r->U16();
      const std::string_view name = r->String();
      std::string text = ns == 0 ? std::string(name) : std::to_string(ns) + ":" + std::string(name);
      return AppendUtf8(text, out, why);
    }
    case 21: {
      const uint8_t mask = r->Byte();
      if (mask & 0x01) r->SkipString();  // locale
      if (!(mask & 0x02)) {
        out->append("null");
        return true;
      }
      return AppendUtf8(r->String(), out, why);
    }
    case 22: {
      std::string_view body;
      const NodeId t = r->ExtensionObject(&body);
      if (r->failed()) return true;
      *why = "a structure value (ExtensionObject of type " + FormatNodeId(t) +
             ") is not decoded by the opcua input";
      return false;
    }
    case 23: {
      out->push_back('{');
      const bool ok = DataValueToJson(r, out, why);
      out->push_back('}');
      return ok;
    }
    case 24:
      return VariantToJson(r, out, why, depth + 1);
    case 25:
      r->SkipDiagnosticInfo();
      *why = "a DiagnosticInfo value is not handed on by the opcua input";
      return false;
    default:
      *why = "a value of unknown built-in type " + std::to_string(type);
      return false;
  }
}

// The fewest bytes one element of `type` takes, to bound an array's length.
size_t MinBytes(uint8_t type) {
  switch (type) {
    case 1:
    case 2:
    case 3:
      return 1;
    case 4:
    case 5:
      return 2;
    case 6:
    case 7:
    case 10:
    case 12:
    case 15:
    case 16:
    case 19:
      return 4;
    case 8:
    case 9:
    case 11:
    case 13:
      return 8;
    case 14:
      return 16;
    default:
      return 1;
  }
}

}  // namespace

bool VariantToJson(Reader* r, std::string* out, std::string* why, int depth) {
  if (depth > kMaxDepth) {
    *why = "Variants nested too deep";
    r->Fail(*why);
    return false;
  }
  const uint8_t mask = r->Byte();
  const uint8_t type = mask & 0x3f;
  if (r->failed()) return true;
  if (type == 0) {
    out->append("null");
    return true;
  }
  bool ok = true;
  if (mask & 0x80) {
    const size_t n = r->ArrayLength(MinBytes(type));
    out->push_back('[');
    for (size_t i = 0; i < n && !r->failed(); ++i) {
      if (i > 0) out->push_back(',');
      std::string ignored;
      // The first bad element names the problem; the rest are still read past.
      if (!ScalarToJson(r, type, out, ok ? why : &ignored, depth)) ok = false;
    }
    out->push_back(']');
    if (mask & 0x40) {  // dimensions: the values above are already flat
      const size_t dims = r->ArrayLength(4);
      for (size_t i = 0; i < dims && !r->failed(); ++i) r->I32();
    }
  } else {
    ok = ScalarToJson(r, type, out, why, depth);
  }
  return ok;
}

bool DataValueToJson(Reader* r, std::string* out, std::string* why) {
  const uint8_t mask = r->Byte();
  bool ok = true;
  out->append("\"value\":");
  if (mask & 0x01) {
    const size_t mark = out->size();
    ok = VariantToJson(r, out, why, 1);
    if (!ok) {
      out->resize(mark);
      out->append("null");
    }
  } else {
    out->append("null");
  }
  const uint32_t status = (mask & 0x02) ? r->U32() : 0;
  out->append(",\"status\":");
  jtext::AppendString(out, StatusName(status));
  std::string ts;
  if (mask & 0x04) {
    const int64_t t = r->I64();
    if (FormatDateTime(t, &ts)) {
      out->append(",\"source_ts\":\"").append(ts).push_back('"');
    }
  }
  if (mask & 0x10) r->U16();  // source picoseconds
  if (mask & 0x08) {
    const int64_t t = r->I64();
    ts.clear();
    if (FormatDateTime(t, &ts)) {
      out->append(",\"server_ts\":\"").append(ts).push_back('"');
    }
  }
  if (mask & 0x20) r->U16();  // server picoseconds
  if (r->failed()) {
    *why = "a malformed DataValue: " + r->why();
    return false;
  }
  return ok;
}

bool ReadNotificationData(Reader* r, NotificationSink* sink, uint32_t* status_change,
                          std::string* why) {
  std::string members;  // reused by every change of the message
  std::string refused;
  const size_t n = r->ArrayLength(8);
  for (size_t i = 0; i < n && !r->failed(); ++i) {
    std::string_view body;
    const NodeId type = r->ExtensionObject(&body);
    if (r->failed() || type.ns != 0 || type.kind != NodeId::Kind::kNumeric) continue;
    Reader b(body);
    if (type.numeric == type_id::kDataChangeNotification) {
      const size_t items = b.ArrayLength(5);
      for (size_t k = 0; k < items && !b.failed(); ++k) {
        const uint32_t handle = b.U32();
        members.clear();
        refused.clear();
        if (DataValueToJson(&b, &members, &refused)) {
          sink->Change(handle, members);
        } else if (!b.failed()) {
          sink->Refused(handle, refused);
        }
      }
      b.SkipDiagnosticInfos();
      if (b.failed()) {
        *why = "a malformed DataChangeNotification: " + b.why();
        return false;
      }
    } else if (type.numeric == type_id::kStatusChangeNotification) {
      const uint32_t status = b.U32();
      if (b.failed()) {
        *why = "a malformed StatusChangeNotification";
        return false;
      }
      *status_change = status;
    }
  }
  if (r->failed()) {
    *why = "a malformed NotificationMessage: " + r->why();
    return false;
  }
  return true;
}

}  // namespace kayak::opcua
