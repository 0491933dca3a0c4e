/* brokertool: publishes to and reads from NATS, Redis and MQTT for the tests
 * and benchmarks, with the plain C client of each server (cnats, hiredis,
 * libmosquitto). The readers are also the benchmarks' ceilings: the fastest
 * plain client writing the same file kayak writes.
 *
 *   brokertool nats-stream URL STREAM SUBJECT [MAX_MSGS]   (the oldest dropped past it)
 *   brokertool nats-stream-full URL STREAM on|off   on: no new message taken (the stream's
 *              limit set to what it holds, discard new); off: no limit again
 *   brokertool nats-pub URL SUBJECT COUNT [START] [js]
 *   brokertool nats-sub URL SUBJECT COUNT OUT [STREAM DURABLE]
 *   brokertool nats-send URL SUBJECT DATA...   one message each, \xHH escapes decoded
 *   brokertool redis-pub URL STREAM COUNT [START] [channel]
 *   brokertool redis-sub URL STREAM GROUP COUNT OUT
 *   brokertool mqtt-pub URL TOPIC COUNT QOS [START]
 *   brokertool mqtt-sub URL TOPIC COUNT QOS OUT [IDLE_SECS [flush]]
 *
 * Messages are {"seq":N,"device":"dK","value":N}, N from START (default 0).
 * A reader stops after COUNT messages or 10 s (IDLE_SECS) without one, and prints
 * "COUNT messages in SECONDS s". Every loop is bounded in count and time.
 * nats-sub says "ready" once the server has its subscription, and exits 3
 * (saying why on stderr) when it may itself have missed messages: its
 * connection broke, or the server or library dropped some for it (a slow
 * consumer). A test can then tell a reader's loss from kayak's. */
#define _GNU_SOURCE
#include <hiredis/hiredis.h>
#include <mosquitto.h>
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char* what, const char* why) {
  fprintf(stderr, "brokertool: %s: %s\n", what, why);
  exit(1);
}

/* "scheme://host:port" -> host, port */
static void host_port(const char* url, char* host, size_t n, int* port) {
  const char* p = strstr(url, "://");
  p = p ? p + 3 : url;
  const char* colon = strrchr(p, ':');
  if (!colon) die("url", url);
  size_t len = (size_t)(colon - p);
  if (len >= n) die("url", url);
  memcpy(host, p, len);
  host[len] = 0;
  *port = atoi(colon + 1);
}

static int message(char* buf, size_t n, long seq) {
  return snprintf(buf, n, "{\"seq\":%ld,\"device\":\"d%ld\",\"value\":%ld}", seq, seq % 4, seq);
}

static void report(long n, double start) {
  printf("%ld messages in %.3f s\n", n, now_s() - start);
}

/* ---- NATS ---- */
/* Set by the library's callbacks when a reader may have missed messages. */
static volatile int nats_reader_lost = 0;

static void nats_disconnected(natsConnection* nc, void* closure) {
  (void)nc;
  (void)closure;
  fprintf(stderr, "brokertool: nats: the connection broke; what was sent meanwhile is missed\n");
  nats_reader_lost = 1;
}

static void nats_async_error(natsConnection* nc, natsSubscription* sub, natsStatus err,
                             void* closure) {
  (void)nc;
  (void)sub;
  (void)closure;
  fprintf(stderr, "brokertool: nats: %s\n", natsStatus_GetText(err));
  if (err == NATS_SLOW_CONSUMER) nats_reader_lost = 1;
}

static natsConnection* nats_connect(const char* url, jsCtx** js) {
  natsConnection* nc = NULL;
  natsOptions* opts = NULL;
  natsStatus s = natsOptions_Create(&opts);
  if (s == NATS_OK) s = natsOptions_SetURL(opts, url);
  if (s == NATS_OK) s = natsOptions_SetDisconnectedCB(opts, nats_disconnected, NULL);
  if (s == NATS_OK) s = natsOptions_SetErrorHandler(opts, nats_async_error, NULL);
  if (s == NATS_OK) s = natsConnection_Connect(&nc, opts);
  natsOptions_Destroy(opts);
  if (s != NATS_OK) die("nats connect", natsStatus_GetText(s));
  if (js) {
    jsOptions o;
    jsOptions_Init(&o);
    o.PublishAsync.MaxPending = 4000;
    s = natsConnection_JetStream(js, nc, &o);
    if (s != NATS_OK) die("jetstream", natsStatus_GetText(s));
  }
  return nc;
}

