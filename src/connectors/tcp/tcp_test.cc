// The tcp input over a real loopback socket: line splitting across reads,
// CR LF, a last line without its newline, bad and over-long lines counted.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "components.h"
#include "config/loader.h"
#include "test_util.h"

namespace kayak {
namespace {

void Send(int port, const std::vector<std::string>& pieces) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  for (const auto& p : pieces) {  // separate writes: lines cross read boundaries
    ASSERT_EQ(::write(fd, p.data(), p.size()), static_cast<ssize_t>(p.size()));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::close(fd);
}

TEST(TcpInput, SplitsLinesAndCountsBadOnes) {
  const int port = testing::FreeLoopbackPort(SOCK_STREAM);
  const ComponentDef* def = BuiltinComponents().Find("input", "tcp");
  ASSERT_NE(def, nullptr);
  ErrorList errors;
  YAML::Node value = YAML::Load("{listen: '127.0.0.1:" + std::to_string(port) +
                                "', max_line_bytes: 32}");
  ASSERT_TRUE(ValidateShape(*def, value, SourceMark{"t", 1, 1}, &errors)) << errors.ToString();
  YamlOptions opts(def, value, SourceMark{"t", 1, 1}, &errors);
  ComponentStats card("input", "input", "tcp");
  ComponentContext ctx;
  ctx.clock = SystemClock::Get();
  ctx.stats = &card;
  auto in = def->make_input(opts, ctx);
  ASSERT_NE(in, nullptr) << errors.ToString();
  ASSERT_TRUE(in->Open().ok());
  Send(port, {"{\"a\":", "1}\n{\"b\":2}\r\n", "not json\n",
              "{\"long\":\"" + std::string(40, 'x') + "\"}\n", "{\"c\":3}"});
  Batch got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (got.size() < 3 && std::chrono::steady_clock::now() < deadline) {
    bool finished = false;
    ASSERT_TRUE(in->Read(&got, 100, &finished).ok());
  }
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got.messages[0].payload(), "{\"a\":1}");
  EXPECT_EQ(got.messages[1].payload(), "{\"b\":2}");
  EXPECT_EQ(got.messages[2].payload(), "{\"c\":3}");  // the last line, ended by the close
  EXPECT_EQ(card.errors(), 2u);                         // not JSON; longer than 32 bytes
}

}  // namespace
}  // namespace kayak
