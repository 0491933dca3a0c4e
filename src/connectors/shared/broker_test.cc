#include "connectors/shared/broker.h"

#include <gtest/gtest.h>

namespace kayak {
namespace {

TEST(BrokerPayload, JsonIsTheMessageTextIsWrappedBinaryIsBase64) {
  BrokerPayload o;
  std::string out, why;
  ASSERT_TRUE(MakeBrokerPayload(" {\"a\":1} ", o, "", &out, &why));
  EXPECT_EQ(out, " {\"a\":1} ");
  ASSERT_TRUE(MakeBrokerPayload("21.5", o, "", &out, &why));
  EXPECT_EQ(out, "21.5");  // a number is JSON
  ASSERT_TRUE(MakeBrokerPayload("hé \"x\"", o, "", &out, &why));
  EXPECT_EQ(out, "{\"payload\":\"hé \\\"x\\\"\"}");
  ASSERT_TRUE(MakeBrokerPayload(std::string("\xff\x00", 2), o, "", &out, &why));
  EXPECT_EQ(out, "{\"payload_base64\":\"/wA=\"}");
  ASSERT_TRUE(MakeBrokerPayload("", o, "", &out, &why));
  EXPECT_EQ(out, "{\"payload\":\"\"}");
}

TEST(BrokerPayload, ErrorModeRefusesWhatIsNotJson) {
  BrokerPayload o;
  o.non_json = NonJson::kError;
  std::string out, why;
  EXPECT_FALSE(MakeBrokerPayload("plain", o, "", &out, &why));
  EXPECT_NE(why.find("not JSON"), std::string::npos);
  EXPECT_TRUE(MakeBrokerPayload("[1]", o, "", &out, &why));
}

TEST(BrokerPayload, MetaGoesFirstIntoObjectsOnly) {
  BrokerPayload o;
  o.meta_field = "m";
  std::string out, why;
  ASSERT_TRUE(MakeBrokerPayload("{\"a\":1}", o, "{\"t\":\"x\"}", &out, &why));
  EXPECT_EQ(out, "{\"m\":{\"t\":\"x\"},\"a\":1}");
  ASSERT_TRUE(MakeBrokerPayload("{ }", o, "{}", &out, &why));
  EXPECT_EQ(out, "{\"m\":{} }");  // the rest of the bytes as they were
  ASSERT_TRUE(MakeBrokerPayload("[1]", o, "{}", &out, &why));
  EXPECT_EQ(out, "[1]");
  ASSERT_TRUE(MakeBrokerPayload("text", o, "{}", &out, &why));
  EXPECT_EQ(out, "{\"m\":{},\"payload\":\"text\"}");
}

TEST(FieldTemplate, RendersFieldsOfTheMessage) {
  FieldTemplate t;
  std::string error, out, why;
  ASSERT_TRUE(FieldTemplate::Parse("out/{{device}}/{{ a.b[1] }}/x", &t, &error)) << error;
  EXPECT_FALSE(t.fixed());
  ASSERT_TRUE(t.Render(R"({"device":"d\/1","a":{"b":[0,2.5]}})", &out, &why)) << why;
  EXPECT_EQ(out, "out/d/1/2.5/x");
  EXPECT_FALSE(t.Render(R"({"a":{"b":[0,1]}})", &out, &why));
  EXPECT_NE(why.find("no field `device`"), std::string::npos) << why;
  EXPECT_FALSE(t.Render(R"({"device":"","a":{"b":[0,1]}})", &out, &why));
  EXPECT_NE(why.find("empty string"), std::string::npos) << why;
  EXPECT_FALSE(t.Render(R"({"device":{},"a":{"b":[0,1]}})", &out, &why));
  EXPECT_NE(why.find("object"), std::string::npos) << why;
}

TEST(FieldTemplate, FixedTextAndBadTemplates) {
  FieldTemplate t;
  std::string error;
  ASSERT_TRUE(FieldTemplate::Parse("plain.subject", &t, &error));
  EXPECT_TRUE(t.fixed());
  EXPECT_EQ(t.text(), "plain.subject");
  EXPECT_FALSE(FieldTemplate::Parse("a.{{b", &t, &error));
  EXPECT_NE(error.find("not closed"), std::string::npos);
  EXPECT_FALSE(FieldTemplate::Parse("a.{{}}", &t, &error));
  EXPECT_FALSE(FieldTemplate::Parse("a.{{x[}}", &t, &error));
}

}  // namespace
}  // namespace kayak
