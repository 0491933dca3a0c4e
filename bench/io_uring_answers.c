// What a system call costs the listener on this machine, and what io_uring
// saves (docs/benchmarks.md, "http ingest: a batch of answers in one system
// call"). Over 24 loopback TCP connections, CPU time of the serving thread:
//
//   syscall   50 getppid() calls a round: the cost of entering the kernel
//   send      an answer on each connection, one send() each against all 24
//             in one io_uring_enter (MSG_DONTWAIT, as the listener sends)
//   recv      a client thread posts a request on each connection and reads
//             the answers; the server reads with epoll + recv(), or with
//             recvs armed in an io_uring (default set-up, then
//             IORING_SETUP_COOP_TASKRUN), answering through io_uring in all
//
//   cc -O2 -o /tmp/io_uring_answers bench/io_uring_answers.c -luring -lpthread
//   /tmp/io_uring_answers [rounds, default 20000]
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { kConns = 24 };
static const uint64_t kAnswerTag = 1u << 30;  // user_data of a send (a recv's is its connection)
static int rounds = 20000;  // the first argument, if any

static const char kRequest[] =
    "POST /ingest HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n{\"id\":1,\"n\":2,\"x\":3}";
static const char kAnswer[] =
    "HTTP/1.1 202 Accepted\r\nContent-Length: 27\r\n\r\n{\"accepted\":1,\"seq\":123456}";

static int client_fd[kConns], server_fd[kConns];

static double ThreadCpu(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

// The server's ends are non-blocking for epoll; blocking for recvs armed in
// a ring (which otherwise may end at once with EAGAIN).
static void Connect(int nonblocking) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(l, (struct sockaddr*)&a, sizeof a) != 0 || getsockname(l, (struct sockaddr*)&a, &len) ||
      listen(l, 64) != 0) {
    perror("listen");
    exit(1);
  }
  for (int i = 0; i < kConns; ++i) {
    client_fd[i] = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(client_fd[i], (struct sockaddr*)&a, sizeof a) != 0) {
      perror("connect");
      exit(1);
    }
    server_fd[i] = accept(l, NULL, NULL);
    if (nonblocking) fcntl(server_fd[i], F_SETFL, O_NONBLOCK);
  }
  close(l);
}

static void Drain(struct io_uring* ring) {
  struct io_uring_cqe* cqe;
  unsigned head, n = 0;
  io_uring_for_each_cqe(ring, head, cqe) { ++n; }
  io_uring_cq_advance(ring, n);
}

static void QueueAnswer(struct io_uring* ring, int fd) {
  struct io_uring_sqe* sqe = io_uring_get_sqe(ring);
  io_uring_prep_send(sqe, fd, kAnswer, sizeof kAnswer - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  io_uring_sqe_set_data64(sqe, kAnswerTag);
}

static void Syscalls(void) {
  const int n = rounds * 50;
  double t0 = ThreadCpu();
  for (int i = 0; i < n; ++i) syscall(SYS_getppid);
  printf("syscall: %.3f us per getppid\n", (ThreadCpu() - t0) / n * 1e6);
}

static void Sends(void) {
  struct io_uring ring;
  if (io_uring_queue_init(256, &ring, 0) != 0) {
    printf("send: no io_uring here\n");
    return;
  }
  char buf[4096];
  double plain = 0, batched = 0;
  for (int r = 0; r < rounds; ++r) {
    double t0 = ThreadCpu();
    if (r % 2 == 0) {
      for (int i = 0; i < kConns; ++i) {
        send(server_fd[i], kAnswer, sizeof kAnswer - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
      }
      plain += ThreadCpu() - t0;
    } else {
      for (int i = 0; i < kConns; ++i) QueueAnswer(&ring, server_fd[i]);
      io_uring_submit_and_wait(&ring, kConns);
      Drain(&ring);
      batched += ThreadCpu() - t0;
    }
    for (int i = 0; i < kConns; ++i) recv(client_fd[i], buf, sizeof buf, 0);
  }
  const double each = (double)(rounds / 2) * kConns;
  printf("send: %.2f us each with send(), %.2f us each in one io_uring_enter of %d\n",
         plain / each * 1e6, batched / each * 1e6, kConns);
  io_uring_queue_exit(&ring);
}

static void* Client(void* arg) {
  (void)arg;
  char buf[4096];
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < kConns; ++i) send(client_fd[i], kRequest, sizeof kRequest - 1, 0);
    for (int i = 0; i < kConns; ++i) recv(client_fd[i], buf, sizeof buf, 0);
  }
  return NULL;
}

