"""``to_arrow``: a log (or a range of it) as one ``pyarrow.Table``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from rmqlog._native import CommitLog

if TYPE_CHECKING:
    import pyarrow as pa


def to_arrow(
    source: CommitLog | str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    start: int | None = None,
    end: int | None = None,
    *,
    columns: Sequence[str] | None = None,
    body: Literal["view", "binary"] = "view",
    threads: int | None = None,
) -> pa.Table:
    """The records starting in ``[start, end)`` of a log as one ``pyarrow.Table``.

    ``source`` is an open ``CommitLog``, or the store's path(s), opened read-only for the call
    and closed after it (the table keeps the maps its views need). ``columns``, ``body`` and
    ``threads`` are those of :meth:`CommitLog.scan_batches`. Errors are rmqlog's own (a damaged
    record raises ``CorruptionError``), as when iterating ``scan_batches``.
    """
    try:
        import pyarrow as pa
    except ImportError:
        raise ModuleNotFoundError(
            "to_arrow needs pyarrow, which is not installed: pip install 'rmqlog[arrow]' "
            "(or pyarrow>=16)"
        ) from None
    log = source if isinstance(source, CommitLog) else CommitLog(source, read_only=True)
    try:
        scan = log.scan_batches(start, end, columns=columns, body=body, threads=threads)
        return pa.Table.from_batches(list(scan), schema=scan.schema)
    finally:
        if log is not source:
            log.close()