static int nats_stream(const char* url, const char* stream, const char* subject, long max_msgs) {
  jsCtx* js = NULL;
  natsConnection* nc = nats_connect(url, &js);
  jsStreamConfig c;
  jsStreamConfig_Init(&c);
  c.Name = stream;
  const char* subjects[1] = {subject};
  c.Subjects = subjects;
  c.SubjectsLen = 1;
  c.Storage = js_FileStorage;
  if (max_msgs > 0) c.MaxMsgs = max_msgs;
  jsErrCode jerr = 0;
  natsStatus s = js_AddStream(NULL, js, &c, NULL, &jerr);
  if (s != NATS_OK && jerr != JSStreamNameExistErr) die("add stream", natsStatus_GetText(s));
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  return 0;
}

static int nats_stream_full(const char* url, const char* stream, int on) {
  jsCtx* js = NULL;
  natsConnection* nc = nats_connect(url, &js);
  jsStreamInfo* si = NULL;
  jsErrCode jerr = 0;
  natsStatus s = js_GetStreamInfo(&si, js, stream, NULL, &jerr);
  if (s != NATS_OK) die("stream info", natsStatus_GetText(s));
  si->Config->Discard = js_DiscardNew;
  si->Config->MaxMsgs = on ? (int64_t)(si->State.Msgs > 0 ? si->State.Msgs : 1) : -1;
  jsStreamInfo* updated = NULL;
  s = js_UpdateStream(&updated, js, si->Config, NULL, &jerr);
  if (s != NATS_OK) die("update stream", natsStatus_GetText(s));
  jsStreamInfo_Destroy(updated);
  jsStreamInfo_Destroy(si);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  return 0;
}

static int nats_pub(const char* url, const char* subject, long count, long start, int js_on) {
  jsCtx* js = NULL;
  natsConnection* nc = nats_connect(url, js_on ? &js : NULL);
  char buf[256];
  double t0 = now_s();
  for (long i = 0; i < count; i++) {
    int len = message(buf, sizeof buf, start + i);
    natsStatus s = js_on ? js_PublishAsync(js, subject, buf, len, NULL)
                         : natsConnection_Publish(nc, subject, buf, len);
    if (s != NATS_OK) die("publish", natsStatus_GetText(s));
  }
  natsStatus s = NATS_OK;
  if (js_on) {
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = 60000;
    s = js_PublishAsyncComplete(js, &po);
  } else {
    s = natsConnection_FlushTimeout(nc, 60000);
  }
  if (s != NATS_OK) die("flush", natsStatus_GetText(s));
  report(count, t0);
  if (js) jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  return 0;
}

/* "\xff" -> one byte */
static int unescape(const char* in, char* out) {
  int n = 0;
  for (; *in; in++) {
    unsigned v;
    if (in[0] == '\\' && in[1] == 'x' && sscanf(in + 2, "%2x", &v) == 1) {
      out[n++] = (char)v;
      in += 3;
    } else {
      out[n++] = *in;
    }
  }
  return n;
}

static int nats_send(const char* url, const char* subject, int count, char** data) {
  natsConnection* nc = nats_connect(url, NULL);
  for (int i = 0; i < count; i++) {
    char* buf = malloc(strlen(data[i]) + 1);
    int len = unescape(data[i], buf);
    natsStatus s = natsConnection_Publish(nc, subject, buf, len);
    free(buf);
    if (s != NATS_OK) die("publish", natsStatus_GetText(s));
  }
  natsStatus s = natsConnection_FlushTimeout(nc, 10000);
  if (s != NATS_OK) die("flush", natsStatus_GetText(s));
  natsConnection_Destroy(nc);
  return 0;
}

