package io.rmqlog.spark;

import java.io.Serializable;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * A planned batch read: the options' range on the log as it is at planning, narrowed by the
 * pushed filters, cut into partitions as the Python source cuts it (src/jvm/plan.rs).
 */
final class LogScan implements Scan, Batch {
  private final ReadOptions opts;
  private final StructType schema;
  private final Pushed pushed;

  LogScan(ReadOptions opts, StructType schema, Pushed pushed) {
    this.opts = opts;
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
      long[] range = range(log);
      return partitions(log, pushed.ranges(log, range[0], range[1]), opts, pushed.byKey());
    }
  }

  /** The partitions over {@code ranges} ({@code [lo, hi)} pairs): src/jvm/plan.rs. */
  static InputPartition[] partitions(NativeLog log, long[] ranges, ReadOptions opts, boolean keys) {
    long[] flat = Native.plan(log.handle(), ranges, opts.maxPartitionBytes, keys);
    InputPartition[] parts = new InputPartition[(int) flat[0]];
    int at = 1;
    for (int i = 0; i < parts.length; i++) {
      int n = (int) flat[at];
      parts[i] = new SpanPartition(i, java.util.Arrays.copyOfRange(flat, at + 1, at + 1 + 2 * n));
      at += 1 + 2 * n;
    }
    return parts;
  }

  /** {@code [lo, hi)} of the read from the options, on the log as it is now. */
  private long[] range(NativeLog log) {
    long min = log.minOffset();
    long max = log.maxOffset();
    long lo = min;
    long hi = max;
    if (opts.startLatest) {
      lo = max;
    } else if (opts.startOffset != null) {
      if (opts.startOffset < min) {
        SpanReader.dataLoss(
            opts, "start_offset=" + opts.startOffset + " is below the log's min_offset=" + min);
      }
      lo = Math.max(opts.startOffset, min);
    }
    if (opts.startTimestamp != null) {
      lo = Math.max(lo, log.offsetForTimestamp(opts.startTimestamp));
    }
    if (opts.endOffset != null) {
      hi = Math.min(hi, opts.endOffset);
    }
    if (opts.endTimestamp != null) {
      hi = Math.min(hi, log.offsetForTimestamp(opts.endTimestamp));
    }
    return new long[] {lo, Math.max(lo, hi)};
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
