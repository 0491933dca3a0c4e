// The stateless workload as Kafka Streams' own documentation writes it: a
// KStream of JSON values, filtered and mapped with the DSL, to a topic.
//
//   java -cp 'libs/*:classes' kayak.bench.Stateless BOOTSTRAP IN OUT APP_ID GUARANTEE COMMIT_MS STATE_DIR
//
// GUARANTEE is at_least_once or exactly_once_v2; the threads are the machine's
// cores. It keeps the value `v >= 0` and adds `w = v * 2`, as kayak's
// `filter: 'v >= 0'` and `map: {w: 'v * 2'}` do.
package kayak.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

public final class Stateless {
  private static final ObjectMapper JSON = new ObjectMapper();

  private static JsonNode parse(byte[] value) {
    try {
      return JSON.readTree(value);
    } catch (java.io.IOException e) {
      return null;  // not JSON: filtered out, as kayak's filter drops it
    }
  }

  private static byte[] write(JsonNode node) {
    try {
      return JSON.writeValueAsBytes(node);
    } catch (java.io.IOException e) {
      throw new IllegalStateException(e);
    }
  }

  public static void main(String[] args) throws InterruptedException {
    if (args.length != 7) {
      System.err.println("usage: Stateless BOOTSTRAP IN OUT APP_ID GUARANTEE COMMIT_MS STATE_DIR");
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

    StreamsBuilder b = new StreamsBuilder();
    b.stream(args[1], Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
        .mapValues(Stateless::parse)
        .filter((k, v) -> v instanceof ObjectNode && v.path("v").isNumber()
            && v.get("v").asDouble() >= 0)
        .mapValues(v -> {
          ObjectNode o = (ObjectNode) v;
          JsonNode x = o.get("v");
          if (x.canConvertToLong()) {
            o.put("w", x.asLong() * 2);
          } else {
            o.put("w", x.asDouble() * 2);
          }
          return write(o);
        })
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
