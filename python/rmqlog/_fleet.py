"""Fleets: many stores read as one. The natural deployment of an embedded log at scale is one store
per machine, each shipping its sealed segments to its own prefix of one bucket
(``s3://bucket/logs/<machine>``); a reader names the prefix, a glob or a list of URLs, and reads
every store, each record tagged with its store's URL (the ``store`` column). Offsets are per
store: ``start`` and ``end`` bound each store's offsets, and a store's read starts at its first
record at or after ``start`` (record boundaries differ from store to store; a ``start`` below a
store's head reads it from its head)."""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Literal
from urllib.parse import unquote

from rmqlog._native import CommitLog, StoreNotFoundError, tier_stores

if TYPE_CHECKING:
    import pyarrow as pa

STORE = "store"  # the column naming a record's store
DEFAULT_COLUMNS = ("offset", "timestamp", "body")  # CommitLog.scan_batches's
_URL = re.compile(r"[A-Za-z0-9]+://")  # as the core's tier::is_url: an alphanumeric scheme

Source = CommitLog | str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def is_url(text: str) -> bool:
    """Whether ``text`` is a tier URL rather than a directory."""
    return _URL.match(text) is not None


def fleet_urls(
    source: Source,
    tier_options: Mapping[str, str] | None = None,
    on_gone: Callable[[str, StoreNotFoundError], None] | None = None,
) -> list[str] | None:
    """The tier URLs of the stores ``source`` names when it is a fleet, else None (one store: an
    open log, its directories, or the URL its tier publishes at).

    A fleet is one URL under which stores publish (``s3://bucket/logs``, ``s3://bucket/logs/web-*``:
    ``rmqlog.tier_stores``), or a list of tier URLs (each a store, a prefix or a glob) that names
    more than one store or a prefix. A list of one store's URL is that store. A list that names
    one store twice (the same URL, another spelling of it, or a prefix or glob that holds it too)
    raises ValueError naming it. A URL that names a store is kept as it is spelled (the ``store``
    column shows it so); the stores under a prefix are the prefix's spelling and their names.
    ``on_gone(url, error)``: a URL of a longer list where no store publishes is left out after
    this call (which may raise); without it, that is ``StoreNotFoundError``."""
    if isinstance(source, CommitLog):
        return None
    settings = dict(tier_options) if tier_options else None
    if isinstance(source, (str, os.PathLike)):
        items = [os.fspath(source)]
        if not is_url(items[0]):
            return None
    else:
        items = [os.fspath(s) for s in source]
        if not any(is_url(s) for s in items):
            return None  # one store's directories
        dirs = [s for s in items if not is_url(s)]
        if dirs:
            raise ValueError(
                f"a list of stores is a list of tier URLs; {dirs[0]!r} is a directory (a store's "
                "directories are read alone: give them as one source)"
            )
    given: dict[str, str] = {}  # each URL of the list, however spelled -> as it is spelled
    for url in items:  # before any request: a URL given twice is refused, whatever it holds
        first = given.get(_same_store(url))
        if first is not None:
            spelled = "" if first == url else f" (as {first!r} and as {url!r})"
            raise ValueError(f"the list of stores names {first!r} twice{spelled}; {_ONCE}")
        given[_same_store(url)] = url
    found: dict[str, tuple[str, str]] = {}  # one store, however spelled -> (spelling, URL given)
    gone = 0
    for url in items:  # each names a store, or a prefix or glob of stores, of its own
        try:
            stores = tier_stores(url, settings)
        except StoreNotFoundError as e:
            if on_gone is None or len(items) == 1:
                raise
            on_gone(url, e)  # a listed store that is gone: the caller's policy says
            gone += 1
            continue
        if stores == [url.rstrip("/")]:
            stores = [url]  # the store itself: as the caller spelled it (tier_stores trims "/")
        for store in stores:
            seen = found.get(_same_store(store))
            if seen is not None:  # named by an earlier URL too (a prefix or a glob)
                raise ValueError(_twice(*seen, store, url))
            found[_same_store(store)] = (store, url)
    if not found:
        raise StoreNotFoundError(f"no rmqlog store publishes at any of {items}")
    urls = sorted(store for store, _ in found.values())
    # A list of one store is that store; one whose other stores are gone is still a fleet (a
    # stream restarted after a store went keeps its schema, the store column).
    return None if not gone and urls == [items[0]] else urls


_ONCE = "name each store once (a store read twice would give each of its records twice)"


