#include "server/batch_send.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

namespace kayak::http {
namespace {

using kayak::testing::KernelAllowsIoUring;

struct Pair {
  int near = -1;  // the server's end, non-blocking like the listener's sockets
  int far = -1;   // the client's end
  Pair() {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0) {
      near = fds[0];
      far = fds[1];
      ::fcntl(near, F_SETFL, ::fcntl(near, F_GETFL) | O_NONBLOCK);
    }
  }
  ~Pair() {
    if (near >= 0) ::close(near);
    if (far >= 0) ::close(far);
  }
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  std::string ReadFar(size_t n) const {
    std::string got(n, '\0');
    size_t have = 0;
    while (have < n) {
      const ssize_t r = ::read(far, got.data() + have, n - have);
      if (r <= 0) break;
      have += static_cast<size_t>(r);
    }
    got.resize(have);
    return got;
  }
};

TEST(BatchSender, IsReadyWhereTheKernelAllowsIoUring) {
  BatchSender sender;
  EXPECT_EQ(sender.Ready(), KernelAllowsIoUring());
}

TEST(BatchSender, SendsEachItemOnItsSocketAndReportsWhatFailed) {
  BatchSender sender;
  if (!KernelAllowsIoUring()) {
    EXPECT_FALSE(sender.Ready());
    return;
  }
  ASSERT_TRUE(sender.Ready());
  Pair ok, full, gone;
  ASSERT_GE(ok.near, 0);
  // A socket whose buffer is full: its send must come back at once with
  // EAGAIN, not wait in the ring (the listener's thread would stop).
  std::string chunk(65536, 'x');
  while (::send(full.near, chunk.data(), chunk.size(), MSG_DONTWAIT) > 0) {
  }
  ASSERT_EQ(errno, EAGAIN);
  ::close(gone.far);  // the client went away
  gone.far = -1;

  const std::string a = "HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\n{}";
  const std::string b = "another answer";
  std::vector<BatchSender::Item> items = {
      {ok.near, a.data(), a.size(), 0},
      {full.near, b.data(), b.size(), 0},
      {-1, b.data(), b.size(), 0},
      {gone.near, b.data(), b.size(), 0},
  };
  sender.Send(&items);
  EXPECT_EQ(items[0].result, static_cast<int>(a.size()));
  EXPECT_EQ(ok.ReadFar(a.size()), a);
  EXPECT_EQ(items[1].result, -EAGAIN);
  EXPECT_EQ(items[2].result, -EBADF);
  EXPECT_EQ(items[3].result, -EPIPE);  // and no SIGPIPE ended this test
}

TEST(BatchSender, MoreItemsThanTheRingHoldsGoInSeveralCalls) {
  BatchSender sender;
  if (!sender.Ready()) {
    EXPECT_FALSE(KernelAllowsIoUring());
    return;
  }
  const size_t n = BatchSender::kEntries + 44;
  std::vector<Pair> pairs(n);
  std::vector<std::string> bodies;
  std::vector<BatchSender::Item> items;
  for (size_t i = 0; i < n; ++i) bodies.push_back("answer " + std::to_string(i));
  for (size_t i = 0; i < n; ++i) {
    ASSERT_GE(pairs[i].near, 0) << i;
    items.push_back({pairs[i].near, bodies[i].data(), bodies[i].size(), 0});
  }
  sender.Send(&items);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(items[i].result, static_cast<int>(bodies[i].size())) << i;
    EXPECT_EQ(pairs[i].ReadFar(bodies[i].size()), bodies[i]) << i;
  }
  // The ring is reusable after a batch.
  std::vector<BatchSender::Item> again = {{pairs[0].near, bodies[1].data(), bodies[1].size(), 0}};
  sender.Send(&again);
  EXPECT_EQ(again[0].result, static_cast<int>(bodies[1].size()));
  EXPECT_EQ(pairs[0].ReadFar(bodies[1].size()), bodies[1]);
}

}  // namespace
}  // namespace kayak::http
