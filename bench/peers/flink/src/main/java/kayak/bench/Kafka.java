// The Kafka source and sink both Flink jobs use (Stateless, Windowed): string
// values, the group's start at the earliest offset, and the sink's delivery
// guarantee with its transactions' prefix.
package kayak.bench;

import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;

final class Kafka {
  private Kafka() {}

  static KafkaSource<String> source(String bootstrap, String topic, String group) {
    return KafkaSource.<String>builder()
        .setBootstrapServers(bootstrap)
        .setTopics(topic)
        .setGroupId(group)
        .setStartingOffsets(OffsetsInitializer.earliest())
        .setValueOnlyDeserializer(new SimpleStringSchema())
        .build();
  }

  static KafkaSink<String> sink(String bootstrap, String topic, boolean exactlyOnce,
                                String transactionalIdPrefix) {
    return KafkaSink.<String>builder()
        .setBootstrapServers(bootstrap)
        .setRecordSerializer(KafkaRecordSerializationSchema.builder()
            .setTopic(topic)
            .setValueSerializationSchema(new SimpleStringSchema())
            .build())
        .setDeliveryGuarantee(
            exactlyOnce ? DeliveryGuarantee.EXACTLY_ONCE : DeliveryGuarantee.AT_LEAST_ONCE)
        .setTransactionalIdPrefix(transactionalIdPrefix)
        // Within the broker's transaction.max.timeout.ms (15 minutes).
        .setProperty("transaction.timeout.ms", "600000")
        .build();
  }
}
