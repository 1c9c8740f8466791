package io.rmqlog.spark;

import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * One store, read as batches or as a stream: the table of one load(), which a DataFrame keeps.
 * Its batch range is resolved by its first query and kept (the log's end then, and the options'
 * offsets and timestamps): running the DataFrame again reads the same range, as the Python
 * source's does; load it again to see newer records.
 */
final class LogTable implements SupportsRead {
  private final StructType schema;
  final ReadOptions opts;
  private long[] range;

  LogTable(StructType schema, ReadOptions opts) {
    this.schema = schema;
    this.opts = opts;
  }

  @Override
  public String name() {
    return "rmqlog(" + String.join(":", opts.paths) + ")";
  }

  @Override
  @SuppressWarnings("deprecation") // Spark 4 still reads a table's columns from it
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return Set.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return new LogScanBuilder(this, schema);
  }

  /** {@code [lo, hi)} of the batch read: resolved on {@code log} by the first query, kept. */
  synchronized long[] range(NativeLog log) {
    if (range == null) {
      range = resolve(log);
    }
    return range;
  }

  private long[] resolve(NativeLog log) {
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
}
