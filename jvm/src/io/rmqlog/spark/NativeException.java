package io.rmqlog.spark;

/**
 * An error of the Rust core: {@link #kind} names its variant where the reader decides on it
 * ({@code OffsetOutOfRange}, {@code StoreNotFound}, {@code Corruption}, {@code InvalidArgument},
 * {@code Closed}, {@code Internal}), else {@code Error}.
 */
public final class NativeException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** The error's kind. */
  public final String kind;

  /** Made by the native library: "kind\u001fmessage". */
  public NativeException(String raw) {
    super(message(raw));
    int cut = raw.indexOf('\u001f');
    this.kind = cut < 0 ? "Error" : raw.substring(0, cut);
  }

  private static String message(String raw) {
    int cut = raw.indexOf('\u001f');
    return "rmqlog: " + (cut < 0 ? raw : raw.substring(cut + 1));
  }

  boolean is(String k) {
    return kind.equals(k);
  }
}
