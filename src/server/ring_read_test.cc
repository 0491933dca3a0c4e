#include "server/ring_read.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "test_util.h"

namespace kayak::http {
namespace {

using kayak::testing::KernelAllowsIoUring;

// Loopback TCP connections, as the listener has: `server[i]` is accepted
// from a connect of `client[i]`.
struct Connections {
  std::vector<int> server;
  std::vector<int> client;
  explicit Connections(size_t n) {
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(listener, 1024) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "no loopback listener: " << errno;
      if (listener >= 0) ::close(listener);
      return;
    }
    for (size_t i = 0; i < n; ++i) {
      const int c = ::socket(AF_INET, SOCK_STREAM, 0);
      if (c < 0 || ::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        ADD_FAILURE() << "connect " << i << ": " << errno;
        if (c >= 0) ::close(c);
        break;
      }
      const int s = ::accept(listener, nullptr, nullptr);
      if (s < 0) {
        ADD_FAILURE() << "accept " << i << ": " << errno;
        ::close(c);
        break;
      }
      client.push_back(c);
      server.push_back(s);
    }
    ::close(listener);
  }
  ~Connections() {
    for (int fd : server) ::close(fd);
    for (int fd : client) ::close(fd);
  }
  Connections(const Connections&) = delete;
  Connections& operator=(const Connections&) = delete;
};

// What a read's owner sees: its buffer and how the read ended.
struct Reading {
  char buf[64] = {};
  int result = 1;  // 1: not finished
  bool finished = false;
  static void Done(void* owner, int result) {
    auto* r = static_cast<Reading*>(owner);
    r->result = result;
    r->finished = true;
  }
};

// Runs `io` (this thread is its I/O thread) until `done` holds, 10 s at most.
template <typename Pred>
bool RunUntil(boost::asio::io_context& io, Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    io.restart();
    io.run_one_for(std::chrono::milliseconds(50));
  }
  return true;
}

// Room for this many descriptors (the hard limit allowing).
size_t RaiseFileLimit(size_t want) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur < want && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = std::min<rlim_t>(want, rl.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &rl);
    ::getrlimit(RLIMIT_NOFILE, &rl);
  }
  return rl.rlim_cur;
}

TEST(RingReader, IsReadyWhereTheKernelAllowsIoUringUnlessTurnedOff) {
  boost::asio::io_context io;
  {
    RingReader ring(io.get_executor());
    EXPECT_EQ(ring.Ready(), KernelAllowsIoUring());
  }
  ::setenv("KAYAK_NO_IO_URING_READS", "1", 1);
  RingReader off(io.get_executor());
  EXPECT_FALSE(off.Ready());
  ::unsetenv("KAYAK_NO_IO_URING_READS");
}

