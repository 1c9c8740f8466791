"""``to_arrow``: a log (or a range of it), or a fleet of stores, as one ``pyarrow.Table``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from rmqlog._fleet import STORE, Source, _opened, fleet_urls, scan_batches

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
) -> pa.Table:
    """The records starting in ``[start, end)`` of a log, or of every store of a fleet, as one
    ``pyarrow.Table``.

    ``source`` is an open ``CommitLog``; a store's path(s) or tier URL, opened read-only for the
    call and closed after it (the table keeps the maps its views need); or a fleet: a list of tier
    URLs, or a URL under which stores publish (``s3://bucket/logs``, or a glob of their names,
    ``s3://bucket/logs/web-*``; see ``rmqlog.tier_stores``). A fleet's table has a ``store``
    column (the store's tier URL), and ``start``/``end`` bound each store's offsets.
    ``columns``, ``body`` and ``threads`` are those of :meth:`CommitLog.scan_batches`;
    ``tier_options`` the object store's settings. Errors are rmqlog's own (a damaged record
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
    if urls is None:
        with _opened(source, tier_options) as log:
            scan = log.scan_batches(start, end, columns=columns, body=body, threads=threads)
            return pa.Table.from_batches(list(scan), schema=scan.schema)
    batches = list(
        scan_batches(
            urls, start, end, columns=columns, body=body, threads=threads, tier_options=tier_options
        )
    )
    if batches:
        return pa.Table.from_batches(batches)
    # No record in any store: the schema from the first store's (empty) scan.
    own = [c for c in (columns or ("offset", "timestamp", "body")) if c != STORE]
    with _opened(urls[0], tier_options) as log:
        schema = log.scan_batches(log.max_offset, log.max_offset, columns=own, body=body).schema
    names = list(columns) if columns is not None and STORE in columns else [*own, STORE]
    fields = {f.name: f for f in schema}
    return pa.schema(
        [pa.field(STORE, pa.string()) if n == STORE else fields[n] for n in names]
    ).empty_table()
