#include "connectors/mqtt/client.h"

#include <gtest/gtest.h>

namespace kayak::mqtt {
namespace {

TEST(MqttUrl, Parts) {
  Address a;
  std::string error;
  ASSERT_TRUE(ParseUrl("mqtt://127.0.0.1:21883", &a, &error)) << error;
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 21883);
  ASSERT_TRUE(ParseUrl("mqtt://broker/", &a, &error)) << error;
  EXPECT_EQ(a.host, "broker");
  EXPECT_EQ(a.port, 1883);
  EXPECT_FALSE(a.tls.enabled);
  EXPECT_FALSE(ParseUrl("tcp://h:1", &a, &error));
  // mqtts: TLS, on 8883 unless the url says
  Address t;
  ASSERT_TRUE(ParseUrl("mqtts://broker", &t, &error)) << error;
  EXPECT_EQ(t.port, 8883);
  EXPECT_TRUE(t.tls.enabled);
  ASSERT_TRUE(ParseUrl("mqtts://broker:9883", &t, &error)) << error;
  EXPECT_EQ(t.port, 9883);
  EXPECT_FALSE(ParseUrl("mqtt://u:p@h:1", &a, &error));
  EXPECT_NE(error.find("username"), std::string::npos);
  EXPECT_FALSE(ParseUrl("mqtt://h:0", &a, &error));
}

}  // namespace
}  // namespace kayak::mqtt
