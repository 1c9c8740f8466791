"""Records deleted before a query read them (by retention; in a fleet, a whole store's prefix):
fail, or warn and skip."""

import warnings

from rmqlog.spark.options import Options


class DataLossError(RuntimeError):
    """Records a query needed were deleted before it read them."""


RETENTION = "those records were deleted (retention) before the query read them"
STORE_GONE = "the store's objects were deleted before the query read them"


def _data_loss(opts: Options, what: str, why: str = RETENTION) -> None:
    msg = (
        f"rmqlog: {what}: {why}. "
        'Set option fail_on_data_loss="false" to skip them with a warning instead'
    )
    if opts.fail_on_data_loss:
        raise DataLossError(msg)
    warnings.warn(f"rmqlog: {what}; skipping the missing records", RuntimeWarning, stacklevel=3)


def store_gone(opts: Options, url: str, error: Exception | None = None) -> None:
    """A store of a fleet is gone (its prefix, or its manifest): ``fail_on_data_loss`` says."""
    why = "" if error is None else f" ({error})"
    _data_loss(opts, f"the fleet's store {url} is gone{why}", STORE_GONE)
