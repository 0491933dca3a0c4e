// The windowed workload as Flink's documentation writes keyed state: a Kafka
// source, keyBy, a KeyedProcessFunction over ValueState, a Kafka sink; in a
// local MiniCluster (parallelism = cores) with the RocksDB state backend and
// incremental checkpoints.
//
//   java -cp 'libs/*:classes' kayak.bench.Windowed BOOTSTRAP IN OUT APP_ID GUARANTEE CHECKPOINT_MS STATE_DIR WINDOW_MS [RESTORE]
//
// RESTORE is a retained checkpoint (STATE_DIR/<job>/chk-<n>) to start from,
// as `flink run -s` would: how a job killed with its MiniCluster resumes.
// GUARANTEE is at_least_once or exactly_once (the sink's: Kafka transactions
// committed at each checkpoint); checkpoints are exactly-once (aligned
// barriers) either way. Per key it keeps the points of the last WINDOW_MS of
// event time (the `ts` field, epoch ms) and a running total of `v`, and adds
// `v_count`, `v_sum` and `total` to each message, as kayak's rolling_window
// and bucket do (bench/peers/run.py).
package kayak.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.ByteBuffer;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.configuration.StateRecoveryOptions;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

public final class Windowed {
  private static final ObjectMapper JSON = new ObjectMapper();

  // A key's state: total (f64), newest event time (i64), points (i32), then
  // per point its time (i64) and value (f64), oldest first.
  static final class Window extends KeyedProcessFunction<String, String, String> {
    private final long windowMs;
    private transient ValueState<byte[]> state;

    Window(long windowMs) {
      this.windowMs = windowMs;
    }

    @Override
    public void open(OpenContext context) {
      state = getRuntimeContext().getState(
          new ValueStateDescriptor<>("window", PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO));
    }

    @Override
    public void processElement(String value, Context ctx, Collector<String> out)
        throws Exception {
      JsonNode n = JSON.readTree(value);
      ObjectNode o = (ObjectNode) n;
      final double v = o.get("v").asDouble();
      final long ts = o.get("ts").asLong();
      byte[] old = state.value();
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
      ByteBuffer next = ByteBuffer.allocate(8 + 8 + 4 + (points + 1) * 16);
      next.putDouble(total).putLong(end).putInt(0);
      int kept = 0;
      double sum = 0;
      for (int i = 0; i < points; i++) {
        long t = in.getLong();
        double x = in.getDouble();
        if (t > start) {
          next.putLong(t).putDouble(x);
          kept++;
          sum += x;
        }
      }
      if (!late) {
        next.putLong(ts).putDouble(v);
        kept++;
        sum += v;
      }
      next.putInt(16, kept);
      byte[] bytes = new byte[next.position()];
      System.arraycopy(next.array(), 0, bytes, 0, bytes.length);
      state.update(bytes);
      o.put("v_count", kept);
      o.put("v_sum", sum);
      o.put("total", total);
      out.collect(JSON.writeValueAsString(o));
    }
  }

  // The key of a message: its `k` field (a message without one is dropped
  // before keyBy, as kayak's window refuses it).
  private static String keyOf(String value) {
    try {
      JsonNode n = JSON.readTree(value);
      JsonNode k = n.path("k");
      return k.isTextual() && n.path("v").isNumber() && n.path("ts").isNumber() ? k.asText() : null;
    } catch (java.io.IOException e) {
      return null;
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 8 && args.length != 9) {
      System.err.println("usage: Windowed BOOTSTRAP IN OUT APP_ID GUARANTEE CHECKPOINT_MS "
          + "STATE_DIR WINDOW_MS [RESTORE]");
      System.exit(2);
    }
    final String bootstrap = args[0];
    final boolean exactlyOnce = args[4].equals("exactly_once");
    final long windowMs = Long.parseLong(args[7]);
    Configuration conf = new Configuration();
    conf.set(StateBackendOptions.STATE_BACKEND, "rocksdb");
    conf.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, true);
    conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, "file://" + args[6]);
    if (args.length == 9) conf.set(StateRecoveryOptions.SAVEPOINT_PATH, args[8]);
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(Runtime.getRuntime().availableProcessors());
    env.enableCheckpointing(Long.parseLong(args[5]), CheckpointingMode.EXACTLY_ONCE);

    KafkaSource<String> source = Kafka.source(bootstrap, args[1], args[3]);
    KafkaSink<String> sink = Kafka.sink(bootstrap, args[2], exactlyOnce, args[3]);

    env.fromSource(source, WatermarkStrategy.noWatermarks(), "in")
        .filter(v -> keyOf(v) != null)
        .keyBy(Windowed::keyOf)
        .process(new Window(windowMs))
        .sinkTo(sink);
    env.execute(args[3]);
  }
}
