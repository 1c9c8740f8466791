package io.rmqlog.spark;

import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Spark column vectors over a native batch's Arrow buffers, read in place (the layout:
 * src/jvm/columns.rs). Valid while the batch lives: until the reader's next batch. The body
 * column's views point into the mapped segments, so {@code getBinary} copies a body straight
 * from the page cache into the array Spark asked for, the one copy Spark's rows need.
 */
final class NativeColumns {
  private static final int SLOTS = 5;

  private NativeColumns() {}

  /**
   * The batch a description names, its columns those of {@code schema} (codes {@code codes}),
   * made when the native count of faults was {@code faults}.
   */
  static ColumnarBatch batch(long[] d, StructType schema, long[] codes, long faults) {
    int rows = (int) d[0];
    ColumnVector[] vectors = new ColumnVector[codes.length];
    for (int i = 0; i < codes.length; i++) {
      int s = 1 + SLOTS * i;
      DataType type = schema.fields()[i].dataType();
      vectors[i] =
          switch ((int) codes[i]) {
            case Columns.OFFSET, Columns.SEGMENT -> new Longs(type, d[s], 1);
            case Columns.TIMESTAMP -> new Longs(type, d[s], 1000); // ms to Spark's µs
            case Columns.BODY -> new Views(type, d[s], (int) d[s + 1], d[s + 2], faults);
            case Columns.KEY -> new Binaries(type, d[s], d[s + 1], d[s + 2], d[s + 3], rows);
            case Columns.HEADERS -> headers(type, d, s);
            default -> throw new IllegalStateException("rmqlog: column code " + codes[i]);
          };
    }
    return new ColumnarBatch(vectors, rows);
  }

  private static ColumnVector headers(DataType type, long[] d, int s) {
    StructType item = (StructType) ((org.apache.spark.sql.types.ArrayType) type).elementType();
    ColumnVector names = new Strings(d[s + 1], d[s + 2]);
    ColumnVector values = new Binaries(DataTypes.BinaryType, d[s + 3], d[s + 4], 0, 0, 0);
    return new Lists(type, d[s], new Struct(item, names, values));
  }

  private static int int32(long address) {
    return Platform.getInt(null, address);
  }

  private static byte[] copy(long address, int len) {
    byte[] out = new byte[len];
    Platform.copyMemory(null, address, out, Platform.BYTE_ARRAY_OFFSET, len);
    return out;
  }

  private static IllegalStateException truncated(Throwable cause) {
    return new IllegalStateException(
        "rmqlog: CorruptionError: a segment file was truncated under this read (a mapped page"
            + " faulted): another program changed the store's files", cause);
  }

  /** A vector without nulls whose getters this source does not use throw. */
  private abstract static class Base extends ColumnVector {
    Base(DataType type) {
      super(type);
    }

    @Override
    public void close() {}

    @Override
    public boolean hasNull() {
      return false;
    }

    @Override
    public int numNulls() {
      return 0;
    }

    @Override
    public boolean isNullAt(int rowId) {
      return false;
    }

    private UnsupportedOperationException unsupported() {
      return new UnsupportedOperationException("rmqlog: not a getter of " + type);
    }

    @Override
    public boolean getBoolean(int rowId) {
      throw unsupported();
    }

    @Override
    public byte getByte(int rowId) {
      throw unsupported();
    }

    @Override
    public short getShort(int rowId) {
      throw unsupported();
    }

    @Override
    public int getInt(int rowId) {
      throw unsupported();
    }

    @Override
    public long getLong(int rowId) {
      throw unsupported();
    }

    @Override
    public float getFloat(int rowId) {
      throw unsupported();
    }

    @Override
    public double getDouble(int rowId) {
      throw unsupported();
    }

    @Override
    public ColumnarArray getArray(int rowId) {
      throw unsupported();
    }

    @Override
    public ColumnarMap getMap(int ordinal) {
      throw unsupported();
    }

    @Override
    public Decimal getDecimal(int rowId, int precision, int scale) {
      throw unsupported();
    }

    @Override
    public UTF8String getUTF8String(int rowId) {
      throw unsupported();
    }

    @Override
    public byte[] getBinary(int rowId) {
      throw unsupported();
    }

    @Override
    public ColumnVector getChild(int ordinal) {
      throw unsupported();
    }
  }

