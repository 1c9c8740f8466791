package io.rmqlog.spark;

import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The {@code rmqlog} data source on the JVM: {@code spark.read.format("rmqlog").load(paths)},
 * with the Python source's schema and options, reading through the Rust core (JNI). Registered
 * under the Python source's short name: with this jar on the classpath Spark picks this reader.
 */
public final class RmqlogProvider implements TableProvider, DataSourceRegister {
  @Override
  public String shortName() {
    return "rmqlog";
  }

  /** Checks the options and that the paths hold a store (as the Python source's load() does). */
  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    ReadOptions opts = ReadOptions.parse(options);
    NativeLog.open(opts).close();
    return Columns.SCHEMA;
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true; // a schema given to the read: a subset of the columns
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> props) {
    return new LogTable(Columns.checked(schema), ReadOptions.parse(props));
  }

  /** One store, read as batches or as a stream. */
  @SuppressWarnings("deprecation") // schema(): Spark 4 still reads a table's columns from it
  private record LogTable(StructType schema, ReadOptions opts) implements SupportsRead {
    @Override
    public String name() {
      return "rmqlog(" + String.join(":", opts.paths) + ")";
    }

    @Override
    public Set<TableCapability> capabilities() {
      return Set.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return new LogScanBuilder(ReadOptions.parse(options), schema);
    }
  }
}