// More connections than the ring's submission queue (256) and its
// completion queue (512): every read lands in its own buffer, and each
// owner is let go once its read is handed back.
TEST(RingReader, ReadsEachConnectionIntoItsOwnBufferMoreThanTheRingHolds) {
  boost::asio::io_context io;
  RingReader ring(io.get_executor());
  if (!ring.Ready()) {
    EXPECT_FALSE(KernelAllowsIoUring());
    return;
  }
  const size_t n = std::min<size_t>(600, (RaiseFileLimit(1400) - 100) / 2);
  ASSERT_GT(n, RingReader::kEntries);
  Connections conns(n);
  ASSERT_EQ(conns.server.size(), n);
  std::vector<std::shared_ptr<Reading>> readings;
  for (size_t i = 0; i < n; ++i) {
    readings.push_back(std::make_shared<Reading>());
    ring.Read(conns.server[i], readings[i]->buf, sizeof readings[i]->buf, readings[i],
              &Reading::Done);
  }
  EXPECT_EQ(ring.in_flight(), n);
  // Into the kernel, then the data: the reads finish while this thread
  // writes, more of them than the completion queue has places for.
  io.poll();
  for (size_t i = 0; i < n; ++i) {
    const std::string msg = "request " + std::to_string(i);
    ASSERT_EQ(::write(conns.client[i], msg.data(), msg.size()), static_cast<ssize_t>(msg.size()));
  }
  ASSERT_TRUE(RunUntil(io, [&] {
    return std::all_of(readings.begin(), readings.end(), [](auto& r) { return r->finished; });
  })) << "reads still in flight: " << ring.in_flight();
  for (size_t i = 0; i < n; ++i) {
    const std::string msg = "request " + std::to_string(i);
    ASSERT_EQ(readings[i]->result, static_cast<int>(msg.size())) << i;
    EXPECT_EQ(std::string(readings[i]->buf, msg.size()), msg) << i;
    EXPECT_EQ(readings[i].use_count(), 1) << i;  // the ring let go
  }
  EXPECT_EQ(ring.in_flight(), 0u);

  // A second round reuses the slots: the same connections, read again.
  for (size_t i = 0; i < 3; ++i) {
    readings[i]->finished = false;
    ring.Read(conns.server[i], readings[i]->buf, sizeof readings[i]->buf, readings[i],
              &Reading::Done);
    ASSERT_EQ(::write(conns.client[i], "again", 5), 5);
  }
  ASSERT_TRUE(RunUntil(io, [&] {
    return readings[0]->finished && readings[1]->finished && readings[2]->finished;
  }));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(readings[i]->result, 5);
    EXPECT_EQ(std::string(readings[i]->buf, 5), "again");
  }
  EXPECT_EQ(ring.in_flight(), 0u);
}

// How the listener ends a read that waits (a timeout, a stop): the socket
// shut down for reading. A peer that closes ends it the same way.
TEST(RingReader, AReadWaitingForDataEndsWhenTheSocketIsShutDownOrThePeerCloses) {
  boost::asio::io_context io;
  RingReader ring(io.get_executor());
  if (!ring.Ready()) {
    EXPECT_FALSE(KernelAllowsIoUring());
    return;
  }
  Connections conns(2);
  ASSERT_EQ(conns.server.size(), 2u);
  auto shut = std::make_shared<Reading>();
  auto peer_gone = std::make_shared<Reading>();
  ring.Read(conns.server[0], shut->buf, sizeof shut->buf, shut, &Reading::Done);
  ring.Read(conns.server[1], peer_gone->buf, sizeof peer_gone->buf, peer_gone, &Reading::Done);
  io.poll();  // both in the kernel, waiting
  EXPECT_FALSE(shut->finished);
  EXPECT_FALSE(peer_gone->finished);
  ASSERT_EQ(::shutdown(conns.server[0], SHUT_RDWR), 0);
  ::close(conns.client[1]);
  conns.client[1] = ::dup(conns.client[0]);  // the destructor closes something real
  ASSERT_TRUE(RunUntil(io, [&] { return shut->finished && peer_gone->finished; }));
  EXPECT_EQ(shut->result, 0);
  EXPECT_EQ(peer_gone->result, 0);
  EXPECT_EQ(shut.use_count(), 1);
  EXPECT_EQ(ring.in_flight(), 0u);
}

// A server that stops with reads waiting lets go of their owners.
TEST(RingReader, LetsGoOfTheOwnersOfUnfinishedReadsWhenDestroyed) {
  boost::asio::io_context io;
  Connections conns(3);
  ASSERT_EQ(conns.server.size(), 3u);
  std::vector<std::shared_ptr<Reading>> readings;
  {
    RingReader ring(io.get_executor());
    if (!ring.Ready()) {
      EXPECT_FALSE(KernelAllowsIoUring());
      return;
    }
    for (size_t i = 0; i < 3; ++i) {
      readings.push_back(std::make_shared<Reading>());
      ring.Read(conns.server[i], readings[i]->buf, sizeof readings[i]->buf, readings[i],
                &Reading::Done);
    }
    io.poll();
    EXPECT_EQ(readings[0].use_count(), 2);
  }
  for (auto& r : readings) {
    EXPECT_EQ(r.use_count(), 1);
    EXPECT_FALSE(r->finished);  // never handed back: the server is gone
  }
}

}  // namespace
}  // namespace kayak::http
