"""Body lookups by offset: a vectorized (pandas) UDF over a per-process cache of read-only logs.

Each process (a Spark Python worker) opens a store once and keeps it; a daemon janitor thread
closes the logs unused for longer than ``IDLE_SECONDS``.
"""

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pyspark.sql.types import BinaryType

from rmqlog import CommitLog, CorruptionError, InvalidOffsetError, OffsetOutOfRangeError
from rmqlog.spark.batch import _open
from rmqlog.spark.options import parse_options
from rmqlog.spark.store import TIER_PREFIX, Store

IDLE_SECONDS = 30.0
"""A cached log unused for longer than this is closed (its maps released)."""

body_udf_nulls: Counter[str] = Counter()
"""Why lookups in this process gave null: ``null_offset``, ``out_of_range``, ``invalid_offset``,
``corrupt``."""


class _Cached:
    __slots__ = ("last_used", "lock", "log", "pid")

    def __init__(self, log: CommitLog) -> None:
        self.log = log
        self.lock = threading.Lock()
        self.last_used = time.monotonic()
        self.pid = os.getpid()


_cache: dict[Store, _Cached] = {}
_cache_lock = threading.Lock()
_janitor_pid: int | None = None


def _cached(store: Store) -> _Cached:
    _start_janitor()
    with _cache_lock:
        entry = _cache.get(store)
        if entry is not None and (entry.pid != os.getpid() or entry.log.closed):
            entry = None  # inherited through a fork, or closed: not usable here
        if entry is None:
            entry = _Cached(_open(store))
            _cache[store] = entry
        entry.last_used = time.monotonic()
        return entry


def _drop_idle(now: float | None = None, idle: float | None = None) -> int:
    """Closes the cached logs unused for more than ``idle`` seconds; returns how many."""
    now = time.monotonic() if now is None else now
    idle = IDLE_SECONDS if idle is None else idle
    dropped = 0
    with _cache_lock:
        for key, entry in list(_cache.items()):
            if now - entry.last_used <= idle or not entry.lock.acquire(blocking=False):
                continue
            try:
                del _cache[key]
                if entry.pid == os.getpid():
                    entry.log.close()
                dropped += 1
            finally:
                entry.lock.release()
    return dropped


def _janitor() -> None:
    while True:
        time.sleep(max(1.0, min(IDLE_SECONDS / 3, 10.0)))
        try:
            _drop_idle()
        except Exception:  # pragma: no cover - never let the daemon thread die noisily
            pass


def _start_janitor() -> None:
    global _janitor_pid
    if _janitor_pid == os.getpid():
        return
    with _cache_lock:
        if _janitor_pid != os.getpid():
            threading.Thread(target=_janitor, name="rmqlog-udf-janitor", daemon=True).start()
            _janitor_pid = os.getpid()


def _store(
    paths: str | Sequence[str], tier_url: str | None, tier_options: Mapping[str, str] | None
) -> Store:
    """The store as the data source's options name it (the same checks, the same messages)."""
    given = {"path": paths if isinstance(paths, str) else json.dumps([str(p) for p in paths])}
    if tier_url is not None:
        given["tier_url"] = tier_url
    for k, v in (tier_options or {}).items():
        given[TIER_PREFIX + str(k)] = v
    return parse_options(given).store


def lookup_bodies(
    paths: str | Sequence[str],
    offsets: Iterable[Any],
    strict: bool = False,
    *,
    tier_url: str | None = None,
    tier_options: Mapping[str, str] | None = None,
) -> list[bytes | None]:
    """The bodies at ``offsets`` (None for a null, missing or invalid offset, counted in
    ``body_udf_nulls``; with ``strict`` such an offset raises). The log is opened read-only once
    per process and refreshed when an offset at or past its ``max_offset`` is asked for. ``paths``
    and the tier arguments name the store as the data source does: directories, a tier URL, or
    directories plus ``tier_url``; ``tier_options`` are the object store's settings."""
    return _lookup(_store(paths, tier_url, tier_options), offsets, strict)


def _lookup(store: Store, offsets: Iterable[Any], strict: bool) -> list[bytes | None]:
    while True:
        entry = _cached(store)
        entry.lock.acquire()
        if not entry.log.closed:
            break
        entry.lock.release()  # dropped as idle in between: open it again
    out: list[bytes | None] = []
    try:
        log = entry.log
        max_off = log.max_offset
        refreshed = False
        for value in offsets:
            if value is None or value != value:  # None or NaN (a null in a pandas column)
                if strict:
                    raise ValueError("rmqlog body_udf: a null offset (strict=True)")
                body_udf_nulls["null_offset"] += 1
                out.append(None)
                continue
            off = int(value)
            if off >= max_off and not refreshed:
                max_off = log.refresh()
                refreshed = True
            try:
                out.append(log.read(off, body="bytes"))  # one copy, in Rust
            except (OffsetOutOfRangeError, InvalidOffsetError, CorruptionError) as e:
                if strict:
                    raise
                reason = (
                    "out_of_range"
                    if isinstance(e, OffsetOutOfRangeError)
                    else "invalid_offset"
                    if isinstance(e, InvalidOffsetError)
                    else "corrupt"
                )
                body_udf_nulls[reason] += 1
                out.append(None)
        entry.last_used = time.monotonic()
    finally:
        entry.lock.release()
    return out


def _bodies_series(store: Store, strict: bool, offsets: Any) -> Any:
    import pandas as pd

    return pd.Series(_lookup(store, offsets.tolist(), strict), index=offsets.index)


def body_udf(
    paths: str | Sequence[str],
    strict: bool = False,
    *,
    tier_url: str | None = None,
    tier_options: Mapping[str, str] | None = None,
) -> Any:
    """A vectorized (pandas) UDF: a column of offsets (BIGINT) -> their bodies (BINARY).

    ``df.select(body_udf("/d0/store:/d1/store")("offset"))``; ``body_udf("s3://bucket/prefix",
    tier_options={...})`` looks up the remote segments alone. Each Python worker opens the log
    read-only once and keeps it (closed after ``IDLE_SECONDS`` unused); a remote record is
    fetched by a range read. A null, missing (deleted, not yet written) or invalid offset gives
    null, counted by reason in ``body_udf_nulls`` of the worker process; ``strict=True`` raises
    instead.
    """
    import pandas as pd
    from pyspark.sql.functions import pandas_udf

    store = _store(paths, tier_url, tier_options)  # bad arguments fail here, on the driver

    def rmqlog_body(offsets: pd.Series) -> pd.Series:
        return _bodies_series(store, strict, offsets)

    # PySpark's stubs type only the pre-3.0 form with a functionType; the type-hinted form
    # (this one, checked at run time from the hints) has no overload there.
    return pandas_udf(rmqlog_body, BinaryType())  # type: ignore[call-overload]