def _twice(store: str, url: str, again: str, other: str) -> str:
    """The error for a list whose URLs ``url`` and ``other`` both name one store: ``store`` as
    the first finds it, ``again`` as the second does."""

    def by(found: str, given: str) -> str:
        return repr(given) if found == given else f"{given!r} (which holds it)"

    return (
        f"the list of stores names the store {store!r} twice: by {by(store, url)} and by "
        f"{by(again, other)}; {_ONCE}"
    )


def _same_store(url: str) -> str:
    """What two spellings of one store's URL have in common: ``s3a://`` is ``s3://``, a
    ``file://`` path is normalized (``..``, ``//``), a trailing ``/`` is dropped."""
    scheme, _, rest = url.partition("://")
    scheme = "s3" if scheme.lower() == "s3a" else scheme.lower()
    if scheme == "file":
        rest = posixpath.normpath(unquote(rest))
    return f"{scheme}://{rest.rstrip('/')}"


def _checked_columns(columns: Sequence[str] | None) -> list[str]:
    """A fleet's columns: the store's own (``CommitLog.scan_batches``'s) and ``store``, where
    ``columns`` places it (last by default)."""
    wanted = list(columns) if columns is not None else [*DEFAULT_COLUMNS, STORE]
    if not wanted:
        raise ValueError(
            f"columns is empty; give any of offset, timestamp, body, segment, key, headers, {STORE}"
        )
    twice = sorted({c for c in wanted if wanted.count(c) > 1})
    if twice:
        raise ValueError(f"columns names {twice[0]!r} twice")
    return wanted if STORE in wanted else [*wanted, STORE]


def _bound(name: str, value: int | None) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise TypeError(f"{name} must be an offset (an int >= 0) or None, got {value!r}")
    return value


def scan_fleet(
    urls: Sequence[str],
    start: int | None,
    end: int | None,
    columns: Sequence[str] | None,
    body: Literal["view", "binary"],
    threads: int | None,
    tier_options: Mapping[str, str] | None,
    filt: Mapping[str, object] | None = None,
) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The fleet of stores ``urls`` (found already): the batches' schema, and the batches
    (``filt``: the filter keywords of ``scan_batches``)."""
    filt = dict(filt or {})
    import pyarrow as pa

    start, end = _bound("start", start), _bound("end", end)
    wanted = _checked_columns(columns)
    own = [c for c in wanted if c != STORE]
    kw = {"tier_options": dict(tier_options)} if tier_options else {}
    with CommitLog(urls[0], read_only=True, **kw) as log:
        # The core's types (and names checked) for the store's own columns.
        # (The filter too: a bad one is refused here, before any store is read.)
        empty = log.scan_batches(
            log.max_offset, log.max_offset, columns=own or ["offset"], body=body, **filt
        )
        types = empty.schema
    fields = {f.name: f for f in types}
    schema = pa.schema(
        [pa.field(STORE, pa.string(), nullable=False) if c == STORE else fields[c] for c in wanted]
    )

    def batches() -> Iterator[pa.RecordBatch]:
        for url in urls:
            name = pa.scalar(url, pa.string())
            with CommitLog(url, read_only=True, **kw) as log:
                first = log.min_offset if start is None else max(start, log.min_offset)
                if first >= log.max_offset or (end is not None and first >= end):
                    continue
                first = log._record_start_at_or_after(first)
                scan = log.scan_batches(
                    first, end, columns=own or ["offset"], body=body, threads=threads, **filt
                )
                for batch in scan:
                    tag = pa.repeat(name, batch.num_rows)  # one C call, not a list of refs
                    arrays = [tag if c == STORE else batch.column(c) for c in wanted]
                    yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    return schema, batches()


def scan_batches(
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
) -> Iterator[pa.RecordBatch]:
    """The records starting in ``[start, end)`` of each store ``source`` names, as Arrow record
    batches, store after store (in the order of their URLs).

    ``source``: as :func:`rmqlog.to_arrow`'s. A fleet's batches have a ``store`` column (string,
    the store's tier URL), last unless ``columns`` places it; one store's batches are those of
    :meth:`CommitLog.scan_batches`. ``columns``, ``body``, ``threads`` and the filter (``key``,
    ``key_prefix``, ``headers``) are that method's; ``tier_options`` are the object store's
    settings (endpoint, region, keys)."""
    urls = fleet_urls(source, tier_options)
    filt = {"key": key, "key_prefix": key_prefix, "headers": headers}
    if urls is None:
        with _opened(source, tier_options) as log:
            yield from log.scan_batches(
                start, end, columns=columns, body=body, threads=threads, **filt
            )
        return
    _, batches = scan_fleet(urls, start, end, columns, body, threads, tier_options, filt)
    yield from batches


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
