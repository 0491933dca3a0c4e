// mockbroker: a Kafka-protocol test broker on loopback, built on librdkafka's
// mock cluster, run as its own process so kayak talks to it over TCP like to
// any broker. Also a tiny client for what tests need to ask a broker.
//
//   mockbroker serve [-b BROKERS] [-t TOPIC:PARTITIONS]... -f BOOTSTRAP_FILE
//       (partition p of each topic is led by broker p % BROKERS + 1)
//       Starts the cluster, writes "127.0.0.1:P1,..." to BOOTSTRAP_FILE (via
//       a temporary file and rename), then reads commands from stdin, one a
//       line: "down ID", "up ID" (take broker ID, 1-based, down or up;
//       "ok down ID" / "ok up ID" on stdout once done),
//       "quit". Exits on quit, end of stdin or SIGTERM.
//   mockbroker produce BOOTSTRAP TOPIC N
//       Produces N messages {"seq":i,"k":"k<i%7>","v":<(i*31)%97>} with key
//       k<i%7>, spread over the partitions by key, and waits for delivery.
//   mockbroker committed BOOTSTRAP TOPIC GROUP
//       Prints "partition offset" per partition of TOPIC committed by GROUP
//       (-1001 when nothing is committed).
//   mockbroker consume BOOTSTRAP TOPIC N SECONDS
//       Reads TOPIC from the beginning (read_committed, a fresh group) and
//       prints each message's value on its own line, until N were printed
//       (exit 0) or SECONDS passed (exit 1).
//   mockbroker wait BOOTSTRAP TOPIC N SECONDS
//       Exits 0 as soon as TOPIC holds at least N messages (the sum of its
//       partitions' high watermarks, polled every 2 ms), printing when it saw
//       the first message and when the N-th, as CLOCK_MONOTONIC seconds
//       ("FIRST DONE"); exits 1 after SECONDS.
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char err[512];

static void fail(const char* what, const char* why) {
  fprintf(stderr, "mockbroker: %s: %s\n", what, why);
  exit(1);
}

static void conf_set(rd_kafka_conf_t* c, const char* k, const char* v) {
  if (rd_kafka_conf_set(c, k, v, err, sizeof(err)) != RD_KAFKA_CONF_OK) fail(k, err);
}

static int serve(int argc, char** argv) {
  int brokers = 1;
  const char* file = NULL;
  const char* topics[32];
  int ntopics = 0;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "-b") && i + 1 < argc) brokers = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-t") && i + 1 < argc && ntopics < 32) topics[ntopics++] = argv[++i];
    else if (!strcmp(argv[i], "-f") && i + 1 < argc) file = argv[++i];
    else fail("usage", "serve [-b N] [-t topic:parts]... -f FILE");
  }
  if (!file) fail("usage", "-f FILE is required");
  rd_kafka_conf_t* c = rd_kafka_conf_new();
  conf_set(c, "client.id", "mockbroker");
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, sizeof(err));
  if (!rk) fail("rd_kafka_new", err);
  rd_kafka_mock_cluster_t* mc = rd_kafka_mock_cluster_new(rk, brokers);
  if (!mc) fail("cluster", "rd_kafka_mock_cluster_new failed");
  for (int i = 0; i < ntopics; i++) {
    char name[256];
    snprintf(name, sizeof(name), "%s", topics[i]);
    char* colon = strchr(name, ':');
    int parts = 1;
    if (colon) {
      *colon = '\0';
      parts = atoi(colon + 1);
    }
    if (rd_kafka_mock_topic_create(mc, name, parts, 1) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      fail("topic", name);
    }
    // The mock picks each partition's leader at random; tests that take a
    // broker down need to know which partitions it leads: partition p is led
    // by broker p % brokers + 1.
    for (int p = 0; p < parts; p++) {
      if (rd_kafka_mock_partition_set_leader(mc, name, p, p % brokers + 1) !=
          RD_KAFKA_RESP_ERR_NO_ERROR) {
        fail("leader", name);
      }
    }
  }
  char tmp[1024];
  snprintf(tmp, sizeof(tmp), "%s.tmp", file);
  FILE* f = fopen(tmp, "w");
  if (!f) fail("open", tmp);
  fprintf(f, "%s\n", rd_kafka_mock_cluster_bootstraps(mc));
  fclose(f);
  if (rename(tmp, file) != 0) fail("rename", file);
  fprintf(stderr, "mockbroker: %d brokers at %s\n", brokers, rd_kafka_mock_cluster_bootstraps(mc));
  char line[128];
  while (fgets(line, sizeof(line), stdin)) {
    int id = 0;
    if (sscanf(line, "down %d", &id) == 1) {
      rd_kafka_mock_broker_set_down(mc, id);
      fprintf(stderr, "mockbroker: broker %d down\n", id);
      printf("ok down %d\n", id);  // the command took effect: tests wait for this line
      fflush(stdout);
    } else if (sscanf(line, "up %d", &id) == 1) {
      rd_kafka_mock_broker_set_up(mc, id);
      fprintf(stderr, "mockbroker: broker %d up\n", id);
      printf("ok up %d\n", id);
      fflush(stdout);
    } else if (!strncmp(line, "quit", 4)) {
      break;
    }
  }
  rd_kafka_mock_cluster_destroy(mc);
  rd_kafka_destroy(rk);
  return 0;
}

