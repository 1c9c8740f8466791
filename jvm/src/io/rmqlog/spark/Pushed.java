package io.rmqlog.spark;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.sql.Timestamp;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import org.apache.spark.sql.sources.EqualNullSafe;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.IsNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;

/**
 * The filters a scan took, as the Python source takes them (python/rmqlog/spark/pushdown.py): a
 * filter is taken only when the records it selects are exactly those starting in the byte
 * ranges it becomes, and Spark then never evaluates it. Offsets are record starts; timestamps
 * are non-decreasing in a log, so the records stored in {@code [t0, t1)} are those in
 * {@code [offsetForTimestamp(t0), offsetForTimestamp(t1))}; a key filter is looked up in the
 * key indexes, each record found the one-byte range at its offset.
 */
final class Pushed implements Serializable {
  private static final long serialVersionUID = 1L;
  static final long TOP = Long.MAX_VALUE;
  private static final long[] ALL = {0, TOP};

  /** Sorted, disjoint {@code [lo, hi)} pairs of offsets. */
  private long[] offsets = ALL;
  /** The same, of millisecond timestamps. */
  private long[] times = ALL;
  /** The keys asked for; null: any key (or none). */
  private Set<String> keys;
  final List<Filter> taken = new ArrayList<>();

  /** Narrows to {@code f} and returns true when {@code f} is applied exactly, else false. */
  boolean take(Filter f) {
    String[] refs = f.references();
    String column = refs.length == 1 ? refs[0].toLowerCase(Locale.ROOT) : null;
    if (column == null || !Columns.NAMES.contains(column)) {
      return false;
    }
    long[] sel;
    if (column.equals("key")) {
      return !(f instanceof IsNull || f instanceof IsNotNull) && takeKeys(f);
    } else if (f instanceof IsNotNull) { // no other column of this source is ever null
      sel = ALL;
      column = "offset";
    } else if (f instanceof IsNull) {
      sel = new long[0];
      column = "offset";
    } else if (column.equals("offset")) {
      sel = selected(f, 1);
    } else if (column.equals("timestamp")) {
      sel = selected(f, 1000);
    } else {
      return false;
    }
    if (sel == null) {
      return false;
    }
    if (column.equals("offset")) {
      offsets = intersect(offsets, sel);
    } else {
      times = intersect(times, sel);
    }
    taken.add(f);
    return true;
  }

  /** The byte ranges of {@code [lo, hi)} whose records pass every filter taken. */
  long[] ranges(NativeLog log, long lo, long hi) {
    long[] out = intersect(new long[] {lo, hi}, offsets);
    if (out.length > 0 && times != ALL) {
      long[] at = new long[times.length];
      for (int i = 0; i < times.length; i++) {
        long ms = times[i];
        at[i] = ms == 0 ? log.minOffset() : ms == TOP ? log.maxOffset() : log.offsetForTimestamp(ms);
      }
      out = intersect(out, union(at));
    }
    if (out.length > 0 && keys != null) {
      List<Long> found = new ArrayList<>();
      for (String k : keys) {
        for (long o : log.lookup(k.getBytes(StandardCharsets.ISO_8859_1))) {
          found.add(o);
        }
      }
      long[] spans = new long[2 * found.size()];
      for (int i = 0; i < found.size(); i++) {
        spans[2 * i] = found.get(i);
        spans[2 * i + 1] = found.get(i) + 1;
      }
      out = intersect(out, union(spans));
    }
    return out;
  }

  boolean byKey() {
    return keys != null;
  }

  private boolean takeKeys(Filter f) {
    Object[] values;
    if (f instanceof EqualTo e) {
      values = new Object[] {e.value()};
    } else if (f instanceof EqualNullSafe e && e.value() != null) {
      values = new Object[] {e.value()};
    } else if (f instanceof In in) {
      values = in.values();
    } else {
      return false;
    }
    Set<String> chosen = new LinkedHashSet<>();
    for (Object v : values) {
      if (v instanceof byte[] b) {
        chosen.add(new String(b, StandardCharsets.ISO_8859_1)); // bytes kept one char each
      } else if (v instanceof String s) {
        chosen.add(new String(s.getBytes(StandardCharsets.UTF_8), StandardCharsets.ISO_8859_1));
      } else if (v != null) {
        return false;
      }
    }
    if (keys != null) {
      chosen.retainAll(keys);
    }
    keys = chosen;
    taken.add(f);
    return true;
  }

