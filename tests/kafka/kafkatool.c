// kafkatool: the tests' and benchmarks' Kafka client, for what they need to
// ask of a broker (tests/servers/kafka_cluster.py starts the real one).
//
//   kafkatool produce BOOTSTRAP TOPIC N [START [KEYS]]   messages START..START+N-1
//       Produces N messages {"seq":i,"k":"k<i%7>","v":<(i*31)%97>} with key
//       k<i%7>, spread over the partitions by key, and waits for delivery.
//       With KEYS: {"seq":i,"k":"k<i%KEYS>","v":<(i*31)%97>,"ts":<epoch ms>},
//       keyed k<i%KEYS> (the windowed benchmark's many keys).
//   kafkatool next BOOTSTRAP TOPIC SECONDS
//       Waits until TOPIC's read_committed ends hold still for 200 ms, reads
//       from there, prints "ready", then the CLOCK_MONOTONIC time at which the
//       first message after those ends arrived (exit 0), or exits 1 after
//       SECONDS (the recovery benchmark's "first new output").
//   kafkatool committed BOOTSTRAP TOPIC GROUP
//       Prints "partition offset" per partition of TOPIC committed by GROUP
//       (-1001 when nothing is committed).
//   kafkatool create BOOTSTRAP TOPIC:PARTITIONS[:REPLICAS]...
//       Creates each topic (one that exists is left as it is) and waits until
//       every partition of it has a leader.
//   kafkatool consume BOOTSTRAP TOPIC N SECONDS [read_uncommitted]
//       Reads TOPIC from the beginning (read_committed unless told, a fresh
//       group) and prints each message's value on its own line, until N were
//       printed (exit 0) or SECONDS passed (exit 1). N = -1: until the end of
//       every partition (for read_committed, its last stable offset).
//   kafkatool member BOOTSTRAP TOPIC GROUP SECONDS
//       Joins GROUP on TOPIC as a second member for SECONDS, reading what it
//       is assigned and committing nothing, then leaves the group; prints
//       "assigned N" each time its assignment changes.
//   kafkatool ends BOOTSTRAP TOPIC
//       Prints "partition stable end" per partition of TOPIC: the end a
//       read_committed reader sees (the last stable offset) and the high
//       watermark. They differ while a transaction on the partition is open.
//   kafkatool wait BOOTSTRAP TOPIC N SECONDS
//       Exits 0 as soon as TOPIC holds at least N messages a read_committed
//       reader can see (the sum of its partitions' end offsets, for such a
//       reader the last stable ones, polled every 2 ms), printing when it saw
//       the first message and when the N-th, as CLOCK_MONOTONIC seconds
//       ("FIRST DONE"); exits 1 after SECONDS.
//   kafkatool hold BOOTSTRAP TOPIC TRANSACTIONAL_ID
//       Begins a transaction as TRANSACTIONAL_ID, produces {"held":1} to
//       partition 0 of TOPIC in it, prints "open" once the broker has it, and
//       keeps it open (the partition's last stable offset stays below it)
//       until its stdin ends; then aborts it and exits 0.
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char err[512];

static void fail(const char* what, const char* why) {
  fprintf(stderr, "kafkatool: %s: %s\n", what, why);
  exit(1);
}

static void conf_set(rd_kafka_conf_t* c, const char* k, const char* v) {
  if (rd_kafka_conf_set(c, k, v, err, sizeof(err)) != RD_KAFKA_CONF_OK) fail(k, err);
}

static void subscribe(rd_kafka_t* rk, const char* topic) {
  rd_kafka_topic_partition_list_t* sub = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(sub, topic, RD_KAFKA_PARTITION_UA);
  rd_kafka_resp_err_t e = rd_kafka_subscribe(rk, sub);
  rd_kafka_topic_partition_list_destroy(sub);
  if (e) fail("subscribe", rd_kafka_err2str(e));
}

static int delivered, failed;

static void on_delivery(rd_kafka_t* rk, const rd_kafka_message_t* m, void* opaque) {
  (void)rk;
  (void)opaque;
  if (m->err) failed++;
  else delivered++;
}