static int delivered, failed;

static void on_delivery(rd_kafka_t* rk, const rd_kafka_message_t* m, void* opaque) {
  (void)rk;
  (void)opaque;
  if (m->err) failed++;
  else delivered++;
}

static int produce(const char* bootstrap, const char* topic, int n) {
  rd_kafka_conf_t* c = rd_kafka_conf_new();
  conf_set(c, "bootstrap.servers", bootstrap);
  conf_set(c, "enable.idempotence", "true");
  conf_set(c, "linger.ms", "5");
  rd_kafka_conf_set_dr_msg_cb(c, on_delivery);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, sizeof(err));
  if (!rk) fail("producer", err);
  for (int i = 0; i < n; i++) {
    char key[16], value[128];
    snprintf(key, sizeof(key), "k%d", i % 7);
    int len = snprintf(value, sizeof(value), "{\"seq\":%d,\"k\":\"%s\",\"v\":%d}", i, key,
                       (i * 31) % 97);
    for (;;) {
      rd_kafka_resp_err_t e = rd_kafka_producev(
          rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, strlen(key)),
          RD_KAFKA_V_VALUE(value, (size_t)len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
          RD_KAFKA_V_END);
      if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        rd_kafka_poll(rk, 10);
        continue;
      }
      if (e) fail("produce", rd_kafka_err2str(e));
      break;
    }
    rd_kafka_poll(rk, 0);
  }
  rd_kafka_flush(rk, 30000);
  rd_kafka_destroy(rk);
  if (failed || delivered != n) {
    fprintf(stderr, "mockbroker: %d delivered, %d failed\n", delivered, failed);
    return 1;
  }
  return 0;
}

static int committed(const char* bootstrap, const char* topic, const char* group) {
  rd_kafka_conf_t* c = rd_kafka_conf_new();
  conf_set(c, "bootstrap.servers", bootstrap);
  conf_set(c, "group.id", group);
  conf_set(c, "enable.auto.commit", "false");
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, sizeof(err));
  if (!rk) fail("consumer", err);
  const struct rd_kafka_metadata* md = NULL;
  rd_kafka_topic_t* t = rd_kafka_topic_new(rk, topic, NULL);
  if (rd_kafka_metadata(rk, 0, t, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR || md->topic_cnt != 1) {
    fail("metadata", topic);
  }
  rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(8);
  for (int i = 0; i < md->topics[0].partition_cnt; i++) {
    rd_kafka_topic_partition_list_add(parts, topic, md->topics[0].partitions[i].id);
  }
  rd_kafka_metadata_destroy(md);
  rd_kafka_topic_destroy(t);
  rd_kafka_resp_err_t e = rd_kafka_committed(rk, parts, 10000);
  if (e) fail("committed", rd_kafka_err2str(e));
  for (int i = 0; i < parts->cnt; i++) {
    printf("%d %lld\n", (int)parts->elems[i].partition, (long long)parts->elems[i].offset);
  }
  rd_kafka_topic_partition_list_destroy(parts);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return 0;
}