// mode 0: epoll + recv; 1: recvs in the ring; 2: the same, COOP_TASKRUN.
static void Serve(int mode) {
  static char buf[kConns][4096];
  struct io_uring ring;
  if (io_uring_queue_init(256, &ring, mode == 2 ? IORING_SETUP_COOP_TASKRUN : 0) != 0) {
    printf("recv mode %d: io_uring refused\n", mode);
    return;
  }
  pthread_t client;
  pthread_create(&client, NULL, Client, NULL);
  const long want = (long)rounds * kConns;
  long got = 0;
  double t0 = ThreadCpu();
  if (mode == 0) {
    int ep = epoll_create1(0);
    for (int i = 0; i < kConns; ++i) {
      struct epoll_event e = {.events = EPOLLIN | EPOLLET, .data.u32 = (uint32_t)i};
      epoll_ctl(ep, EPOLL_CTL_ADD, server_fd[i], &e);
    }
    struct epoll_event ev[64];
    while (got < want) {
      int n = epoll_wait(ep, ev, 64, -1);
      unsigned answers = 0;
      for (int k = 0; k < n; ++k) {
        int i = (int)ev[k].data.u32;
        if (recv(server_fd[i], buf[i], sizeof buf[i], 0) > 0) {
          ++got;
          ++answers;
          QueueAnswer(&ring, server_fd[i]);
        }
      }
      if (answers > 0) {
        io_uring_submit_and_wait(&ring, answers);
        Drain(&ring);
      }
    }
    close(ep);
  } else {
    for (int i = 0; i < kConns; ++i) {
      struct io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      io_uring_prep_recv(sqe, server_fd[i], buf[i], sizeof buf[i], 0);
      io_uring_sqe_set_data64(sqe, (uint64_t)i);
    }
    io_uring_submit(&ring);
    while (got < want) {
      io_uring_submit_and_wait(&ring, 1);
      int ready[256], res[256], n = 0;
      struct io_uring_cqe* cqe;
      unsigned head, seen = 0;
      io_uring_for_each_cqe(&ring, head, cqe) {
        ++seen;
        if (cqe->user_data < kConns) {
          res[n] = cqe->res;
          ready[n++] = (int)cqe->user_data;
        }
      }
      io_uring_cq_advance(&ring, seen);
      for (int k = 0; k < n; ++k) {
        int i = ready[k];
        if (res[k] > 0) {
          ++got;
          QueueAnswer(&ring, server_fd[i]);
        } else if (res[k] != -EAGAIN) {
          fprintf(stderr, "recv: %s\n", strerror(-res[k]));
          exit(1);
        }
        struct io_uring_sqe* sqe = io_uring_get_sqe(&ring);  // the next read
        io_uring_prep_recv(sqe, server_fd[i], buf[i], sizeof buf[i], 0);
        io_uring_sqe_set_data64(sqe, (uint64_t)i);
      }
    }
  }
  io_uring_submit(&ring);  // the last answers
  const double cpu = ThreadCpu() - t0;
  pthread_join(client, NULL);
  static const char* names[] = {"epoll + recv", "recvs in io_uring",
                                "recvs in io_uring, COOP_TASKRUN"};
  printf("recv: %s: %.2f us of server CPU a request\n", names[mode], cpu / (double)got * 1e6);
  fflush(stdout);
  io_uring_queue_exit(&ring);  // (recvs still armed are cancelled with the ring)
}

int main(int argc, char** argv) {
  if (argc > 1) rounds = atoi(argv[1]) > 1 ? atoi(argv[1]) / 2 * 2 : 2;  // even: half each way
  Connect(1);
  Syscalls();
  Sends();
  for (int mode = 0; mode < 3; ++mode) {
    Connect(mode == 0);
    Serve(mode);
  }
  return 0;
}
