package io.rmqlog.spark;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The {@code rmqlog} data source on the JVM: {@code spark.read.format("rmqlog").load(paths)},
 * with the Python source's schema and options, reading through the Rust core (JNI). Registered
 * under the Python source's short name: with this jar on the classpath Spark picks this reader.
 * Fleets (many stores as one table) are handed to the Python source.
 */
public final class RmqlogProvider implements TableProvider, DataSourceRegister {
  static final String PYTHON_NAME = "rmqlog_python";
  private PythonDataSourceV2 python;

  @Override
  public String shortName() {
    return "rmqlog";
  }

  /** Checks the options and that the paths hold a store (as the Python source's load() does). */
  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    if (fleet(options)) {
      return python().inferSchema(options);
    }
    return Columns.SCHEMA;
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true; // a schema given to the read: a subset of the columns
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> props) {
    if (fleet(props)) {
      return python().getTable(schema, partitioning, props);
    }
    return new LogTable(Columns.checked(schema), ReadOptions.parse(props));
  }

  /**
   * Whether the read names a fleet (stores read as one table: several tier URLs, or one where no
   * store publishes, which may be a prefix or a glob of stores), which the Python source reads.
   * Otherwise the options are checked and the store opened, as the Python source's load() does.
   */
  private static boolean fleet(Map<String, String> options) {
    ReadOptions opts = ReadOptions.parse(options);
    if (opts.paths.size() > 1 && ReadOptions.isUrl(opts.paths.get(0))) {
      return true;
    }
    try {
      NativeLog.open(opts).close();
      return false;
    } catch (NativeException e) {
      if (e.is("StoreNotFoundError") && ReadOptions.isUrl(opts.paths.get(0))) {
        return true; // the Python source lists the URL's stores, or says that none publishes
      }
      // What load() names that holds no store it can read (PySpark: IllegalArgumentException).
      throw new IllegalArgumentException(e.getMessage(), e);
    }
  }

  /**
   * The Python source, which reads fleets (rmqlog.spark.register names it rmqlog_python): one
   * for this provider, which Spark asks for the schema and then the table of one load(), so that
   * the stores the Python source finds at load() are those the query reads.
   */
  private TableProvider python() {
    if (python != null) {
      return python;
    }
    PythonDataSourceV2 source = new PythonDataSourceV2();
    source.setShortName(PYTHON_NAME);
    try {
      source.source(); // looked up in the session's registry now: a clear error if it is not
    } catch (RuntimeException e) {
      throw new IllegalStateException(
          "rmqlog: a fleet of stores is read by the Python source, which is not registered in"
              + " this session: call rmqlog.spark.register(spark) (it registers it as "
              + PYTHON_NAME + ")", e);
    }
    python = source;
    return source;
  }
}
