// The OPC UA binary codec against byte sequences captured from node-opcua
// 2.182.2's encoder (its Variant and DataValue encode(), the test server's
// library), and the reader against hostile lengths.
#include "connectors/opcua/binary.h"

#include <gtest/gtest.h>

#include <cstring>
#include <ctime>

#include <nlohmann/json.hpp>

#include "connectors/opcua/channel.h"

namespace kayak::opcua {
namespace {

std::string Hex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

std::string ToHex(std::string_view bytes) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    out.push_back(d[(static_cast<uint8_t>(c) >> 4) & 15]);
    out.push_back(d[static_cast<uint8_t>(c) & 15]);
  }
  return out;
}

std::string VariantJson(std::string_view hex, bool* ok = nullptr, std::string* why = nullptr) {
  const std::string bytes = Hex(hex);
  Reader r(bytes);
  std::string out, w;
  const bool good = VariantToJson(&r, &out, &w);
  if (ok != nullptr) *ok = good;
  if (why != nullptr) *why = w;
  EXPECT_FALSE(r.failed()) << hex << ": " << r.why();
  EXPECT_EQ(r.left(), 0u) << hex;
  return out;
}

TEST(OpcuaBinary, VariantsOfEveryBuiltInTypeAsJson) {
  // Captured from node-opcua: new Variant({dataType, value}).encode().
  EXPECT_EQ(VariantJson("0101"), "true");
  EXPECT_EQ(VariantJson("02fb"), "-5");
  EXPECT_EQ(VariantJson("03c8"), "200");
  EXPECT_EQ(VariantJson("04c7cf"), "-12345");
  EXPECT_EQ(VariantJson("0531d4"), "54321");
  EXPECT_EQ(VariantJson("06eb32a4f8"), "-123456789");
  EXPECT_EQ(VariantJson("0700286bee"), "4000000000");
  EXPECT_EQ(VariantJson("0801000000feffffff"), "-8589934591");
  EXPECT_EQ(VariantJson("09ffffffffffffffff"), "18446744073709551615");
  EXPECT_EQ(VariantJson("0a0000c03f"), "1.5");
  EXPECT_EQ(VariantJson("0b9a9999999999b9bf"), "-0.1");
  EXPECT_EQ(VariantJson("0c0b0000004772c3bcc39f6520e29883"), "\"Grüße ☃\"");
  EXPECT_EQ(VariantJson("0cffffffff"), "null");
  EXPECT_EQ(VariantJson("0de074a774947bdc01"), "\"2026-01-02T03:04:05.678Z\"");
  EXPECT_EQ(VariantJson("0e912b967275fae64a8d28b404dc7daf63"),
            "\"72962B91-FA75-4AE6-8D28-B404DC7DAF63\"");
  EXPECT_EQ(VariantJson("0f05000000000102faff"), "\"AAEC+v8=\"");
  EXPECT_EQ(VariantJson("10040000003c612f3e"), "\"<a/>\"");
  EXPECT_EQ(VariantJson("1102020070110100"), "\"ns=2;i=70000\"");
  EXPECT_EQ(VariantJson("110301000d000000506c616e742e436f756e746572"),
            "\"ns=1;s=Plant.Counter\"");
  EXPECT_EQ(VariantJson("11040300912b967275fae64a8d28b404dc7daf63"),
            "\"ns=3;g=72962B91-FA75-4AE6-8D28-B404DC7DAF63\"");
  EXPECT_EQ(VariantJson("1105040003000000000102"), "\"ns=4;b=AAEC\"");
  EXPECT_EQ(VariantJson("110055"), "\"i=85\"");
  EXPECT_EQ(VariantJson("110101e903"), "\"ns=1;i=1001\"");
  EXPECT_EQ(VariantJson("1300003480"), "\"BadNodeIdUnknown\"");
  EXPECT_EQ(VariantJson("1401000500000056616c7665"), "\"1:Valve\"");
  EXPECT_EQ(VariantJson("150302000000656e0600000050756d702031"), "\"Pump 1\"");
  EXPECT_EQ(VariantJson("860300000001000000feffffff03000000"), "[1,-2,3]");
  EXPECT_EQ(VariantJson("8c0200000001000000610100000062"), "[\"a\",\"b\"]");
  // A 2 x 2 matrix: its values flat, in their row order.
  EXPECT_EQ(VariantJson("c60400000001000000020000000300000004000000020000000200000002000000"),
            "[1,2,3,4]");
  EXPECT_EQ(VariantJson("00"), "null");
}

