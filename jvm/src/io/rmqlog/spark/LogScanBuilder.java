package io.rmqlog.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;

/**
 * One query's scan: the columns it reads and the filters it pushes. Spark makes a builder per
 * query, so a filter of one query never narrows another's plan (the Python source's reused-plan
 * caveat does not apply: option {@code pushdown} defaults to true here).
 */
final class LogScanBuilder implements ScanBuilder, SupportsPushDownFilters,
    SupportsPushDownRequiredColumns {
  private final LogTable table;
  private final ReadOptions opts;
  private StructType schema;
  private final Pushed pushed = new Pushed();

  LogScanBuilder(LogTable table, StructType schema) {
    this.table = table;
    this.opts = table.opts;
    this.schema = schema;
  }

  @Override
  public Filter[] pushFilters(Filter[] filters) {
    if (!opts.pushdown) {
      return filters;
    }
    List<Filter> left = new ArrayList<>();
    for (Filter f : filters) {
      if (!pushed.take(f)) {
        left.add(f);
      }
    }
    return left.toArray(new Filter[0]);
  }

  @Override
  public Filter[] pushedFilters() {
    return pushed.taken.toArray(new Filter[0]);
  }

  @Override
  public void pruneColumns(StructType required) {
    schema = required;
  }

  @Override
  public Scan build() {
    return new LogScan(table, schema, pushed);
  }
}