static int produce(const char* bootstrap, const char* topic, int n, int start, int keys) {
  rd_kafka_conf_t* c = rd_kafka_conf_new();
  conf_set(c, "bootstrap.servers", bootstrap);
  conf_set(c, "enable.idempotence", "true");
  conf_set(c, "linger.ms", "5");
  rd_kafka_conf_set_dr_msg_cb(c, on_delivery);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, sizeof(err));
  if (!rk) fail("producer", err);
  for (int i = start; i < start + n; i++) {
    char key[16], value[128];
    int len;
    if (keys > 0) {
      struct timespec now;
      clock_gettime(CLOCK_REALTIME, &now);
      snprintf(key, sizeof(key), "k%d", i % keys);
      len = snprintf(value, sizeof(value), "{\"seq\":%d,\"k\":\"%s\",\"v\":%d,\"ts\":%lld}", i,
                     key, (i * 31) % 97,
                     (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000);
    } else {
      snprintf(key, sizeof(key), "k%d", i % 7);
      len = snprintf(value, sizeof(value), "{\"seq\":%d,\"k\":\"%s\",\"v\":%d}", i, key,
                     (i * 31) % 97);
    }
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
    fprintf(stderr, "kafkatool: %d delivered, %d failed\n", delivered, failed);
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
  conf_set(c, "isolation.level", "read_committed");
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

static int partition_count(rd_kafka_t* rk, const char* topic) {
  const struct rd_kafka_metadata* md = NULL;
  rd_kafka_topic_t* t = rd_kafka_topic_new(rk, topic, NULL);
  int n = 0;
  if (rd_kafka_metadata(rk, 0, t, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
      md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    n = md->topics[0].partition_cnt;
  }
  if (md) rd_kafka_metadata_destroy(md);
  rd_kafka_topic_destroy(t);
  return n;
}

static int consume(const char* bootstrap, const char* topic, long long n, int seconds,
                   const char* isolation) {
  rd_kafka_conf_t* c = rd_kafka_conf_new();
  char group[64];
  snprintf(group, sizeof(group), "kafkatool-consume-%d", (int)getpid());
  conf_set(c, "bootstrap.servers", bootstrap);
  conf_set(c, "group.id", group);
  conf_set(c, "auto.offset.reset", "earliest");
  conf_set(c, "enable.auto.commit", "false");
  conf_set(c, "isolation.level", isolation);
  if (n < 0) conf_set(c, "enable.partition.eof", "true");
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, sizeof(err));
  if (!rk) fail("consumer", err);
  rd_kafka_poll_set_consumer(rk);
  // n < 0: to the end of every partition (each at its end at once)
  int parts = n < 0 ? partition_count(rk, topic) : 0;
  if (n < 0 && parts == 0) fail("no such topic", topic);
  char at_end[1024] = {0};
  int ended = 0;
  if (parts > (int)sizeof(at_end)) fail("too many partitions", topic);
  subscribe(rk, topic);
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  long long got = 0;
  while (n < 0 ? ended < parts : got < n) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec >= seconds) break;
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
    if (m == NULL) continue;
    const int p = m->partition;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      printf("%.*s\n", (int)m->len, (const char*)m->payload);
      got++;
      if (n < 0 && p >= 0 && p < parts && at_end[p]) {
        at_end[p] = 0;
        ended--;
      }
    } else if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF && p >= 0 && p < parts && !at_end[p]) {
      at_end[p] = 1;
      ended++;
    }
    rd_kafka_message_destroy(m);
  }
  fflush(stdout);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return (n < 0 ? ended == parts : got >= n) ? 0 : 1;
}