  /** int64 values, times {@code scale}. */
  private static final class Longs extends Base {
    private final long values;
    private final long scale;

    Longs(DataType type, long values, long scale) {
      super(type);
      this.values = values;
      this.scale = scale;
    }

    @Override
    public long getLong(int rowId) {
      return Platform.getLong(null, values + 8L * rowId) * scale;
    }
  }

  /**
   * A {@code binary_view} column: 16-byte views, a body of up to 12 bytes inline, the others in
   * the mapped segments. A body is copied out of the mapping, then the native count of faults is
   * checked: a page of a truncated file reads zeros and is counted (src/jvm/fault.rs watches the
   * batch's body buffers), and the read fails instead. The JVM's InternalError, where the fault
   * was left to it and is thrown in the copy, fails it too.
   */
  private static final class Views extends Base {
    private final long views;
    private final long[] buffers;
    private final long faults;

    Views(DataType type, long views, int count, long addresses, long faults) {
      super(type);
      this.views = views;
      this.faults = faults;
      this.buffers = new long[count];
      for (int i = 0; i < count; i++) {
        buffers[i] = Platform.getLong(null, addresses + 8L * i);
      }
    }

    @Override
    public byte[] getBinary(int rowId) {
      long view = views + 16L * rowId;
      int len = int32(view);
      if (len <= 12) {
        return copy(view + 4, len);
      }
      long data = buffers[int32(view + 8)] + Integer.toUnsignedLong(int32(view + 12));
      byte[] body;
      try {
        body = copy(data, len);
      } catch (InternalError e) { // a fault inside Unsafe.copyMemory
        throw truncated(e);
      }
      if (Native.faultCount() != faults) {
        throw truncated(null);
      }
      return body;
    }
  }

  /** A {@code binary} column: int32 offsets, values, and a validity bitmap (0: no null). */
  private static final class Binaries extends Base {
    private final long offsets;
    private final long values;
    private final long validity;
    private final long bit;
    private final int nulls;

    Binaries(DataType type, long offsets, long values, long validity, long bit, int rows) {
      super(type);
      this.offsets = offsets;
      this.values = values;
      this.validity = validity;
      this.bit = bit;
      int n = 0;
      for (int i = 0; validity != 0 && i < rows; i++) {
        n += isNullAt(i) ? 1 : 0;
      }
      this.nulls = n;
    }

    @Override
    public boolean hasNull() {
      return nulls > 0;
    }

    @Override
    public int numNulls() {
      return nulls;
    }

    @Override
    public boolean isNullAt(int rowId) {
      if (validity == 0) {
        return false;
      }
      long b = bit + rowId;
      return ((Platform.getByte(null, validity + (b >>> 3)) >>> (b & 7)) & 1) == 0;
    }

    @Override
    public byte[] getBinary(int rowId) {
      if (isNullAt(rowId)) {
        return null;
      }
      int start = int32(offsets + 4L * rowId);
      return copy(values + start, int32(offsets + 4L * rowId + 4) - start);
    }
  }

  /** A UTF-8 column: int32 offsets and values (strings read in place). */
  private static final class Strings extends Base {
    private final long offsets;
    private final long values;

    Strings(long offsets, long values) {
      super(DataTypes.StringType);
      this.offsets = offsets;
      this.values = values;
    }

    @Override
    public UTF8String getUTF8String(int rowId) {
      int start = int32(offsets + 4L * rowId);
      int end = int32(offsets + 4L * rowId + 4);
      return UTF8String.fromAddress(null, values + start, end - start);
    }
  }

  /** A header: a struct of its name and value. */
  private static final class Struct extends Base {
    private final ColumnVector[] children;

    Struct(DataType type, ColumnVector... children) {
      super(type);
      this.children = children;
    }

    @Override
    public ColumnVector getChild(int ordinal) {
      return children[ordinal];
    }
  }

  /** A list column: int32 offsets into its items. */
  private static final class Lists extends Base {
    private final long offsets;
    private final ColumnVector items;

    Lists(DataType type, long offsets, ColumnVector items) {
      super(type);
      this.offsets = offsets;
      this.items = items;
    }

    @Override
    public ColumnarArray getArray(int rowId) {
      int start = int32(offsets + 4L * rowId);
      return new ColumnarArray(items, start, int32(offsets + 4L * rowId + 4) - start);
    }
  }
}
