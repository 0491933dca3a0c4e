// libFuzzer target over the opcua input's decoder (src/connectors/opcua/
// binary.cc): the bytes as a Variant, a DataValue, and a response header
// followed by a NotificationMessage's data, and as NodeId text. Nothing may
// crash, hang or read out of bounds; a hostile length may not allocate (the
// run's -rss_limit_mb), and what comes out is bounded by what came in; every
// change handed on is valid JSON, and NodeId text reads back as it formats.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "connectors/opcua/binary.h"

namespace {

using kayak::opcua::Reader;

// JSON out per byte in, at most: an array of DataValues with an empty mask
// gives {"value":null,"status":"Good"} for one byte.
constexpr size_t kMaxGrowth = 64;

class CheckingSink final : public kayak::opcua::NotificationSink {
 public:
  void Change(uint32_t, std::string_view members) override {
    if (!nlohmann::json::accept("{" + std::string(members) + "}")) abort();
  }
  void Refused(uint32_t, std::string_view why) override {
    if (why.empty()) abort();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  {
    Reader r(input);
    std::string out, why;
    if (kayak::opcua::VariantToJson(&r, &out, &why) && !r.failed()) {
      if (!nlohmann::json::accept(out)) abort();
    }
    if (out.size() > kMaxGrowth * size + 256) abort();
  }
  {
    Reader r(input);
    std::string out, why;
    if (kayak::opcua::DataValueToJson(&r, &out, &why)) {
      if (!nlohmann::json::accept("{" + out + "}")) abort();
    }
    if (out.size() > kMaxGrowth * size + 256) abort();
  }
  {
    Reader r(input);
    r.ResponseHeader();
    CheckingSink sink;
    uint32_t status = 0;
    std::string why;
    if (!kayak::opcua::ReadNotificationData(&r, &sink, &status, &why) && why.empty()) abort();
  }
  {
    kayak::opcua::NodeId id;
    std::string why;
    if (kayak::opcua::ParseNodeId(input, &id, &why)) {
      kayak::opcua::NodeId again;
      if (!kayak::opcua::ParseNodeId(kayak::opcua::FormatNodeId(id), &again, &why)) abort();
      if (!(again == id)) abort();
    } else if (why.empty()) {
      abort();
    }
  }
  return 0;
}