static int nats_sub(const char* url, const char* subject, long count, const char* out,
                    const char* stream, const char* durable) {
  jsCtx* js = NULL;
  natsConnection* nc = nats_connect(url, stream ? &js : NULL);
  natsSubscription* sub = NULL;
  natsStatus s;
  if (stream) {
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = durable;
    cc.AckPolicy = js_AckExplicit;
    cc.FilterSubject = subject;
    cc.MaxAckPending = 100000;
    jsErrCode jerr = 0;
    s = js_AddConsumer(NULL, js, stream, &cc, NULL, &jerr);
    if (s != NATS_OK) die("add consumer", natsStatus_GetText(s));
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = stream;
    so.Consumer = durable;
    s = js_PullSubscribe(&sub, js, subject, durable, NULL, &so, &jerr);
  } else {
    s = natsConnection_SubscribeSync(&sub, nc, subject);
    if (s == NATS_OK) s = natsSubscription_SetPendingLimits(sub, 1000000, 1 << 30);
    /* The server answered a PING sent after the SUB: it has the subscription. */
    if (s == NATS_OK) s = natsConnection_FlushTimeout(nc, 10000);
  }
  if (s != NATS_OK) die("subscribe", natsStatus_GetText(s));
  printf("ready\n");
  fflush(stdout);
  FILE* f = fopen(out, "w");
  if (!f) die("open", out);
  long n = 0;
  double t0 = 0, last = now_s();
  while (n < count && now_s() - last < 10) {
    if (stream) {
      natsMsgList list;
      s = natsSubscription_Fetch(&list, sub, 1000, 1000, NULL);
      if (s == NATS_TIMEOUT) continue;
      if (s != NATS_OK) die("fetch", natsStatus_GetText(s));
      if (n == 0) t0 = now_s();
      for (int i = 0; i < list.Count; i++) {
        fwrite(natsMsg_GetData(list.Msgs[i]), 1, (size_t)natsMsg_GetDataLength(list.Msgs[i]), f);
        fputc('\n', f);
        natsMsg_Ack(list.Msgs[i], NULL);
      }
      n += list.Count;
      natsMsgList_Destroy(&list);
    } else {
      natsMsg* m = NULL;
      s = natsSubscription_NextMsg(&m, sub, 1000);
      if (s == NATS_TIMEOUT) continue;
      if (s != NATS_OK) die("next", natsStatus_GetText(s));
      if (n == 0) t0 = now_s();
      fwrite(natsMsg_GetData(m), 1, (size_t)natsMsg_GetDataLength(m), f);
      fputc('\n', f);
      natsMsg_Destroy(m);
      n++;
    }
    last = now_s();
  }
  fclose(f);
  report(n, t0);
  int64_t dropped = 0;
  if (!stream && natsSubscription_GetDropped(sub, &dropped) == NATS_OK && dropped > 0) {
    fprintf(stderr, "brokertool: nats: %lld messages dropped for this reader (a slow consumer)\n",
            (long long)dropped);
    nats_reader_lost = 1;
  }
  /* Read before the close, which reports a disconnection too. A durable
   * (STREAM) keeps what a broken connection did not deliver. */
  const int lost = !stream && nats_reader_lost;
  natsSubscription_Destroy(sub);
  if (js) jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
  if (lost) return 3;
  return n >= count ? 0 : 2;
}

/* ---- Redis ---- */
static redisContext* redis_connect(const char* url) {
  char host[256];
  int port;
  host_port(url, host, sizeof host, &port);
  redisContext* c = redisConnect(host, port);
  if (!c || c->err) die("redis connect", c ? c->errstr : "no memory");
  return c;
}

static int redis_pub(const char* url, const char* key, long count, long start, int channel) {
  redisContext* c = redis_connect(url);
  char buf[256];
  double t0 = now_s();
  for (long i = 0; i < count; i += 1000) {
    long chunk = count - i < 1000 ? count - i : 1000;
    for (long k = 0; k < chunk; k++) {
      message(buf, sizeof buf, start + i + k);
      if (channel) {
        redisAppendCommand(c, "PUBLISH %s %s", key, buf);
      } else {
        redisAppendCommand(c, "XADD %s * payload %s", key, buf);
      }
    }
    for (long k = 0; k < chunk; k++) {
      redisReply* r = NULL;
      if (redisGetReply(c, (void**)&r) != REDIS_OK) die("redis", c->errstr);
      if (r->type == REDIS_REPLY_ERROR) die("redis", r->str);
      freeReplyObject(r);
    }
  }
  report(count, t0);
  redisFree(c);
  return 0;
}

