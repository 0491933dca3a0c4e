/* udp_tool: the udp benchmark's sender and its plain receiver (the ceiling).
 *
 *   udp_tool send PORT COUNT RATE     COUNT datagrams {"seq":N,"device":"dK","value":N}
 *                                     to 127.0.0.1:PORT, RATE a second (0: at once),
 *                                     sendmmsg 64 at a time
 *   udp_tool recv PORT OUT IDLE_MS    a recvmmsg loop writing each datagram and a
 *                                     newline to OUT (the same bytes kayak's file
 *                                     output writes), with a 4 MiB receive buffer
 *                                     (forced where the process may), until IDLE_MS
 *                                     pass without one; prints "ready" once bound,
 *                                     then "COUNT datagrams"
 *
 * Every loop is bounded in count or time. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define VLEN 64

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static struct sockaddr_in addr(int port) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((unsigned short)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

static int do_send(int port, long count, long rate) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in a = addr(port);
  static char bufs[VLEN][96];
  struct mmsghdr msgs[VLEN];
  struct iovec iov[VLEN];
  double t0 = now_s();
  for (long i = 0; i < count;) {
    int n = 0;
    for (; n < VLEN && i + n < count; n++) {
      long q = i + n;
      int len = snprintf(bufs[n], sizeof bufs[n], "{\"seq\":%ld,\"device\":\"d%ld\",\"value\":%ld}",
                         q, q % 4, q);
      iov[n].iov_base = bufs[n];
      iov[n].iov_len = (size_t)len;
      memset(&msgs[n], 0, sizeof msgs[n]);
      msgs[n].msg_hdr.msg_name = &a;
      msgs[n].msg_hdr.msg_namelen = sizeof a;
      msgs[n].msg_hdr.msg_iov = &iov[n];
      msgs[n].msg_hdr.msg_iovlen = 1;
    }
    int sent = sendmmsg(fd, msgs, (unsigned)n, 0);
    if (sent <= 0) {
      perror("sendmmsg");
      return 1;
    }
    i += sent;
    if (rate > 0) {  /* paced: wait until i datagrams are due */
      double due = t0 + (double)i / (double)rate;
      double wait = due - now_s();
      if (wait > 0) {
        struct timespec ts = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
        nanosleep(&ts, NULL);
      }
    }
  }
  close(fd);
  return 0;
}

static int do_recv(int port, const char* out, int idle_ms) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  int size = 4 << 20;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) != 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  struct sockaddr_in a = addr(port);
  if (bind(fd, (struct sockaddr*)&a, sizeof a) != 0) {
    perror("bind");
    return 1;
  }
  FILE* f = fopen(out, "w");
  if (!f) {
    perror(out);
    return 1;
  }
  printf("ready\n");
  fflush(stdout);
  static char bufs[VLEN][65536];
  struct mmsghdr msgs[VLEN];
  struct iovec iov[VLEN];
  long total = 0;
  for (;;) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, idle_ms) <= 0) break;
    for (int i = 0; i < VLEN; i++) {
      iov[i].iov_base = bufs[i];
      iov[i].iov_len = sizeof bufs[i];
      memset(&msgs[i], 0, sizeof msgs[i]);
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    int n = recvmmsg(fd, msgs, VLEN, MSG_DONTWAIT, NULL);
    for (int i = 0; i < n; i++) {
      fwrite(bufs[i], 1, msgs[i].msg_len, f);
      fputc('\n', f);
    }
    if (n > 0) total += n;
  }
  fflush(f);
  fsync(fileno(f));
  fclose(f);
  printf("%ld datagrams\n", total);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 5 && !strcmp(argv[1], "send")) return do_send(atoi(argv[2]), atol(argv[3]), atol(argv[4]));
  if (argc == 5 && !strcmp(argv[1], "recv")) return do_recv(atoi(argv[2]), argv[3], atoi(argv[4]));
  fprintf(stderr, "usage: udp_tool send PORT COUNT RATE | recv PORT OUT IDLE_MS\n");
  return 2;
}
