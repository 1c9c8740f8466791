package io.rmqlog.spark;

import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadAllAvailable;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxBytes;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.StructType;

/**
 * The micro-batch reader, as the Python source's (python/rmqlog/spark/stream.py). Offsets are
 * {@code {"offset": <physical offset>}}, the Python source's own (a checkpoint of either reader
 * resumes in the other): a record boundary, or the end of a segment's records. A micro-batch
 * reads the records that start in {@code [start, end)}. The driver follows the writer with a
 * read-only log; a trigger that finds no new record waits up to {@code wait_ms} for one, woken by
 * the append.
 */
final class LogStream implements MicroBatchStream, SupportsTriggerAvailableNow {
  private final ReadOptions opts;
  private final StructType schema;
  private NativeLog log;
  /** Trigger.AvailableNow: where the stream ends (-1: it does not). */
  private long target = -1;

  LogStream(ReadOptions opts, StructType schema) {
    this.opts = opts;
    this.schema = schema;
  }

  /** An offset of this stream: {@code {"offset": N}}. */
  private static final class Json extends Offset {
    private final long offset;

    Json(long offset) {
      this.offset = offset;
    }

    @Override
    public String json() {
      return "{\"offset\": " + offset + "}";
    }
  }

  /** The longest native wait: how soon a waiting trigger sees that its query is stopping. */
  private static final long WAIT_SLICE_MS = 100;

  /**
   * Waits up to {@code waitMs} for records past {@code pos}; returns the end of the records
   * visible then. {@code StreamingQuery.stop()} interrupts this thread and then joins it, and a
   * native wait cannot see the interrupt: the wait is made of short native waits, and ends at the
   * first one after the interrupt (whose flag stays set, for Spark to act on).
   */
  private static long waitFor(NativeLog l, long pos, long waitMs) {
    long deadline = System.nanoTime() + waitMs * 1_000_000L;
    long end = pos;
    while (end <= pos && !Thread.currentThread().isInterrupted()) {
      long left = (deadline - System.nanoTime() + 999_999L) / 1_000_000L; // rounded up
      if (left <= 0) {
        break;
      }
      end = l.waitFor(pos, Math.min(left, WAIT_SLICE_MS));
    }
    return end;
  }

  private static final java.util.regex.Pattern JSON =
      java.util.regex.Pattern.compile("\\{\\s*\"offset\"\\s*:\\s*(\\d+)\\s*}");

  private static long parse(String text) {
    java.util.regex.Matcher m = JSON.matcher(text.trim());
    if (!m.matches()) {
      throw new IllegalArgumentException(
          "rmqlog: bad offset " + text + ": expected {\"offset\": <int>}");
    }
    return Long.parseLong(m.group(1));
  }

  private static long of(Offset o) {
    return parse(o.json());
  }

  private NativeLog follower(boolean refresh) {
    if (log == null) {
      log = NativeLog.open(opts);
    } else if (refresh) {
      log.waitFor(log.maxOffset(), 0); // catches up, waits not
    }
    return log;
  }

  @Override
  public Offset initialOffset() {
    NativeLog l = follower(true);
    long start;
    if (opts.startLatest) {
      start = l.maxOffset();
    } else if (opts.startOffset != null) {
      long min = l.minOffset();
      if (opts.startOffset < min) {
        SpanReader.dataLoss(opts, "start_offset=" + opts.startOffset + " is below min_offset=" + min);
      }
      start = l.recordStartAtOrAfter(Math.max(opts.startOffset, min));
    } else {
      start = l.minOffset();
    }
    if (opts.startTimestamp != null) {
      start = Math.max(start, l.offsetForTimestamp(opts.startTimestamp));
    }
    return new Json(start);
  }

  @Override
  public Offset deserializeOffset(String json) {
    return new Json(parse(json));
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    if (opts.maxRecordsPerTrigger != null) {
      return ReadLimit.maxRows(opts.maxRecordsPerTrigger);
    }
    if (opts.maxBytesPerTrigger != null) {
      return ReadLimit.maxBytes(opts.maxBytesPerTrigger);
    }
    return ReadLimit.allAvailable();
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException("rmqlog: latestOffset(start, limit) is the API");
  }

  @Override
  public Offset latestOffset(Offset startOffset, ReadLimit limit) {
    NativeLog l = follower(true);
    long end = l.maxOffset();
    if (target >= 0) {
      end = Math.min(end, target);
    }
    long pos = startOffset == null ? end : of(startOffset);
    if (pos >= end && target < 0 && opts.waitMs > 0) {
      // Nothing new: wait a little for the next append instead of Spark polling again.
      end = waitFor(l, pos, opts.waitMs);
    }
    if (pos >= end) {
      return new Json(pos);
    }
    if (limit == null || limit instanceof ReadAllAvailable) {
      return new Json(end);
    }
    Long maxBytes = opts.maxBytesPerTrigger;
    Long maxRecords = opts.maxRecordsPerTrigger;
    if (limit instanceof ReadMaxBytes b) {
      maxBytes = maxBytes == null ? b.maxBytes() : Math.min(maxBytes, b.maxBytes());
    }
    if (limit instanceof ReadMaxRows r) {
      maxRecords = maxRecords == null ? r.maxRows() : Math.min(maxRecords, r.maxRows());
    }
    pos = Math.max(pos, l.minOffset());
    if (maxBytes != null && pos + maxBytes < end) {
      // the first boundary at or after pos + maxBytes: at least one record, at most one over
      end = Math.min(end, l.recordStartAtOrAfter(pos + maxBytes));
    }
    if (maxRecords != null) {
      end = afterRecords(l, pos, end, maxRecords);
    }
    return new Json(end);
  }

  /** Where the {@code count} records starting at {@code pos} end (at most {@code end}). */
  private static long afterRecords(NativeLog l, long pos, long end, long count) {
    long[] offsets = {Columns.OFFSET};
    while (count > 0 && pos < end) {
      long reader = Native.openReader(l.handle(), pos, end, offsets, count, Long.MAX_VALUE);
      try {
        long[] d = Native.next(reader);
        long at = Native.position(reader);
        if (d.length == 0 || at <= pos) {
          break;
        }
        count -= d[0];
        pos = at;
      } finally {
        Native.closeReader(reader);
      }
    }
    return pos;
  }

  @Override
  public Offset reportLatestOffset() {
    return new Json(follower(true).maxOffset());
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    target = follower(true).maxOffset();
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    long lo = of(start);
    long hi = of(end);
    if (lo >= hi) {
      return new InputPartition[0];
    }
    NativeLog l = follower(false);
    if (l.maxOffset() < hi) {
      l.refresh();
    }
    long min = l.minOffset();
    if (lo < min) {
      SpanReader.dataLoss(
          opts, "the micro-batch starts at " + lo + ", below the log's min_offset=" + min + " ("
              + (min - lo) + " bytes deleted before the query reached them)");
      lo = Math.min(min, hi);
    }
    return LogScan.partitions(l, new long[] {lo, hi}, opts, false);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return LogScan.readerFactory(opts, schema);
  }

  @Override
  public void commit(Offset end) {
    // Nothing to do: the log is not consumed, retention is the writer's business.
  }

  @Override
  public void stop() {
    if (log != null) {
      log.close();
      log = null;
    }
  }
}