static int wait_count(const char* bootstrap, const char* topic, long long n, int seconds) {
  rd_kafka_conf_t* c = rd_kafka_conf_new();
  conf_set(c, "bootstrap.servers", bootstrap);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, sizeof(err));
  if (!rk) fail("consumer", err);
  struct timespec start, now, first;
  int seen_first = 0;
  clock_gettime(CLOCK_MONOTONIC, &start);
  first = start;
  int partitions = 0;
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec >= seconds) break;
    if (partitions == 0) {
      // The topic may not exist yet: it is created by the first produce.
      const struct rd_kafka_metadata* md = NULL;
      rd_kafka_topic_t* t = rd_kafka_topic_new(rk, topic, NULL);
      if (rd_kafka_metadata(rk, 0, t, &md, 1000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
          md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        partitions = md->topics[0].partition_cnt;
      }
      if (md) rd_kafka_metadata_destroy(md);
      rd_kafka_topic_destroy(t);
    }
    long long total = 0;
    for (int p = 0; p < partitions; p++) {
      int64_t lo = 0, hi = 0;
      if (rd_kafka_query_watermark_offsets(rk, topic, p, &lo, &hi, 1000) == 0) total += hi;
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (total > 0 && !seen_first) {
      seen_first = 1;
      first = now;
    }
    if (partitions > 0 && total >= n) {
      printf("%.6f %.6f\n", first.tv_sec + first.tv_nsec / 1e9, now.tv_sec + now.tv_nsec / 1e9);
      rd_kafka_destroy(rk);
      return 0;
    }
    usleep(2000);
  }
  rd_kafka_destroy(rk);
  return 1;
}

static int consume(const char* bootstrap, const char* topic, long long n, int seconds) {
  rd_kafka_conf_t* c = rd_kafka_conf_new();
  char group[64];
  snprintf(group, sizeof(group), "mockbroker-consume-%d", (int)getpid());
  conf_set(c, "bootstrap.servers", bootstrap);
  conf_set(c, "group.id", group);
  conf_set(c, "auto.offset.reset", "earliest");
  conf_set(c, "enable.auto.commit", "false");
  conf_set(c, "isolation.level", "read_committed");
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, sizeof(err));
  if (!rk) fail("consumer", err);
  rd_kafka_poll_set_consumer(rk);
  rd_kafka_topic_partition_list_t* sub = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(sub, topic, RD_KAFKA_PARTITION_UA);
  rd_kafka_resp_err_t e = rd_kafka_subscribe(rk, sub);
  rd_kafka_topic_partition_list_destroy(sub);
  if (e) fail("subscribe", rd_kafka_err2str(e));
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  long long got = 0;
  while (got < n) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec >= seconds) break;
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
    if (m == NULL) continue;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      printf("%.*s\n", (int)m->len, (const char*)m->payload);
      got++;
    }
    rd_kafka_message_destroy(m);
  }
  fflush(stdout);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return got >= n ? 0 : 1;
}

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc >= 2 && !strcmp(argv[1], "serve")) return serve(argc, argv);
  if (argc == 5 && !strcmp(argv[1], "produce")) return produce(argv[2], argv[3], atoi(argv[4]));
  if (argc == 5 && !strcmp(argv[1], "committed")) return committed(argv[2], argv[3], argv[4]);
  if (argc == 6 && !strcmp(argv[1], "consume")) {
    return consume(argv[2], argv[3], atoll(argv[4]), atoi(argv[5]));
  }
  if (argc == 6 && !strcmp(argv[1], "wait")) {
    return wait_count(argv[2], argv[3], atoll(argv[4]), atoi(argv[5]));
  }
  fprintf(stderr, "usage: mockbroker serve|produce|committed|consume|wait ... (see the source)\n");
  return 2;
}
