"""Records deleted by retention before a query read them: fail, or warn and skip."""

import warnings

from rmqlog.spark.options import Options


class DataLossError(RuntimeError):
    """Records a query needed were deleted (retention) before it read them."""


def _data_loss(opts: Options, what: str) -> None:
    msg = (
        f"rmqlog: {what}: those records were deleted (retention) before the query read them. "
        'Set option fail_on_data_loss="false" to skip them with a warning instead'
    )
    if opts.fail_on_data_loss:
        raise DataLossError(msg)
    warnings.warn(f"rmqlog: {what}; skipping the missing records", RuntimeWarning, stacklevel=3)
