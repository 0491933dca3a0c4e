// The windowed workload as Kafka Streams' documentation writes stateful
// per-record enrichment: a value processor over a persistent (RocksDB)
// key-value store with its changelog, on a stream keyed by the message key.
//
//   java -cp 'libs/*:classes' kayak.bench.Windowed BOOTSTRAP IN OUT APP_ID GUARANTEE COMMIT_MS STATE_DIR WINDOW_MS
//
// Per key it keeps the points of the last WINDOW_MS of event time (the `ts`
// field, epoch ms) and a running total of `v`, and adds `v_count`, `v_sum`
// and `total` to each message: what kayak's `rolling_window: {key: k, field:
// v, window_secs, time_field: ts, aggregates: [count, sum]}` followed by
// `bucket: {name: totals, key: k, op: add, field: v, as: total}` does. The
// window of a key ends at the newest time it saw; a point older than the
// window's start is late: emitted with the window's aggregates, not added.
// COMMIT_MS is Kafka Streams' commit interval, its checkpoint.
package kayak.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.ByteBuffer;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

public final class Windowed {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final String STORE = "windows";

  // A key's state: total (f64), newest event time (i64), points (i32), then
  // per point its time (i64) and value (f64), oldest first.
  static final class Processor implements FixedKeyProcessor<byte[], byte[], byte[]> {
    private final long windowMs;
    private FixedKeyProcessorContext<byte[], byte[]> context;
    private KeyValueStore<byte[], byte[]> store;

    Processor(long windowMs) {
      this.windowMs = windowMs;
    }

    @Override
    public void init(FixedKeyProcessorContext<byte[], byte[]> context) {
      this.context = context;
      this.store = context.getStateStore(STORE);
    }

    @Override
    public void process(FixedKeyRecord<byte[], byte[]> record) {
      ObjectNode o;
      try {
        JsonNode n = JSON.readTree(record.value());
        if (!(n instanceof ObjectNode) || !n.path("v").isNumber() || !n.path("ts").isNumber()) {
          return;  // a transform error in kayak: dropped
        }
        o = (ObjectNode) n;
      } catch (java.io.IOException e) {
        return;
      }
      final double v = o.get("v").asDouble();
      final long ts = o.get("ts").asLong();
      byte[] old = store.get(record.key());
      double total = 0;
      long newest = Long.MIN_VALUE;
      int points = 0;
      ByteBuffer in = null;
      if (old != null) {
        in = ByteBuffer.wrap(old);
        total = in.getDouble();
        newest = in.getLong();
        points = in.getInt();
      }
      total += v;
      final long end = Math.max(newest, ts);
      final long start = end - windowMs;  // points at or before it leave
      final boolean late = ts <= start;
      ByteBuffer out = ByteBuffer.allocate(8 + 8 + 4 + (points + 1) * 16);
      out.putDouble(total).putLong(end).putInt(0);
      int kept = 0;
      double sum = 0;
      for (int i = 0; i < points; i++) {
        long t = in.getLong();
        double x = in.getDouble();
        if (t > start) {
          out.putLong(t).putDouble(x);
          kept++;
          sum += x;
        }
      }
      if (!late) {
        out.putLong(ts).putDouble(v);
        kept++;
        sum += v;
      }
      out.putInt(16, kept);
      byte[] state = new byte[out.position()];
      System.arraycopy(out.array(), 0, state, 0, state.length);
      store.put(record.key(), state);
      o.put("v_count", kept);
      o.put("v_sum", sum);
      o.put("total", total);
      try {
        context.forward(record.withValue(JSON.writeValueAsBytes(o)));
      } catch (java.io.IOException e) {
        throw new IllegalStateException(e);
      }
    }
  }

  public static void main(String[] args) throws InterruptedException {
    if (args.length != 8) {
      System.err.println(
          "usage: Windowed BOOTSTRAP IN OUT APP_ID GUARANTEE COMMIT_MS STATE_DIR WINDOW_MS");
      System.exit(2);
    }
    Properties p = new Properties();
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[3]);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, args[4]);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, Long.parseLong(args[5]));
    p.put(StreamsConfig.STATE_DIR_CONFIG, args[6]);
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, Runtime.getRuntime().availableProcessors());
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
    final long windowMs = Long.parseLong(args[7]);

    StreamsBuilder b = new StreamsBuilder();
    b.addStateStore(Stores.keyValueStoreBuilder(
        Stores.persistentKeyValueStore(STORE), Serdes.ByteArray(), Serdes.ByteArray()));
    b.stream(args[1], Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
        .processValues(() -> new Processor(windowMs), STORE)
        .to(args[2], Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));

    KafkaStreams streams = new KafkaStreams(b.build(), p);
    CountDownLatch stopped = new CountDownLatch(1);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      streams.close();
      stopped.countDown();
    }));
    streams.start();
    stopped.await();
  }
}
