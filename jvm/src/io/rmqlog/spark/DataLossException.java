package io.rmqlog.spark;

/**
 * Records a query needed were deleted (by retention) before it read them, and option
 * {@code fail_on_data_loss} is true (the default). The message starts with
 * {@code rmqlog: DataLossError:}, the Python source's name for it.
 */
public final class DataLossException extends IllegalStateException {
  private static final long serialVersionUID = 1L;

  DataLossException(String message) {
    super(message);
  }
}
