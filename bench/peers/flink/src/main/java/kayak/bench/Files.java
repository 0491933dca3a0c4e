// The stateless workload over files as Flink's documentation writes a bounded
// job: a FileSource of text lines, the filter and map of Stateless (Jackson),
// a FileSink of rows; batch execution (the input is a file), parallelism =
// cores, in a local MiniCluster.
//
//   java -cp 'libs/*:classes' kayak.bench.Files IN_FILE OUT_DIR
package kayak.bench;

import org.apache.flink.api.common.RuntimeExecutionMode;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.serialization.SimpleStringEncoder;
import org.apache.flink.connector.file.sink.FileSink;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.connector.file.src.reader.TextLineInputFormat;
import org.apache.flink.core.fs.Path;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

public final class Files {
  public static void main(String[] args) throws Exception {
    if (args.length != 2) {
      System.err.println("usage: Files IN_FILE OUT_DIR");
      System.exit(2);
    }
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
    env.setRuntimeMode(RuntimeExecutionMode.BATCH);
    env.setParallelism(Runtime.getRuntime().availableProcessors());
    FileSource<String> source =
        FileSource.forRecordStreamFormat(new TextLineInputFormat(), new Path(args[0])).build();
    FileSink<String> sink =
        FileSink.forRowFormat(new Path(args[1]), new SimpleStringEncoder<String>("UTF-8")).build();
    env.fromSource(source, WatermarkStrategy.noWatermarks(), "in")
        .map(Stateless::enrich)
        .filter(v -> v != null)
        .sinkTo(sink);
    env.execute("files");
  }
}