static void wait_for_leaders(rd_kafka_t* rk, const char* topic) {
  for (int tries = 0; tries < 300; tries++) {
    const struct rd_kafka_metadata* md = NULL;
    rd_kafka_topic_t* t = rd_kafka_topic_new(rk, topic, NULL);
    int ready = 0;
    if (rd_kafka_metadata(rk, 0, t, &md, 2000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
        md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR &&
        md->topics[0].partition_cnt > 0) {
      ready = 1;
      for (int p = 0; p < md->topics[0].partition_cnt; p++) {
        if (md->topics[0].partitions[p].leader < 0) ready = 0;
      }
    }
    if (md) rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(t);
    if (ready) return;
    usleep(100000);
  }
  fail("no leader for every partition in 30 s", topic);
}

static int create(const char* bootstrap, int ntopics, char** specs) {
  rd_kafka_conf_t* c = rd_kafka_conf_new();
  conf_set(c, "bootstrap.servers", bootstrap);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, sizeof(err));
  if (!rk) fail("admin", err);
  rd_kafka_NewTopic_t* topics[64];
  char names[64][256];
  if (ntopics > 64) fail("create", "at most 64 topics");
  for (int i = 0; i < ntopics; i++) {
    int parts = 1, replicas = 1;
    snprintf(names[i], sizeof(names[i]), "%s", specs[i]);
    char* colon = strchr(names[i], ':');
    if (colon) {
      *colon = '\0';
      if (sscanf(colon + 1, "%d:%d", &parts, &replicas) < 1) fail("topic spec", specs[i]);
    }
    topics[i] = rd_kafka_NewTopic_new(names[i], parts, replicas, err, sizeof(err));
    if (!topics[i]) fail(specs[i], err);
  }
  rd_kafka_queue_t* q = rd_kafka_queue_new(rk);
  rd_kafka_CreateTopics(rk, topics, (size_t)ntopics, NULL, q);
  rd_kafka_event_t* ev = rd_kafka_queue_poll(q, 60000);
  if (!ev) fail("create", "no answer in 60 s");
  const rd_kafka_CreateTopics_result_t* res = rd_kafka_event_CreateTopics_result(ev);
  if (!res) fail("create", rd_kafka_event_error_string(ev));
  size_t cnt = 0;
  const rd_kafka_topic_result_t** results = rd_kafka_CreateTopics_result_topics(res, &cnt);
  for (size_t i = 0; i < cnt; i++) {
    rd_kafka_resp_err_t e = rd_kafka_topic_result_error(results[i]);
    if (e && e != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
      fail(rd_kafka_topic_result_name(results[i]), rd_kafka_topic_result_error_string(results[i]));
    }
  }
  rd_kafka_event_destroy(ev);
  rd_kafka_queue_destroy(q);
  for (int i = 0; i < ntopics; i++) rd_kafka_NewTopic_destroy(topics[i]);
  for (int i = 0; i < ntopics; i++) wait_for_leaders(rk, names[i]);
  rd_kafka_destroy(rk);
  return 0;
}

static int member(const char* bootstrap, const char* topic, const char* group, int seconds) {
  rd_kafka_conf_t* c = rd_kafka_conf_new();
  conf_set(c, "bootstrap.servers", bootstrap);
  conf_set(c, "group.id", group);
  conf_set(c, "enable.auto.commit", "false");
  conf_set(c, "auto.offset.reset", "earliest");
  conf_set(c, "session.timeout.ms", "6000");
  conf_set(c, "heartbeat.interval.ms", "500");
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, sizeof(err));
  if (!rk) fail("consumer", err);
  rd_kafka_poll_set_consumer(rk);
  subscribe(rk, topic);
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  int last = -1;
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec >= seconds) break;
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
    if (m) rd_kafka_message_destroy(m);
    rd_kafka_topic_partition_list_t* a = NULL;
    if (rd_kafka_assignment(rk, &a) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (a->cnt != last) {
        last = a->cnt;
        printf("assigned %d\n", last);
        fflush(stdout);
      }
      rd_kafka_topic_partition_list_destroy(a);
    }
  }
  rd_kafka_consumer_close(rk);  // leaves the group: its partitions go back at once
  rd_kafka_destroy(rk);
  return 0;
}

static rd_kafka_t* reader(const char* bootstrap, const char* isolation) {
  rd_kafka_conf_t* c = rd_kafka_conf_new();
  conf_set(c, "bootstrap.servers", bootstrap);
  conf_set(c, "isolation.level", isolation);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, sizeof(err));
  if (!rk) fail("consumer", err);
  return rk;
}

static int next_message(const char* bootstrap, const char* topic, int seconds) {
  rd_kafka_conf_t* c = rd_kafka_conf_new();
  char group[64];
  snprintf(group, sizeof(group), "kafkatool-next-%d", (int)getpid());
  conf_set(c, "bootstrap.servers", bootstrap);
  conf_set(c, "isolation.level", "read_committed");
  conf_set(c, "group.id", group);
  conf_set(c, "enable.auto.commit", "false");
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, err, sizeof(err));
  if (!rk) fail("consumer", err);
  const int parts = partition_count(rk, topic);
  if (parts == 0) fail("no such topic", topic);
  int64_t* at = calloc((size_t)parts, sizeof(int64_t));
  int64_t* again = calloc((size_t)parts, sizeof(int64_t));
  // The ends, once two readings 200 ms apart agree: what a process killed a
  // moment ago had in flight has landed by then.
  for (int tries = 0; tries < 100; tries++) {
    for (int p = 0; p < parts; p++) {
      int64_t lo = 0;
      if (rd_kafka_query_watermark_offsets(rk, topic, p, &lo, &again[p], 10000))
        fail("watermarks", topic);
    }
    if (tries > 0 && !memcmp(at, again, (size_t)parts * sizeof(int64_t))) break;
    memcpy(at, again, (size_t)parts * sizeof(int64_t));
    usleep(200000);
  }
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(parts);
  for (int p = 0; p < parts; p++) rd_kafka_topic_partition_list_add(list, topic, p)->offset = at[p];
  if (rd_kafka_assign(rk, list)) fail("assign", topic);
  rd_kafka_topic_partition_list_destroy(list);
  printf("ready\n");
  fflush(stdout);
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  int rc = 1;
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - start.tv_sec >= seconds) break;
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
    if (!m) continue;
    const int got = !m->err;
    rd_kafka_message_destroy(m);
    if (got) {
      clock_gettime(CLOCK_MONOTONIC, &now);
      printf("%.6f\n", now.tv_sec + now.tv_nsec / 1e9);
      rc = 0;
      break;
    }
  }
  free(at);
  free(again);
  rd_kafka_destroy(rk);
  return rc;
}

