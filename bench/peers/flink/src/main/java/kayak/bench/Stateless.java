// The stateless workload as Flink's documentation writes a DataStream job: a
// Kafka source, filter and map over the JSON with Jackson, a Kafka sink; in a
// local MiniCluster (parallelism = cores).
//
//   java -cp 'libs/*:classes' kayak.bench.Stateless BOOTSTRAP IN OUT APP_ID GUARANTEE CHECKPOINT_MS STATE_DIR
//
// GUARANTEE is at_least_once or exactly_once (the sink's: Kafka transactions
// committed at each checkpoint, every CHECKPOINT_MS). It keeps the value
// `v >= 0` and adds `w = v * 2`, as kayak's `filter: 'v >= 0'` and
// `map: {w: 'v * 2'}` do.
package kayak.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

public final class Stateless {
  private static final ObjectMapper JSON = new ObjectMapper();

  // The message with `w` added, or null when `v` is missing or below 0 (the
  // filter's and the map's work in one parse).
  static String enrich(String value) {
    try {
      JsonNode n = JSON.readTree(value);
      if (!(n instanceof ObjectNode) || !n.path("v").isNumber() || n.get("v").asDouble() < 0) {
        return null;
      }
      ObjectNode o = (ObjectNode) n;
      if (o.get("v").isIntegralNumber()) {
        o.put("w", o.get("v").asLong() * 2);
      } else {
        o.put("w", o.get("v").asDouble() * 2);
      }
      return JSON.writeValueAsString(o);
    } catch (java.io.IOException e) {
      return null;
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 7) {
      System.err.println(
          "usage: Stateless BOOTSTRAP IN OUT APP_ID GUARANTEE CHECKPOINT_MS STATE_DIR");
      System.exit(2);
    }
    final boolean exactlyOnce = args[4].equals("exactly_once");
    Configuration conf = new Configuration();
    conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, "file://" + args[6]);
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(Runtime.getRuntime().availableProcessors());
    env.enableCheckpointing(Long.parseLong(args[5]), CheckpointingMode.EXACTLY_ONCE);

    KafkaSource<String> source = Kafka.source(args[0], args[1], args[3]);
    KafkaSink<String> sink = Kafka.sink(args[0], args[2], exactlyOnce, args[3]);

    env.fromSource(source, WatermarkStrategy.noWatermarks(), "in")
        .map(Stateless::enrich)
        .filter(v -> v != null)
        .sinkTo(sink);
    env.execute(args[3]);
  }
}
