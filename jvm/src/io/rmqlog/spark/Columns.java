package io.rmqlog.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The source's columns (those of the Python source: python/rmqlog/spark/schema.py) and the
 * subset a query reads, with the code of each column in the native reader (its place in
 * {@link #NAMES}, the Rust core's {@code Column::ALL}).
 */
final class Columns {
  static final String DDL =
      "offset BIGINT, timestamp TIMESTAMP, body BINARY, segment BIGINT, key BINARY, "
          + "headers ARRAY<STRUCT<name: STRING, value: BINARY>>";
  static final StructType SCHEMA = StructType.fromDDL(DDL);
  static final List<String> NAMES =
      List.of("offset", "timestamp", "body", "segment", "key", "headers");
  static final int OFFSET = 0;
  static final int TIMESTAMP = 1;
  static final int BODY = 2;
  static final int SEGMENT = 3;
  static final int KEY = 4;
  static final int HEADERS = 5;

  private Columns() {}

  /**
   * Checks a query's schema: any non-empty subset of the columns, in any order, names matched
   * case-insensitively, each with its own type. Throws IllegalArgumentException otherwise.
   */
  static StructType checked(StructType schema) {
    String accepted = "accepted: any of " + DDL + ", in any order (a subset reads only those columns)";
    List<String> seen = new ArrayList<>();
    for (StructField f : schema.fields()) {
      String name = f.name().toLowerCase(Locale.ROOT);
      int code = NAMES.indexOf(name);
      if (code < 0) {
        String hint = name.equals("store") ? " (a fleet's column: this read names one store)" : "";
        throw new IllegalArgumentException(
            "rmqlog: unknown column '" + f.name() + "' in the schema" + hint + "; " + accepted);
      }
      if (seen.contains(name)) {
        throw new IllegalArgumentException(
            "rmqlog: column '" + name + "' appears twice in the schema; " + accepted);
      }
      DataType type = SCHEMA.fields()[code].dataType();
      if (!f.dataType().sameType(type)) {
        throw new IllegalArgumentException(
            "rmqlog: column '" + f.name() + "' is " + type.simpleString().toUpperCase(Locale.ROOT)
                + " in this source, not " + f.dataType().simpleString().toUpperCase(Locale.ROOT)
                + "; " + accepted + ". Cast it after loading instead");
      }
      seen.add(name);
    }
    if (seen.isEmpty()) {
      throw new IllegalArgumentException("rmqlog: the schema has no column; " + accepted);
    }
    return schema;
  }

  /** The native codes of a schema's columns, in its order. */
  static long[] codes(StructType schema) {
    long[] out = new long[schema.fields().length];
    for (int i = 0; i < out.length; i++) {
      out[i] = NAMES.indexOf(schema.fields()[i].name().toLowerCase(Locale.ROOT));
    }
    return out;
  }
}