static void txn_ok(const char* what, rd_kafka_error_t* e) {
  if (!e) return;
  fail(what, rd_kafka_error_string(e));
}

static int hold(const char* bootstrap, const char* topic, const char* id) {
  rd_kafka_conf_t* c = rd_kafka_conf_new();
  conf_set(c, "bootstrap.servers", bootstrap);
  conf_set(c, "transactional.id", id);
  conf_set(c, "transaction.timeout.ms", "600000");
  rd_kafka_conf_set_dr_msg_cb(c, on_delivery);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, sizeof(err));
  if (!rk) fail("producer", err);
  txn_ok("init_transactions", rd_kafka_init_transactions(rk, 30000));
  txn_ok("begin_transaction", rd_kafka_begin_transaction(rk));
  const char* value = "{\"held\":1}";
  rd_kafka_resp_err_t e = rd_kafka_producev(
      rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(0),
      RD_KAFKA_V_VALUE((void*)value, strlen(value)), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
      RD_KAFKA_V_END);
  if (e) fail("produce", rd_kafka_err2str(e));
  rd_kafka_flush(rk, 30000);
  if (delivered != 1) fail("produce", "not delivered");
  printf("open\n");
  fflush(stdout);
  char line[64];
  while (fgets(line, sizeof(line), stdin) != NULL) {
  }
  txn_ok("abort_transaction", rd_kafka_abort_transaction(rk, 30000));
  rd_kafka_destroy(rk);
  return 0;
}

static int ends(const char* bootstrap, const char* topic) {
  rd_kafka_t* committed_reader = reader(bootstrap, "read_committed");
  rd_kafka_t* any_reader = reader(bootstrap, "read_uncommitted");
  const int parts = partition_count(committed_reader, topic);
  if (parts == 0) fail("no such topic", topic);
  for (int p = 0; p < parts; p++) {
    int64_t lo = 0, stable = 0, hw = 0;
    rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(committed_reader, topic, p, &lo,
                                                             &stable, 10000);
    if (!e) e = rd_kafka_query_watermark_offsets(any_reader, topic, p, &lo, &hw, 10000);
    if (e) fail("watermarks", rd_kafka_err2str(e));
    printf("%d %lld %lld\n", p, (long long)stable, (long long)hw);
  }
  rd_kafka_destroy(committed_reader);
  rd_kafka_destroy(any_reader);
  return 0;
}

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc >= 5 && argc <= 7 && !strcmp(argv[1], "produce"))
    return produce(argv[2], argv[3], atoi(argv[4]), argc >= 6 ? atoi(argv[5]) : 0,
                   argc == 7 ? atoi(argv[6]) : 0);
  if (argc == 5 && !strcmp(argv[1], "committed")) return committed(argv[2], argv[3], argv[4]);
  if ((argc == 6 || argc == 7) && !strcmp(argv[1], "consume")) {
    return consume(argv[2], argv[3], atoll(argv[4]), atoi(argv[5]),
                   argc == 7 ? argv[6] : "read_committed");
  }
  if (argc == 4 && !strcmp(argv[1], "ends")) return ends(argv[2], argv[3]);
  if (argc == 5 && !strcmp(argv[1], "next")) return next_message(argv[2], argv[3], atoi(argv[4]));
  if (argc >= 4 && !strcmp(argv[1], "create")) return create(argv[2], argc - 3, argv + 3);
  if (argc == 6 && !strcmp(argv[1], "member")) {
    return member(argv[2], argv[3], argv[4], atoi(argv[5]));
  }
  if (argc == 6 && !strcmp(argv[1], "wait")) {
    return wait_count(argv[2], argv[3], atoll(argv[4]), atoi(argv[5]));
  }
  if (argc == 5 && !strcmp(argv[1], "hold")) return hold(argv[2], argv[3], argv[4]);
  fprintf(stderr, "usage: kafkatool produce|committed|create|ends|next|consume|member|wait|hold ... (see the source)\n");
  return 2;
}
