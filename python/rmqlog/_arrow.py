"""``to_arrow``: a log (or a range of it), or a fleet of stores, as one ``pyarrow.Table``."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from rmqlog._fleet import Source, _opened, fleet_urls, scan_fleet

if TYPE_CHECKING:
    import pyarrow as pa


def to_arrow(
    source: Source,
    start: int | None = None,
    end: int | None = None,
    *,
    columns: Sequence[str] | None = None,
    body: Literal["view", "binary"] = "view",
    threads: int | None = None,
    tier_options: Mapping[str, str] | None = None,
    key: bytes | str | Collection[bytes | str] | None = None,
    key_prefix: bytes | str | None = None,
    headers: Mapping[str, bytes | str | Collection[bytes | str]] | None = None,
) -> pa.Table:
    """The records starting in ``[start, end)`` of a log, or of every store of a fleet, as one
    ``pyarrow.Table``.

    ``source`` is an open ``CommitLog``; a store's path(s) or tier URL, opened read-only for the
    call and closed after it (the table keeps the maps its views need); or a fleet: a list of tier
    URLs, or a URL under which stores publish (``s3://bucket/logs``, or a glob of their names,
    ``s3://bucket/logs/web-*``; see ``rmqlog.tier_stores``). A fleet's table has a ``store``
    column (the store's tier URL), and ``start``/``end`` bound each store's offsets.
    ``columns``, ``body``, ``threads`` and the filter (``key``, ``key_prefix``, ``headers``:
    only the records it accepts) are those of :meth:`CommitLog.scan_batches`; ``tier_options``
    the object store's settings. Errors are rmqlog's own (a damaged record
    raises ``CorruptionError``), as when iterating ``scan_batches``.
    """
    try:
        import pyarrow as pa
    except ImportError:
        raise ModuleNotFoundError(
            "to_arrow needs pyarrow, which is not installed: pip install 'rmqlog[arrow]' "
            "(or pyarrow>=16)"
        ) from None
    urls = fleet_urls(source, tier_options)
    filt = {"key": key, "key_prefix": key_prefix, "headers": headers}
    if urls is None:
        with _opened(source, tier_options) as log:
            scan = log.scan_batches(start, end, columns=columns, body=body, threads=threads, **filt)
            return pa.Table.from_batches(list(scan), schema=scan.schema)
    schema, batches = scan_fleet(urls, start, end, columns, body, threads, tier_options, filt)
    return pa.Table.from_batches(list(batches), schema=schema)
