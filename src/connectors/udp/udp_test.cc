// The udp input over a real loopback socket: lines within a datagram, CR LF,
// bad lines and over-long datagrams counted, and the datagrams the kernel
// dropped for a full receive buffer counted on the card.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <memory>
#include <string>

#include "common/clock.h"
#include "components.h"
#include "config/loader.h"
#include "test_util.h"

namespace kayak {
namespace {

class UdpInputTest : public ::testing::Test {
 protected:
  void Make(const std::string& extra) {
    port_ = testing::FreeLoopbackPort(SOCK_DGRAM);
    const ComponentDef* def = BuiltinComponents().Find("input", "udp");
    ASSERT_NE(def, nullptr);
    ErrorList errors;
    YAML::Node value = YAML::Load("{listen: '127.0.0.1:" + std::to_string(port_) + "'" + extra +
                                  "}");
    ASSERT_TRUE(ValidateShape(*def, value, SourceMark{"t", 1, 1}, &errors)) << errors.ToString();
    YamlOptions opts(def, value, SourceMark{"t", 1, 1}, &errors);
    ComponentContext ctx;
    ctx.clock = SystemClock::Get();
    ctx.stats = &card_;
    in_ = def->make_input(opts, ctx);
    ASSERT_NE(in_, nullptr) << errors.ToString();
    ASSERT_TRUE(in_->Open().ok());
    out_ = ::socket(AF_INET, SOCK_DGRAM, 0);
  }
  void TearDown() override {
    if (out_ >= 0) ::close(out_);
  }
  void Send(const std::string& datagram) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::sendto(out_, datagram.data(), datagram.size(), 0,
                       reinterpret_cast<sockaddr*>(&a), sizeof(a)),
              static_cast<ssize_t>(datagram.size()));
  }
  // Reads until `n` messages came or 10 s passed.
  Batch ReadUntil(size_t n) {
    Batch got;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
      bool finished = false;
      EXPECT_TRUE(in_->Read(&got, 100, &finished).ok());
    }
    return got;
  }

  int port_ = 0;
  int out_ = -1;
  ComponentStats card_{"input", "input", "udp"};
  std::unique_ptr<Input> in_;
};

TEST_F(UdpInputTest, EachLineOfADatagramIsAMessageAndBadOnesAreCounted) {
  Make(", max_datagram_bytes: 64");
  Send("{\"a\":1}\n{\"b\":2}\r\n\nnot json\n");
  Send("{\"long\":\"" + std::string(80, 'x') + "\"}");
  Send("{\"c\":3}");
  const Batch got = ReadUntil(3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got.messages[0].payload(), "{\"a\":1}");
  EXPECT_EQ(got.messages[1].payload(), "{\"b\":2}");
  EXPECT_EQ(got.messages[2].payload(), "{\"c\":3}");
  EXPECT_EQ(card_.errors(), 2u);  // not JSON; a datagram past 64 bytes
  EXPECT_NE(in_->Position().find("2 datagrams"), std::string::npos) << in_->Position();
}

// Nobody reads while 3,000 datagrams of 1 KB arrive at a receive buffer of
// a few KB: the kernel drops most. The count comes with the next datagram
// queued after the drops, and goes on the card then.
TEST_F(UdpInputTest, DatagramsTheKernelDroppedAreCountedOnTheCard) {
  Make(", buffer_bytes: 4096");
  const std::string pad(1000, 'x');
  for (int i = 0; i < 3000; ++i) Send("{\"i\":" + std::to_string(i) + ",\"p\":\"" + pad + "\"}");
  Batch got;
  for (bool finished = false; got.size() < 3000;) {  // what the buffer held
    const size_t before = got.size();
    ASSERT_TRUE(in_->Read(&got, 100, &finished).ok());
    if (got.size() == before) break;
  }
  ASSERT_GE(got.size(), 1u);
  ASSERT_LT(got.size(), 3000u) << "nothing dropped: the buffer held every datagram";
  Send("{\"after\":1}");
  const size_t held = got.size();
  Batch more = ReadUntil(1);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(card_.errors(), 3000u - held) << card_.last_error();
  EXPECT_NE(card_.last_error().find("the kernel dropped"), std::string::npos) << card_.last_error();
}

}  // namespace
}  // namespace kayak