  /** The stored values (offsets, or ms for unit 1000 µs) {@code f} keeps; null: not taken. */
  private static long[] selected(Filter f, long unit) {
    Object[] values;
    Object one = null;
    if (f instanceof In in) {
      values = in.values();
    } else {
      one =
          f instanceof EqualTo e ? e.value()
              : f instanceof EqualNullSafe e ? e.value()
              : f instanceof GreaterThan e ? e.value()
              : f instanceof GreaterThanOrEqual e ? e.value()
              : f instanceof LessThan e ? e.value()
              : f instanceof LessThanOrEqual e ? e.value()
              : null;
      if (one == null) {
        return null;
      }
      values = new Object[] {one};
    }
    List<Long> k = new ArrayList<>();
    for (Object v : values) {
      if (v == null) {
        continue;
      }
      Long x = unit == 1 ? (v instanceof Long l ? l : v instanceof Integer i ? (long) i : null)
          : micros(v);
      if (x == null) {
        return null;
      }
      k.add(x);
    }
    if (k.isEmpty()) {
      return null;
    }
    if (f instanceof In || f instanceof EqualTo || f instanceof EqualNullSafe) {
      List<Long> spans = new ArrayList<>();
      for (long x : k) {
        if (x >= 0 && x % unit == 0 && x / unit < TOP) { // TOP: above every offset and ms
          spans.add(x / unit);
          spans.add(x / unit + 1);
        }
      }
      return union(spans.stream().mapToLong(Long::longValue).toArray());
    }
    long x = k.get(0);
    long q = Math.floorDiv(x, unit);
    long below = Math.floorMod(x, unit) == 0 ? q : q + 1; // the first unit value >= x
    long above = q == TOP ? TOP : q + 1; // the first one > x (none above TOP: TOP itself)
    long[] b =
        f instanceof GreaterThan ? new long[] {above, TOP}
            : f instanceof GreaterThanOrEqual ? new long[] {below, TOP}
            : f instanceof LessThan ? new long[] {0, below}
            : new long[] {0, above};
    return union(new long[] {Math.max(b[0], 0), Math.max(b[1], 0)});
  }

  /** A timestamp literal in µs; null (not taken) for one a long of µs cannot hold. */
  private static Long micros(Object v) {
    if (v instanceof Instant i) {
      try {
        return Math.addExact(
            Math.multiplyExact(i.getEpochSecond(), 1_000_000L), i.getNano() / 1000);
      } catch (ArithmeticException e) {
        return null;
      }
    }
    if (v instanceof Timestamp t) {
      return micros(t.toInstant());
    }
    return null;
  }

  /** The intersection of two sorted lists of disjoint intervals. */
  static long[] intersect(long[] a, long[] b) {
    List<Long> out = new ArrayList<>();
    int i = 0;
    int j = 0;
    while (i < a.length && j < b.length) {
      long lo = Math.max(a[i], b[j]);
      long hi = Math.min(a[i + 1], b[j + 1]);
      if (lo < hi) {
        out.add(lo);
        out.add(hi);
      }
      if (a[i + 1] < b[j + 1]) {
        i += 2;
      } else {
        j += 2;
      }
    }
    return out.stream().mapToLong(Long::longValue).toArray();
  }

  /** Sorted, disjoint, merged (touching intervals join). */
  static long[] union(long[] pairs) {
    List<long[]> items = new ArrayList<>();
    for (int i = 0; i + 1 < pairs.length; i += 2) {
      if (pairs[i] < pairs[i + 1]) {
        items.add(new long[] {pairs[i], pairs[i + 1]});
      }
    }
    items.sort((p, q) -> p[0] != q[0] ? Long.compare(p[0], q[0]) : Long.compare(p[1], q[1]));
    List<Long> out = new ArrayList<>();
    for (long[] p : items) {
      int n = out.size();
      if (n > 0 && p[0] <= out.get(n - 1)) {
        out.set(n - 1, Math.max(out.get(n - 1), p[1]));
      } else {
        out.add(p[0]);
        out.add(p[1]);
      }
    }
    return out.stream().mapToLong(Long::longValue).toArray();
  }
}
