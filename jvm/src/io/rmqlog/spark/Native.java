package io.rmqlog.spark;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/**
 * The Rust core's JNI entry points (src/jvm in the rmqlog repository; handles, lifetimes and
 * errors are described there). The library is loaded once per JVM: from the system property
 * {@code rmqlog.jvm.library} or the environment variable {@code RMQLOG_JVM_LIBRARY} when set
 * (a path), else from this jar (copied to a temporary file, loaded, and the file removed).
 */
final class Native {
  static final String RESOURCE = "/io/rmqlog/spark/native/linux-x86_64/librmqlog_jvm.so";

  static {
    String path = System.getProperty("rmqlog.jvm.library", System.getenv("RMQLOG_JVM_LIBRARY"));
    if (path != null && !path.isEmpty()) {
      System.load(path);
    } else {
      loadBundled();
    }
  }

  /** The address of the native count of faults taken (src/jvm/fault.rs). */
  static final long FAULTS = faults();

  private Native() {}

  /**
   * The native count of faults taken, read after every load before it (an acquire fence: no
   * later load moves above the earlier ones; on x86 it costs nothing, a body is copied per row).
   */
  static long faultCount() {
    java.lang.invoke.VarHandle.acquireFence();
    return org.apache.spark.unsafe.Platform.getLong(null, FAULTS);
  }

  private static void loadBundled() {
    String os = System.getProperty("os.name", "") + "/" + System.getProperty("os.arch", "");
    try (InputStream in = Native.class.getResourceAsStream(RESOURCE)) {
      if (in == null || !os.equals("Linux/amd64")) {
        throw new UnsatisfiedLinkError(
            "rmqlog: this jar holds the native library for Linux x86_64 only, not " + os
                + "; set the system property rmqlog.jvm.library to a build of it for this host"
                + " (in a git checkout of rmqlog: cargo build --release -p rmqlog-jvm)");
      }
      Path file = Files.createTempFile("rmqlog-jvm-", ".so");
      try {
        Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
        System.load(file.toString());
      } finally {
        Files.deleteIfExists(file); // mapped once loaded: the name is not needed
      }
    } catch (IOException e) {
      throw new UnsatisfiedLinkError("rmqlog: cannot unpack the native library: " + e);
    }
  }

  private static native long faults();

  static native long open(byte[] paths, byte[] tierUrl, byte[] tierOptions, byte[] cacheDir);

  static native void close(long log);

  static native long[] bounds(long log);

  static native long offsetForTimestamp(long log, long ms);

  static native long recordStartAtOrAfter(long log, long pos);

  static native long[] lookup(long log, byte[] key);

  static native long[] plan(long log, long[] ranges, long maxBytes, boolean packed);

  static native long openReader(
      long log, long from, long to, long[] columns, long maxRecords, long maxBytes);

  static native long waitFor(long log, long offset, long timeoutMs);

  static native long refresh(long log);

  static native long[] next(long reader);

  static native long position(long reader);

  static native void closeReader(long reader);
}
