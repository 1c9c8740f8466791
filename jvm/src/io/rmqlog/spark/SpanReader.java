package io.rmqlog.spark;

import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One task: the records that start in its spans, as columnar batches built by the Rust core
 * (each record checked: header and CRC). Records deleted by retention after planning follow
 * {@code fail_on_data_loss}, as in the Python source ({@code read_range} in batch.py): an error,
 * or a warning and the read resumes at the log's head.
 */
final class SpanReader implements PartitionReader<ColumnarBatch> {
  private static final Logger LOG = LoggerFactory.getLogger(SpanReader.class);

  private final ReadOptions opts;
  private final StructType schema;
  private final long[] codes;
  private final long[] spans;
  private NativeLog log;
  /** The open span's reader (0: none), the span's index, and its end. */
  private long reader;
  private int span = -1;
  private long hi;
  private ColumnarBatch current;

  SpanReader(ReadOptions opts, StructType schema, long[] spans) {
    this.opts = opts;
    this.schema = schema;
    this.codes = Columns.codes(schema);
    this.spans = spans;
  }

  /** Records lost to retention: an error, unless the read was told to go on. */
  static void dataLoss(ReadOptions opts, String what) {
    if (opts.failOnDataLoss) {
      throw new DataLossException(
          "rmqlog: DataLossError: " + what + ": those records were deleted (retention) before"
              + " the query read them. Set option fail_on_data_loss=\"false\" to skip them with"
              + " a warning instead");
    }
    LOG.warn("rmqlog: {}; skipping the missing records", what);
  }

  @Override
  public boolean next() {
    current = null;
    if (log == null) {
      log = NativeLog.open(opts);
    }
    while (true) {
      if (reader == 0 && !openSpan()) {
        return false;
      }
      long[] d;
      long faults = Native.faultCount();
      try {
        d = Native.next(reader);
      } catch (NativeException e) {
        if (!e.is("OffsetOutOfRangeError")) {
          throw e;
        }
        long at = Native.position(reader); // deleted by retention since it was planned?
        closeReader();
        if (log.minOffset() <= at) {
          throw e;
        }
        Long resumed = startAt(at);
        if (resumed != null && resumed < hi) {
          reader = open(resumed);
        }
        continue;
      }
      if (d.length == 0) {
        long at = Native.position(reader);
        closeReader();
        if (at < hi && log.maxOffset() < hi) {
          throw new IllegalStateException(
              "rmqlog: the log ends at " + log.maxOffset() + ", before the end of this partition"
                  + " (" + hi + ") that the planner saw: was the tail cut by a writer's recovery?");
        }
        continue;
      }
      current = NativeColumns.batch(d, schema, codes, faults);
      return true;
    }
  }

  /** Opens the next span's reader; false when no span is left. */
  private boolean openSpan() {
    while (2 * (span + 1) < spans.length) { // spans: [lo, hi, lo, hi, ...]
      span++;
      hi = spans[2 * span + 1];
      Long start = startAt(spans[2 * span]);
      if (start != null && start < hi) {
        reader = open(start);
        return true;
      }
    }
    return false;
  }

  private long open(long from) {
    return Native.openReader(
        log.handle(), from, hi, codes, opts.batchRecords, opts.batchBytes);
  }

  /**
   * The first record boundary at or after {@code pos}; where retention deleted records from
   * {@code pos} on, the data-loss policy applies and the read resumes at the head (null:
   * nothing of {@code [pos, hi)} is left).
   */
  private Long startAt(long pos) {
    while (true) {
      long min = log.minOffset();
      if (pos < min) {
        dataLoss(opts, "offsets [" + pos + ", " + Math.min(hi, min) + ") are below min_offset="
            + min);
        if (hi <= min) {
          return null;
        }
        pos = min;
      }
      try {
        return log.recordStartAtOrAfter(pos);
      } catch (NativeException e) {
        if (!e.is("OffsetOutOfRangeError") || log.minOffset() <= pos) {
          throw e;
        }
      }
    }
  }

  private void closeReader() {
    long r = reader;
    reader = 0;
    if (r != 0) {
      Native.closeReader(r);
    }
  }

  @Override
  public ColumnarBatch get() {
    return current;
  }

  @Override
  public void close() {
    current = null;
    closeReader();
    if (log != null) {
      log.close();
      log = null;
    }
  }
}
