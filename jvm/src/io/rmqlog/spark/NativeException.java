package io.rmqlog.spark;

/**
 * An error of the Rust core. {@link #kind} is the rmqlog error type it is, as the Python package
 * names it ({@code StoreNotFoundError}, {@code CorruptionError}, {@code OffsetOutOfRangeError},
 * ...; {@code RmqlogError} for the others), and the message starts with it.
 */
public final class NativeException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** The error's kind. */
  public final String kind;

  /** Made by the native library: "kind\u001fmessage". */
  public NativeException(String raw) {
    super(message(raw));
    int cut = raw.indexOf('\u001f');
    this.kind = cut < 0 ? "RmqlogError" : raw.substring(0, cut);
  }

  private static String message(String raw) {
    int cut = raw.indexOf('\u001f');
    return cut < 0 ? "rmqlog: " + raw : "rmqlog: " + raw.substring(0, cut) + ": " + raw.substring(cut + 1);
  }

  boolean is(String k) {
    return kind.equals(k);
  }
}