static int redis_sub(const char* url, const char* stream, const char* group, long count,
                     const char* out) {
  redisContext* c = redis_connect(url);
  redisReply* r = redisCommand(c, "XGROUP CREATE %s %s 0 MKSTREAM", stream, group);
  if (r) freeReplyObject(r);
  FILE* f = fopen(out, "w");
  if (!f) die("open", out);
  printf("ready\n");
  fflush(stdout);
  long n = 0;
  double t0 = 0, last = now_s();
  while (n < count && now_s() - last < 10) {
    r = redisCommand(c, "XREADGROUP GROUP %s c1 COUNT 1000 BLOCK 1000 STREAMS %s >", group,
                     stream);
    if (!r) die("redis", c->errstr);
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1) {
      redisReply* entries = r->element[0]->element[1];
      if (n == 0) t0 = now_s();
      const char** argv = malloc(sizeof(char*) * (entries->elements + 3));
      size_t* lens = malloc(sizeof(size_t) * (entries->elements + 3));
      argv[0] = "XACK"; argv[1] = stream; argv[2] = group;
      for (int k = 0; k < 3; k++) lens[k] = strlen(argv[k]);
      for (size_t i = 0; i < entries->elements; i++) {
        redisReply* e = entries->element[i];
        redisReply* fields = e->element[1];
        for (size_t k = 0; k + 1 < fields->elements; k += 2) {
          if (strcmp(fields->element[k]->str, "payload") == 0) {
            fwrite(fields->element[k + 1]->str, 1, fields->element[k + 1]->len, f);
            fputc('\n', f);
          }
        }
        argv[3 + i] = e->element[0]->str;
        lens[3 + i] = e->element[0]->len;
      }
      redisReply* a = redisCommandArgv(c, (int)entries->elements + 3, argv, lens);
      if (a) freeReplyObject(a);
      free(argv);
      free(lens);
      n += (long)entries->elements;
      last = now_s();
    }
    freeReplyObject(r);
  }
  fclose(f);
  report(n, t0);
  redisFree(c);
  return n >= count ? 0 : 2;
}

/* ---- MQTT ---- */
struct mqtt_sub_state {
  FILE* f;
  int flush;
  long n, count;
  double t0, last;
};

static void on_mqtt_message(struct mosquitto* m, void* obj, const struct mosquitto_message* msg) {
  (void)m;
  struct mqtt_sub_state* st = obj;
  if (st->n == 0) st->t0 = now_s();
  fwrite(msg->payload, 1, (size_t)msg->payloadlen, st->f);
  fputc('\n', st->f);
  if (st->flush) fflush(st->f);
  st->n++;
  st->last = now_s();
}

static int mqtt_subacked;

static void on_mqtt_subscribe(struct mosquitto* m, void* obj, int mid, int n, const int* qos) {
  (void)m;
  (void)obj;
  (void)mid;
  (void)n;
  (void)qos;
  mqtt_subacked = 1;
}

static struct mosquitto* mqtt_connect(const char* url, void* obj) {
  char host[256];
  int port;
  host_port(url, host, sizeof host, &port);
  struct mosquitto* m = mosquitto_new(NULL, true, obj);
  if (!m) die("mosquitto_new", "failed");
  mosquitto_int_option(m, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V311);
  int rc = mosquitto_connect(m, host, port, 60);
  if (rc != MOSQ_ERR_SUCCESS) die("mqtt connect", mosquitto_strerror(rc));
  return m;
}

static long mqtt_acked;

static void on_mqtt_publish(struct mosquitto* m, void* obj, int mid) {
  (void)m;
  (void)obj;
  (void)mid;
  mqtt_acked++;
}

static int mqtt_pub(const char* url, const char* topic, long count, int qos, long start) {
  struct mosquitto* m = mqtt_connect(url, NULL);
  mosquitto_publish_callback_set(m, on_mqtt_publish);
  mosquitto_max_inflight_messages_set(m, 1000);
  char buf[256];
  double t0 = now_s(), deadline = t0 + 120;
  for (long i = 0; i < count && now_s() < deadline; i++) {
    int len = message(buf, sizeof buf, start + i);
    int rc = mosquitto_publish(m, NULL, topic, len, buf, qos, false);
    if (rc != MOSQ_ERR_SUCCESS) die("publish", mosquitto_strerror(rc));
    /* at most 1000 unacknowledged (QoS 0: sent at once, acked when written) */
    while (i + 1 - mqtt_acked >= 1000 && now_s() < deadline) {
      rc = mosquitto_loop(m, 10, 1);
      if (rc != MOSQ_ERR_SUCCESS) die("loop", mosquitto_strerror(rc));
    }
  }
  while (mqtt_acked < count && now_s() < deadline) mosquitto_loop(m, 10, 1);
  /* QoS 0 counts as published once queued: write out the queue, then leave */
  while (mosquitto_want_write(m) && now_s() < deadline) mosquitto_loop(m, 10, 1);
  mosquitto_disconnect(m);
  while (mosquitto_want_write(m) && now_s() < deadline) mosquitto_loop(m, 10, 1);
  report(mqtt_acked, t0);
  mosquitto_destroy(m);
  return mqtt_acked == count ? 0 : 2;
}