// The way back, for the round trip below: a value of built-in type `type`
// from its JSON, encoded as node-opcua encodes it (the client itself never
// writes values, so this encoder is the test's own).
void EncodeScalar(uint8_t type, const nlohmann::json& v, Writer* w) {
  std::string why;
  NodeId id;
  switch (type) {
    case 1: w->Bool(v.get<bool>()); return;
    case 2: w->Byte(static_cast<uint8_t>(v.get<int8_t>())); return;
    case 3: w->Byte(v.get<uint8_t>()); return;
    case 4: w->U16(static_cast<uint16_t>(v.get<int16_t>())); return;
    case 5: w->U16(v.get<uint16_t>()); return;
    case 6: w->I32(v.get<int32_t>()); return;
    case 7: w->U32(v.get<uint32_t>()); return;
    case 8: w->I64(v.get<int64_t>()); return;
    case 9: w->I64(static_cast<int64_t>(v.get<uint64_t>())); return;
    case 10: {
      const float f = v.get<float>();
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      w->U32(bits);
      return;
    }
    case 11: w->Double(v.get<double>()); return;
    case 12:
    case 16:
      if (v.is_null()) {
        w->NullString();
      } else {
        w->String(v.get<std::string>());
      }
      return;
    case 13: {  // "YYYY-MM-DDTHH:MM:SS.mmmZ"
      const std::string t = v.get<std::string>();
      struct tm tm {};
      strptime(t.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
      const int64_t ms = static_cast<int64_t>(timegm(&tm)) * 1000 + std::stoi(t.substr(20, 3));
      w->I64(TicksFromUnixMs(ms));
      return;
    }
    case 14:
      ASSERT_TRUE(ParseNodeId("g=" + v.get<std::string>(), &id, &why)) << why;
      w->out()->append(id.text);
      return;
    case 15:
      ASSERT_TRUE(ParseNodeId("b=" + v.get<std::string>(), &id, &why)) << why;
      w->String(id.text);
      return;
    case 17:
      ASSERT_TRUE(ParseNodeId(v.get<std::string>(), &id, &why)) << why;
      w->NodeId(id);
      return;
    case 19:
      ASSERT_EQ(v.get<std::string>(), "BadNodeIdUnknown");
      w->U32(0x80340000u);
      return;
    case 20: {
      const std::string q = v.get<std::string>();
      const size_t colon = q.find(':');
      w->U16(static_cast<uint16_t>(colon == std::string::npos ? 0 : std::stoi(q.substr(0, colon))));
      w->String(colon == std::string::npos ? q : q.substr(colon + 1));
      return;
    }
    default:
      FAIL() << "no encoder for type " << int(type);
  }
}

TEST(OpcuaBinary, EveryBuiltInTypeRoundTripsThroughItsJson) {
  // node-opcua's bytes -> JSON -> the same bytes again: the JSON keeps the
  // whole value. Not here, by design: a LocalizedText's locale and a
  // matrix's dimensions, which the JSON leaves out (docs/opcua.md).
  for (const char* hex : {"0101", "02fb", "03c8", "04c7cf", "0531d4", "06eb32a4f8", "0700286bee",
                          "0801000000feffffff", "09ffffffffffffffff", "0a0000c03f",
                          "0b9a9999999999b9bf", "0c0b0000004772c3bcc39f6520e29883", "0cffffffff",
                          "0de074a774947bdc01", "0e912b967275fae64a8d28b404dc7daf63",
                          "0f05000000000102faff", "10040000003c612f3e", "1102020070110100",
                          "110301000d000000506c616e742e436f756e746572",
                          "11040300912b967275fae64a8d28b404dc7daf63", "1105040003000000000102",
                          "110055", "110101e903", "1300003480", "1401000500000056616c7665",
                          "860300000001000000feffffff03000000", "8c0200000001000000610100000062",
                          "00"}) {
    const std::string bytes = Hex(hex);
    const auto value = nlohmann::json::parse(VariantJson(hex));
    std::string again;
    Writer w(&again);
    const uint8_t mask = static_cast<uint8_t>(bytes[0]);
    w.Byte(mask);
    if (mask & 0x80) {
      w.I32(static_cast<int32_t>(value.size()));
      for (const auto& e : value) EncodeScalar(mask & 0x3f, e, &w);
    } else if (mask != 0) {
      EncodeScalar(mask, value, &w);
    }
    EXPECT_EQ(ToHex(again), hex) << value.dump();
  }
}

TEST(OpcuaBinary, DataValuesWithTheirTimestamps) {
  auto json = [](std::string_view hex) {
    const std::string bytes = Hex(hex);
    Reader r(bytes);
    std::string out, why;
    EXPECT_TRUE(DataValueToJson(&r, &out, &why)) << why;
    EXPECT_EQ(r.left(), 0u);
    return out;
  };
  EXPECT_EQ(json("0d0b0000000000803540b02d37c32f82dd01c05437c32f82dd01"),
            "\"value\":21.5,\"status\":\"Good\",\"source_ts\":\"2026-12-02T07:35:54.123Z\","
            "\"server_ts\":\"2026-12-02T07:35:54.124Z\"");
  EXPECT_EQ(json("0200003280"), "\"value\":null,\"status\":\"BadWaitingForInitialData\"");
  // Source picoseconds are read past.
  EXPECT_EQ(json("150707000000b02d37c32f82dd013200"),
            "\"value\":7,\"status\":\"Good\",\"source_ts\":\"2026-12-02T07:35:54.123Z\"");
}

TEST(OpcuaBinary, ValuesAnInputCannotHandOnAreErrorsNotCrashes) {
  bool ok = true;
  std::string why;
  // An ExtensionObject (a structure) of type ns=0;i=864 with a 2-byte body.
  EXPECT_EQ(VariantJson("160100600301020000000102", &ok, &why), "");
  EXPECT_FALSE(ok);
  EXPECT_NE(why.find("i=864"), std::string::npos) << why;
  // A type id past the built-in ones.
  const std::string unknown = Hex("3f");
  Reader r(unknown);
  std::string out;
  EXPECT_FALSE(VariantToJson(&r, &out, &why));
  EXPECT_NE(why.find("unknown built-in type 63"), std::string::npos) << why;
  // A string that is not UTF-8.
  EXPECT_EQ(VariantJson("0c02000000c328", &ok, &why), "");
  EXPECT_FALSE(ok);
  EXPECT_NE(why.find("UTF-8"), std::string::npos);
  // In a DataValue the bad value becomes null and the rest is still read.
  const std::string dv = Hex("03" "160100600301020000000102" "00003280");
  Reader d(dv);
  out.clear();
  EXPECT_FALSE(DataValueToJson(&d, &out, &why));
  EXPECT_EQ(d.left(), 0u);
}

TEST(OpcuaBinary, HostileLengthsFailWithoutAllocating) {
  // A string claiming 2 GB in 4 bytes, an array of 2^31-1 Int32s, a
  // negative length, a truncated Guid.
  for (const char* hex : {"0cffffff7f", "86ffffff7f", "0e912b96", "0700", "8600000080"}) {
    const std::string bytes = Hex(hex);
    Reader r(bytes);
    std::string out, why;
    VariantToJson(&r, &out, &why);
    if (std::string_view(hex) == "8600000080") {
      EXPECT_EQ(out, "[]");  // a negative length is an empty array
      continue;
    }
    EXPECT_TRUE(r.failed()) << hex;
    EXPECT_LT(out.size(), 16u) << hex;
  }
  // Variants nested in arrays of Variants past the depth limit.
  std::string deep;
  for (int i = 0; i < 40; ++i) deep += Hex("9801000000");
  deep += Hex("0101");
  Reader r(deep);
  std::string out, why;
  EXPECT_FALSE(VariantToJson(&r, &out, &why));
  EXPECT_TRUE(r.failed());
}

TEST(OpcuaBinary, WriterEncodesNodeIdsInTheirShortestForm) {
  auto enc = [](const NodeId& id) {
    std::string out;
    Writer(&out).NodeId(id);
    return ToHex(out);
  };
  NodeId id;
  std::string why;
  ASSERT_TRUE(ParseNodeId("i=85", &id, &why));
  EXPECT_EQ(enc(id), "0055");
  ASSERT_TRUE(ParseNodeId("ns=1;i=1001", &id, &why));
  EXPECT_EQ(enc(id), "0101e903");
  ASSERT_TRUE(ParseNodeId("ns=2;i=70000", &id, &why));
  EXPECT_EQ(enc(id), "020200" "70110100");
  ASSERT_TRUE(ParseNodeId("ns=1;s=Plant.Counter", &id, &why));
  EXPECT_EQ(enc(id), "0301000d000000506c616e742e436f756e746572");
  ASSERT_TRUE(ParseNodeId("ns=3;g=72962B91-FA75-4AE6-8D28-B404DC7DAF63", &id, &why));
  EXPECT_EQ(enc(id), "040300912b967275fae64a8d28b404dc7daf63");
  ASSERT_TRUE(ParseNodeId("ns=4;b=AAEC", &id, &why));
  EXPECT_EQ(enc(id), "05040003000000000102");
  // And each reads back to the same text.
  for (const char* text : {"i=85", "ns=1;i=1001", "ns=2;i=70000", "ns=1;s=Plant.Counter",
                           "ns=3;g=72962B91-FA75-4AE6-8D28-B404DC7DAF63", "ns=4;b=AAEC",
                           "ns=65535;s=a;b=c"}) {
    ASSERT_TRUE(ParseNodeId(text, &id, &why)) << text << ": " << why;
    std::string bytes;
    Writer(&bytes).NodeId(id);
    Reader r(bytes);
    EXPECT_EQ(FormatNodeId(r.NodeId()), text);
    EXPECT_EQ(r.left(), 0u);
  }
}

TEST(OpcuaBinary, NodeIdTextErrorsSayWhatIsExpected) {
  NodeId id;
  std::string why;
  for (const char* bad : {"", "x=1", "ns=1;", "ns=70000;i=1", "i=-1", "i=99999999999",
                          "ns=1;g=nope", "g=72962B91-FA75-4AE6-8D28-B404DC7DAF6-",
                          "g=72962B91-FA75-4AE6-8D28--404DC7DAF63", "s=", "nsu=urn:x;s=a",
                          "ns=1;b=!!", "b=A"}) {
    EXPECT_FALSE(ParseNodeId(bad, &id, &why)) << bad;
    EXPECT_FALSE(why.empty()) << bad;
  }
}

TEST(OpcuaBinary, DateTimes) {
  std::string s;
  EXPECT_TRUE(FormatDateTime(TicksFromUnixMs(0), &s));
  EXPECT_EQ(s, "1970-01-01T00:00:00.000Z");
  s.clear();
  EXPECT_TRUE(FormatDateTime(TicksFromUnixMs(1764660954123) + 4567, &s));
  EXPECT_EQ(s, "2025-12-02T07:35:54.1234567Z");
  s.clear();
  EXPECT_FALSE(FormatDateTime(0, &s));          // "no time"
  EXPECT_FALSE(FormatDateTime(INT64_MAX, &s));  // "no time" either
  EXPECT_TRUE(s.empty());
}

TEST(OpcuaBinary, StatusNames) {
  EXPECT_EQ(StatusName(0), "Good");
  EXPECT_EQ(StatusName(0x80340000u), "BadNodeIdUnknown");
  EXPECT_EQ(StatusName(0x80340480u), "BadNodeIdUnknown");  // with info bits
  EXPECT_EQ(StatusName(0x80ab0000u), "Bad (0x80ab0000)");
  EXPECT_EQ(StatusName(0x40ab0000u), "Uncertain (0x40ab0000)");
}

TEST(OpcuaBinary, ResponseHeaderAndExtensionObject) {
  // timestamp, handle 7, BadTimeout, an empty DiagnosticInfo, no strings,
  // a null additional header.
  std::string bytes;
  Writer w(&bytes);
  w.I64(1);
  w.U32(7);
  w.U32(0x800a0000u);
  w.Byte(0);
  w.NullArray();
  w.NullExtensionObject();
  w.ExtensionObject(type_id::kAnonymousIdentityToken, "ab");
  Reader r(bytes);
  EXPECT_EQ(StatusName(r.ResponseHeader()), "BadTimeout");
  std::string_view body;
  EXPECT_EQ(r.ExtensionObject(&body).numeric, type_id::kAnonymousIdentityToken);
  EXPECT_EQ(body, "ab");
  EXPECT_FALSE(r.failed());
  EXPECT_EQ(r.left(), 0u);
}

TEST(OpcuaEndpoint, Urls) {
  Endpoint ep;
  std::string why;
  ASSERT_TRUE(ParseEndpoint("opc.tcp://127.0.0.1:4841/UA/kayak", &ep, &why)) << why;
  EXPECT_EQ(ep.host, "127.0.0.1");
  EXPECT_EQ(ep.port, 4841);
  ASSERT_TRUE(ParseEndpoint("opc.tcp://plc", &ep, &why)) << why;
  EXPECT_EQ(ep.port, 4840);
  ASSERT_TRUE(ParseEndpoint("opc.tcp://[::1]:5000/x", &ep, &why)) << why;
  EXPECT_EQ(ep.host, "::1");
  EXPECT_EQ(ep.port, 5000);
  for (const char* bad : {"http://h:1", "opc.tcp://:1", "opc.tcp://h:0", "opc.tcp://h:70000",
                          "opc.tcp://u:p@h:1", "opc.tcp://h:", "opc.tcp://[::1"}) {
    EXPECT_FALSE(ParseEndpoint(bad, &ep, &why)) << bad;
  }
}

}  // namespace
}  // namespace kayak::opcua
