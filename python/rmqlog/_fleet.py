"""Fleets: many stores read as one. The natural deployment of an embedded log at scale is one store
per machine, each shipping its sealed segments to its own prefix of one bucket
(``s3://bucket/logs/<machine>``); a reader names the prefix, a glob or a list of URLs, and reads
every store, each record tagged with its store's URL (the ``store`` column). Offsets are per
store: ``start`` and ``end`` bound each store's offsets, and a store's read starts at its first
record at or after ``start`` (record boundaries differ from store to store)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from rmqlog._native import CommitLog, tier_stores

if TYPE_CHECKING:
    import pyarrow as pa

STORE = "store"  # the column naming a record's store
_URL = re.compile(r"[A-Za-z0-9]+://")  # as the core's tier::is_url: an alphanumeric scheme

Source = CommitLog | str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def is_url(text: str) -> bool:
    """Whether ``text`` is a tier URL rather than a directory."""
    return _URL.match(text) is not None


def fleet_urls(source: Source, tier_options: Mapping[str, str] | None = None) -> list[str] | None:
    """The tier URLs of the stores ``source`` names when it is a fleet, else None (one store: an
    open log, its directories, or the URL its tier publishes at).

    A fleet is a list of tier URLs (each a store, a prefix or a glob), or one URL under which
    stores publish (``s3://bucket/logs``, ``s3://bucket/logs/web-*``): ``rmqlog.tier_stores``."""
    if isinstance(source, CommitLog):
        return None
    if isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        if not is_url(text):
            return None
        found = tier_stores(text, tier_options)
        return None if found == [text.rstrip("/")] else found
    items = [os.fspath(s) for s in source]
    urls = [s for s in items if is_url(s)]
    if not urls:
        return None  # one store's directories
    if len(urls) != len(items):
        dirs = [s for s in items if not is_url(s)]
        raise ValueError(
            f"a list of stores is a list of tier URLs; {dirs[0]!r} is a directory (a store's "
            "directories are read alone: give them as one source)"
        )
    found: list[str] = []
    for url in urls:
        found += [u for u in tier_stores(url, tier_options) if u not in found]
    return sorted(found)


def scan_batches(
    source: Source,
    start: int | None = None,
    end: int | None = None,
    *,
    columns: Sequence[str] | None = None,
    body: Literal["view", "binary"] = "view",
    threads: int | None = None,
    tier_options: Mapping[str, str] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The records starting in ``[start, end)`` of each store ``source`` names, as Arrow record
    batches, store after store (in the order of their URLs).

    ``source``: as :func:`rmqlog.to_arrow`'s. A fleet's batches have a ``store`` column (string,
    the store's tier URL), last unless ``columns`` places it; one store's batches are those of
    :meth:`CommitLog.scan_batches`. ``columns``, ``body`` and ``threads`` are that method's;
    ``tier_options`` are the object store's settings (endpoint, region, keys)."""
    import pyarrow as pa

    urls = fleet_urls(source, tier_options)
    if urls is None:
        with _opened(source, tier_options) as log:
            yield from log.scan_batches(start, end, columns=columns, body=body, threads=threads)
        return
    wanted = list(columns) if columns is not None else ["offset", "timestamp", "body", STORE]
    if STORE not in wanted:
        wanted.append(STORE)
    at = wanted.index(STORE)
    own = [c for c in wanted if c != STORE]
    for url in urls:
        kw = {"tier_options": dict(tier_options)} if tier_options else {}
        with CommitLog(url, read_only=True, **kw) as log:
            first = log.min_offset if start is None else max(start, log.min_offset)
            if first >= log.max_offset or (end is not None and first >= end):
                continue
            first = log._record_start_at_or_after(first)
            scan = log.scan_batches(first, end, columns=own, body=body, threads=threads)
            for batch in scan:
                arrays = list(batch.columns)
                arrays.insert(at, pa.array([url] * batch.num_rows, pa.string()))
                yield pa.RecordBatch.from_arrays(arrays, names=wanted)


class _opened:
    """``source`` as an open log: the caller's own (left open), or one opened read-only here."""

    def __init__(self, source: Source, tier_options: Mapping[str, str] | None) -> None:
        self.source = source
        self.tier_options = tier_options

    def __enter__(self) -> CommitLog:
        if isinstance(self.source, CommitLog):
            self.log = self.source
        else:
            kw = {"tier_options": dict(self.tier_options)} if self.tier_options else {}
            self.log = CommitLog(self.source, read_only=True, **kw)
        return self.log

    def __exit__(self, *_: object) -> None:
        if self.log is not self.source:
            self.log.close()