static int mqtt_sub(const char* url, const char* topic, long count, int qos, const char* out,
                    double idle, int flush) {
  struct mqtt_sub_state st = {0};
  st.flush = flush;
  st.count = count;
  st.f = fopen(out, "w");
  if (!st.f) die("open", out);
  struct mosquitto* m = mqtt_connect(url, &st);
  mosquitto_message_callback_set(m, on_mqtt_message);
  mosquitto_subscribe_callback_set(m, on_mqtt_subscribe);
  int rc = mosquitto_subscribe(m, NULL, topic, qos);
  if (rc != MOSQ_ERR_SUCCESS) die("subscribe", mosquitto_strerror(rc));
  for (double end = now_s() + 10; !mqtt_subacked && now_s() < end;) mosquitto_loop(m, 10, 1);
  if (!mqtt_subacked) die("subscribe", "no SUBACK in 10 s");
  printf("ready\n");
  fflush(stdout);
  st.last = now_s();
  while (st.n < count && now_s() - st.last < idle) {
    rc = mosquitto_loop(m, 100, 1);
    if (rc != MOSQ_ERR_SUCCESS) die("loop", mosquitto_strerror(rc));
  }
  fclose(st.f);
  report(st.n, st.t0);
  mosquitto_destroy(m);
  return st.n >= count ? 0 : 2;
}

int main(int argc, char** argv) {
  if (argc < 2) die("usage", "see the comment at the top of brokertool.c");
  const char* cmd = argv[1];
  mosquitto_lib_init();
  int rc = 1;
  if (!strcmp(cmd, "nats-stream-full") && argc == 5) {
    rc = nats_stream_full(argv[2], argv[3], !strcmp(argv[4], "on"));
  } else if (!strcmp(cmd, "nats-stream") && (argc == 5 || argc == 6)) {
    rc = nats_stream(argv[2], argv[3], argv[4], argc == 6 ? atol(argv[5]) : 0);
  } else if (!strcmp(cmd, "nats-pub") && argc >= 5) {
    rc = nats_pub(argv[2], argv[3], atol(argv[4]), argc > 5 ? atol(argv[5]) : 0,
                  argc > 6 && !strcmp(argv[6], "js"));
  } else if (!strcmp(cmd, "nats-sub") && (argc == 6 || argc == 8)) {
    rc = nats_sub(argv[2], argv[3], atol(argv[4]), argv[5], argc == 8 ? argv[6] : NULL,
                  argc == 8 ? argv[7] : NULL);
  } else if (!strcmp(cmd, "nats-send") && argc >= 4) {
    rc = nats_send(argv[2], argv[3], argc - 4, argv + 4);
  } else if (!strcmp(cmd, "redis-pub") && argc >= 5) {
    rc = redis_pub(argv[2], argv[3], atol(argv[4]), argc > 5 ? atol(argv[5]) : 0,
                   argc > 6 && !strcmp(argv[6], "channel"));
  } else if (!strcmp(cmd, "redis-sub") && argc == 7) {
    rc = redis_sub(argv[2], argv[3], argv[4], atol(argv[5]), argv[6]);
  } else if (!strcmp(cmd, "mqtt-pub") && argc >= 6) {
    rc = mqtt_pub(argv[2], argv[3], atol(argv[4]), atoi(argv[5]), argc > 6 ? atol(argv[6]) : 0);
  } else if (!strcmp(cmd, "mqtt-sub") && argc >= 7) {
    rc = mqtt_sub(argv[2], argv[3], atol(argv[4]), atoi(argv[5]), argv[6],
                  argc > 7 ? atof(argv[7]) : 10, argc > 8 && !strcmp(argv[8], "flush"));
  } else {
    die("usage", "see the comment at the top of brokertool.c");
  }
  nats_Close();
  mosquitto_lib_cleanup();
  return rc;
}
