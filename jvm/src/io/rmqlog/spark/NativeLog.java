package io.rmqlog.spark;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;

/** A store opened read-only by the Rust core (no lock, nothing written), closed once. */
final class NativeLog implements AutoCloseable {
  private long handle;

  private NativeLog(long handle) {
    this.handle = handle;
  }

  /**
   * Opens the store the options name. A setting the object store refuses is an
   * IllegalArgumentException naming its option {@code tier.<key>} (the core quotes the key it
   * refuses, or the value it cannot parse), as the Python source's.
   */
  static NativeLog open(ReadOptions opts) {
    try {
      return new NativeLog(
          Native.open(
              joined(opts.paths),
              utf8(opts.tierUrl),
              joined(flat(opts.tierOptions)),
              utf8(opts.tierCacheDir)));
    } catch (NativeException e) {
      if (e.is("ConfigurationError")) {
        for (Map.Entry<String, String> kv : opts.tierOptions.entrySet()) {
          String text = e.getMessage();
          if (text.contains("\"" + kv.getKey() + "\"")
              || (!kv.getValue().isEmpty() && text.contains("\"" + kv.getValue() + "\""))) {
            throw new IllegalArgumentException(
                "rmqlog: option " + ReadOptions.TIER_PREFIX + kv.getKey() + " was refused: "
                    + text, e);
          }
        }
      }
      throw e;
    }
  }

  long handle() {
    if (handle == 0) {
      throw new IllegalStateException("rmqlog: the log is closed");
    }
    return handle;
  }

  long minOffset() {
    return Native.bounds(handle())[0];
  }

  long maxOffset() {
    return Native.bounds(handle())[1];
  }

  long offsetForTimestamp(long ms) {
    return Native.offsetForTimestamp(handle(), ms);
  }

  long recordStartAtOrAfter(long pos) {
    return Native.recordStartAtOrAfter(handle(), pos);
  }

  /** Waits up to {@code ms} (0: catches up only) for records past {@code offset}. */
  long waitFor(long offset, long ms) {
    return Native.waitFor(handle(), offset, ms);
  }

  long refresh() {
    return Native.refresh(handle());
  }

  long[] lookup(byte[] key) {
    return Native.lookup(handle(), key);
  }

  @Override
  public void close() {
    long h = handle;
    handle = 0;
    if (h != 0) {
      Native.close(h);
    }
  }

  private static byte[] utf8(String s) {
    return s == null ? new byte[0] : s.getBytes(StandardCharsets.UTF_8);
  }

  private static byte[] joined(List<String> items) {
    return utf8(String.join("\0", items));
  }

  private static List<String> flat(Map<String, String> map) {
    return map.entrySet().stream()
        .flatMap(e -> java.util.stream.Stream.of(e.getKey(), e.getValue()))
        .toList();
  }
}
