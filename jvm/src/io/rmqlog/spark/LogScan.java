package io.rmqlog.spark;

import java.io.Serializable;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * A planned batch read: the table's range (the options' range on the log as the DataFrame's
 * first query found it), narrowed by the pushed filters, cut into partitions as the Python source
 * cuts it (src/jvm/plan.rs).
 */
final class LogScan implements Scan, Batch {
  private final LogTable table;
  private final ReadOptions opts;
  private final StructType schema;
  private final Pushed pushed;

  LogScan(LogTable table, StructType schema, Pushed pushed) {
    this.table = table;
    this.opts = table.opts;
    this.schema = schema;
    this.pushed = pushed;
  }

  @Override
  public StructType readSchema() {
    return schema;
  }

  @Override
  public String description() {
    return "rmqlog(" + String.join(":", opts.paths) + ") pushed " + pushed.taken;
  }

  @Override
  public ColumnarSupportMode columnarSupportMode() {
    return ColumnarSupportMode.SUPPORTED;
  }

  @Override
  public Batch toBatch() {
    opts.check("batch");
    return this;
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    return new LogStream(opts.check("stream"), schema);
  }

  @Override
  public InputPartition[] planInputPartitions() {
    try (NativeLog log = NativeLog.open(opts)) {
      long[] range = table.range(log);
      long[] ranges = pushed.ranges(log, range[0], range[1]);
      // The DataFrame's range is kept (LogTable): retention may have deleted its head since.
      long min = log.minOffset();
      if (ranges.length > 0 && ranges[0] < min) {
        SpanReader.dataLoss(
            opts, "offsets [" + ranges[0] + ", " + Math.min(ranges[ranges.length - 1], min)
                + ") are below min_offset=" + min);
        ranges = Pushed.intersect(ranges, new long[] {min, Pushed.TOP});
      }
      return partitions(log, ranges, opts, pushed.byKey());
    }
  }

  /** The partitions over {@code ranges} ({@code [lo, hi)} pairs): src/jvm/plan.rs. */
  static InputPartition[] partitions(NativeLog log, long[] ranges, ReadOptions opts, boolean keys) {
    long limit = splitBytes(log, ranges, opts.maxPartitionBytes);
    long[] flat = Native.plan(log.handle(), ranges, limit, keys);
    InputPartition[] parts = new InputPartition[(int) flat[0]];
    int at = 1;
    for (int i = 0; i < parts.length; i++) {
      int n = (int) flat[at];
      parts[i] = new SpanPartition(i, java.util.Arrays.copyOfRange(flat, at + 1, at + 1 + 2 * n));
      at += 1 + 2 * n;
    }
    return parts;
  }

  /**
   * The most bytes a partition takes: Spark's rule for its file sources (FilePartition's
   * maxSplitBytes), so that a small read is spread over the cores too: {@code
   * max_partition_bytes}, or the bytes of the read over the session's cores ({@code
   * spark.sql.files.minPartitionNum}, else the default parallelism) where that is less, but not
   * below {@code spark.sql.files.openCostInBytes} (4 MiB), nor the option's own least (4 KiB).
   */
  static long splitBytes(NativeLog log, long[] ranges, long max) {
    long lo = log.minOffset();
    long hi = log.maxOffset();
    long total = 0;
    for (int i = 0; i + 1 < ranges.length; i += 2) {
      total += Math.max(0, Math.min(ranges[i + 1], hi) - Math.max(ranges[i], lo));
    }
    SQLConf conf = SQLConf.get();
    long cores = 1; // no session here: the read is not spread further
    if (conf.filesMinPartitionNum().isDefined()) {
      cores = ((Number) conf.filesMinPartitionNum().get()).longValue();
    } else if (SparkSession.getActiveSession().isDefined()) {
      cores = SparkSession.getActiveSession().get().sparkContext().defaultParallelism();
    }
    long perCore = total / Math.max(1, cores);
    long least = Math.max(ReadOptions.MIN_PARTITION_BYTES, conf.filesOpenCostInBytes());
    return Math.min(max, Math.max(least, perCore));
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new Factory(opts, schema);
  }

  static PartitionReaderFactory readerFactory(ReadOptions opts, StructType schema) {
    return new Factory(opts, schema);
  }

  /** The records starting in a partition's byte spans of the log: one Spark task. */
  record SpanPartition(int index, long[] spans) implements InputPartition {}

  private record Factory(ReadOptions opts, StructType schema)
      implements PartitionReaderFactory, Serializable {
    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return true;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      throw new UnsupportedOperationException("rmqlog: the JVM reader reads columnar batches");
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      return new SpanReader(opts, schema, ((SpanPartition) partition).spans());
    }
  }
}
