"""PySpark readers for rmqlog: a batch and streaming Python data source, and a body-lookup UDF.

    from rmqlog.spark import register, body_udf

    register(spark)
    df = spark.read.format("rmqlog").load("/d0/store:/d1/store")  # offset timestamp body segment
    stream = spark.readStream.format("rmqlog").load("/d0/store:/d1/store")

Executors read the segment files directly (read-only, no lock), so every executor must see the
store's directories: Spark local mode, executors on the broker host, or directories on a shared
filesystem. Rows are built as Arrow record batches by the Rust core (``CommitLog._read_batch``): no
per-record Python code runs in a scan. See ``docs/spark.md``.

Importing this module needs pyspark and pyarrow (``pip install 'rmqlog[spark]'``); ``body_udf``
also needs pandas. ``import rmqlog`` never imports any of them.
"""

import json
import os
import re
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import BinaryType, LongType, StructField, StructType, TimestampType

from rmqlog import (
    CommitLog,
    CorruptionError,
    InvalidOffsetError,
    OffsetOutOfRangeError,
)

try:  # PySpark >= 4.2: admission control (read limits) and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxBytes,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - PySpark 4.0/4.1: no read limits

    @dataclass
    class ReadAllAvailable:  # type: ignore[no-redef]
        pass

    @dataclass
    class ReadMaxBytes:  # type: ignore[no-redef]
        max_bytes: int

    @dataclass
    class ReadMaxRows:  # type: ignore[no-redef]
        max_rows: int

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in: Trigger.AvailableNow for Python sources needs PySpark 4.2."""


__all__ = [
    "ARROW_SCHEMA",
    "NAME",
    "SCHEMA",
    "SCHEMA_DDL",
    "DataLossError",
    "RangePartition",
    "RmqlogDataSource",
    "RmqlogReader",
    "RmqlogStreamReader",
    "body_udf",
    "body_udf_nulls",
    "lookup_bodies",
    "register",
]

if sys.byteorder != "little":  # pragma: no cover
    raise ImportError("rmqlog.spark: the columnar batches are little-endian; this host is not")

NAME = "rmqlog"
SCHEMA_DDL = "offset BIGINT, timestamp TIMESTAMP, body BINARY, segment BIGINT"
SCHEMA = StructType(
    [
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("body", BinaryType()),
        StructField("segment", LongType()),
    ]
)
_TIMESTAMP = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64()),
        pa.field("timestamp", _TIMESTAMP),
        pa.field("body", pa.binary()),
        pa.field("segment", pa.int64()),
    ]
)

DEFAULT_BATCH_BYTES = 64 << 20
DEFAULT_BATCH_RECORDS = 65536
_MAX_BATCH_BYTES = (1 << 31) - 1  # an Arrow binary column (int32 offsets)
_MIN_PARTITION_BYTES = 4096  # smaller splits only multiply tasks
# Chunk size of the driver-side walk that counts records for max_records_per_trigger.
_COUNT_CHUNK_BYTES = 16 << 20


class DataLossError(RuntimeError):
    """Records a query needed were deleted (retention) before it read them."""


# --------------------------------------------------------------------------------------------
# Options


@dataclass(frozen=True)
class Options:
    """Parsed, validated options: plain data, picklable."""

    paths: tuple[str, ...]
    start_offset: int | str | None = None  # int, "earliest", "latest"
    end_offset: int | None = None
    start_timestamp: int | None = None
    end_timestamp: int | None = None
    max_partition_bytes: int | None = None
    batch_bytes: int = DEFAULT_BATCH_BYTES
    batch_records: int = DEFAULT_BATCH_RECORDS
    fail_on_data_loss: bool = True
    max_bytes_per_trigger: int | None = None
    max_records_per_trigger: int | None = None


_BATCH_ONLY = ("end_offset", "end_timestamp")
_STREAM_ONLY = ("max_bytes_per_trigger", "max_records_per_trigger")
_KNOWN = (
    "path",
    "paths",
    "start_offset",
    "end_offset",
    "start_timestamp",
    "end_timestamp",
    "max_partition_bytes",
    "batch_bytes",
    "batch_records",
    "fail_on_data_loss",
    *_STREAM_ONLY,
)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _bad(name: str, value: Any, accepted: str) -> ValueError:
    return ValueError(f"rmqlog: option {name}={value!r} is not valid: expected {accepted}")


def _int(name: str, value: str, minimum: int = 0) -> int:
    try:
        n = int(str(value).strip().replace("_", ""))
    except ValueError:
        raise _bad(name, value, f"an integer >= {minimum}") from None
    if n < minimum:
        raise _bad(name, value, f"an integer >= {minimum}")
    return n


_SIZE = re.compile(r"(\d+)\s*([kmgt]?)(i?b)?")


def _size(name: str, value: str, maximum: int | None = None, minimum: int = 1) -> int:
    """A byte count: ``1048576``, ``512k``, ``64m``, ``64MiB``, ``1g`` (binary units)."""
    accepted = "a number of bytes, such as 1048576, 512k, 64m or 1g"
    if minimum > 1:
        accepted += f", at least {minimum}"
    if maximum is not None:
        accepted += f", at most {maximum}"
    m = _SIZE.fullmatch(str(value).strip().lower().replace("_", ""))
    n = int(m.group(1)) * _SIZE_UNITS[m.group(2)] if m else 0
    if n < max(minimum, 1) or (maximum is not None and n > maximum):
        raise _bad(name, value, accepted)
    return n


def _bool(name: str, value: str) -> bool:
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise _bad(name, value, '"true" or "false"')


def _parse_paths(options: Mapping[str, str]) -> tuple[str, ...]:
    given = [options[k] for k in ("path", "paths") if options.get(k) not in (None, "")]
    if not given:
        raise ValueError(
            "rmqlog: no store given: use .load('/d0/store:/d1/store') or "
            ".option('paths', '/d0/store:/d1/store')"
        )
    found: list[tuple[str, ...]] = []
    for raw in given:
        text = str(raw).strip()
        if text.startswith("["):  # DataFrameReader.load([...]) passes a JSON list
            try:
                items = json.loads(text)
            except ValueError:
                raise _bad("paths", raw, "directories joined by os.pathsep") from None
            parts = [p for item in items for p in str(item).split(os.pathsep)]
        else:
            parts = text.split(os.pathsep)
        parts = [p.strip() for p in parts if p.strip()]
        if not parts:
            raise _bad("paths", raw, f"directories joined by {os.pathsep!r}")
        found.append(tuple(parts))
    if len(found) == 2 and found[0] != found[1]:
        raise ValueError(
            f"rmqlog: both a load() path {given[0]!r} and option paths={given[1]!r} were given; "
            "use one of them"
        )
    return found[0]


def parse_options(options: Mapping[str, str], mode: str | None = None) -> Options:
    """Validates data source options; ``mode`` is ``"batch"``, ``"stream"`` or None (both).

    Raises ValueError naming the option and what it accepts.
    """
    keys = {str(k).lower(): v for k, v in options.items()}
    unknown = sorted(k for k in keys if k not in _KNOWN)
    if unknown:
        raise ValueError(
            f"rmqlog: unknown option(s) {', '.join(unknown)}; accepted options: {', '.join(_KNOWN)}"
        )
    if mode == "stream":
        for k in _BATCH_ONLY:
            if k in keys:
                raise ValueError(
                    f"rmqlog: option {k} applies to spark.read only, not to spark.readStream "
                    "(a stream has no end)"
                )
    if mode == "batch":
        for k in _STREAM_ONLY:
            if k in keys:
                raise ValueError(f"rmqlog: option {k} applies to spark.readStream only")
    kw: dict[str, Any] = {"paths": _parse_paths(keys)}
    if "start_offset" in keys:
        v = str(keys["start_offset"]).strip().lower()
        if v in ("earliest", "latest"):
            kw["start_offset"] = v
        else:
            try:
                kw["start_offset"] = _int("start_offset", v)
            except ValueError:
                raise _bad(
                    "start_offset", keys["start_offset"], 'an offset >= 0, "earliest" or "latest"'
                ) from None
    if "end_offset" in keys:
        v = str(keys["end_offset"]).strip().lower()
        kw["end_offset"] = None if v == "latest" else _int("end_offset", keys["end_offset"])
    for k in ("start_timestamp", "end_timestamp"):
        if k in keys:
            kw[k] = _int(k, keys[k])
    if "max_partition_bytes" in keys:
        kw["max_partition_bytes"] = _size(
            "max_partition_bytes", keys["max_partition_bytes"], minimum=_MIN_PARTITION_BYTES
        )
    if "batch_bytes" in keys:
        kw["batch_bytes"] = _size("batch_bytes", keys["batch_bytes"], _MAX_BATCH_BYTES)
    if "batch_records" in keys:
        kw["batch_records"] = _int("batch_records", keys["batch_records"], 1)
    if "fail_on_data_loss" in keys:
        kw["fail_on_data_loss"] = _bool("fail_on_data_loss", keys["fail_on_data_loss"])
    if "max_bytes_per_trigger" in keys:
        kw["max_bytes_per_trigger"] = _size("max_bytes_per_trigger", keys["max_bytes_per_trigger"])
    if "max_records_per_trigger" in keys:
        kw["max_records_per_trigger"] = _int(
            "max_records_per_trigger", keys["max_records_per_trigger"], 1
        )
    opts = Options(**kw)
    so, eo = opts.start_offset, opts.end_offset
    if isinstance(so, int) and eo is not None and so > eo:
        raise ValueError(f"rmqlog: start_offset={so} is after end_offset={eo}")
    st, et = opts.start_timestamp, opts.end_timestamp
    if st is not None and et is not None and st > et:
        raise ValueError(f"rmqlog: start_timestamp={st} is after end_timestamp={et}")
    return opts


def _check_schema(schema: StructType | None) -> None:
    if schema is None:
        return
    got = [(f.name, f.dataType) for f in schema.fields]
    want = [(f.name, f.dataType) for f in SCHEMA.fields]
    if got != want:
        raise ValueError(
            f"rmqlog: the schema is fixed ({SCHEMA_DDL}); got {schema.simpleString()}. "
            "Leave .schema() out and select or cast columns afterwards"
        )


# --------------------------------------------------------------------------------------------
# Planning and reading


class RangePartition(InputPartition):
    """The records that start in the byte range ``[lo, hi)`` of the log: one Spark task."""

    def __init__(self, index: int, lo: int, hi: int) -> None:
        super().__init__((lo, hi))
        self.index = index
        self.lo = lo
        self.hi = hi

    def __repr__(self) -> str:
        return f"RangePartition(index={self.index}, lo={self.lo}, hi={self.hi})"


def _open(paths: Sequence[str]) -> CommitLog:
    return CommitLog(list(paths), read_only=True)


def _data_loss(opts: Options, what: str) -> None:
    msg = (
        f"rmqlog: {what}: those records were deleted (retention) before the query read them. "
        'Set option fail_on_data_loss="false" to skip them with a warning instead'
    )
    if opts.fail_on_data_loss:
        raise DataLossError(msg)
    warnings.warn(f"rmqlog: {what}; skipping the missing records", RuntimeWarning, stacklevel=3)


def _byte_ranges(
    log: CommitLog, lo: int, hi: int, max_partition_bytes: int | None
) -> list[RangePartition]:
    """Partitions over ``[lo, hi)``: one per segment, each split into pieces of at most
    ``max_partition_bytes`` bytes. A record belongs to the partition its offset falls in."""
    parts: list[RangePartition] = []
    if lo >= hi:
        return parts
    for seg in log.segments():
        a = max(lo, seg.start_offset)
        b = min(hi, seg.start_offset + seg.size)
        if a >= b:
            continue
        step = max_partition_bytes or (b - a)
        for x in range(a, b, step):
            parts.append(RangePartition(len(parts), x, min(x + step, b)))
    return parts


def _resolve_range(log: CommitLog, opts: Options) -> tuple[int, int]:
    """``[lo, hi)`` of a batch read from the options, on the log as it is now."""
    min_off, max_off = log.min_offset, log.max_offset
    lo, hi = min_off, max_off
    so = opts.start_offset
    if so == "latest":
        lo = max_off
    elif isinstance(so, int):
        if so < min_off:
            _data_loss(opts, f"start_offset={so} is below the log's min_offset={min_off}")
        lo = max(so, min_off)
    if opts.start_timestamp is not None:
        lo = max(lo, log.offset_for_timestamp(opts.start_timestamp))
    if opts.end_offset is not None:
        hi = min(hi, opts.end_offset)
    if opts.end_timestamp is not None:
        hi = min(hi, log.offset_for_timestamp(opts.end_timestamp))
    return lo, max(lo, hi)


def _record_batch(
    n: int, offsets: bytes, timestamps: bytes, segments: bytes, value_offsets: bytes, data: bytes
) -> pa.RecordBatch:
    """Wraps the columnar buffers of ``_read_batch`` as an Arrow batch (no copy, no loop)."""
    return pa.RecordBatch.from_arrays(
        [
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offsets)]),
            pa.Array.from_buffers(_TIMESTAMP, n, [None, pa.py_buffer(timestamps)]),
            pa.Array.from_buffers(
                pa.binary(), n, [None, pa.py_buffer(value_offsets), pa.py_buffer(data)]
            ),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(segments)]),
        ],
        schema=ARROW_SCHEMA,
    )


def read_range(opts: Options, part: InputPartition) -> Iterator[pa.RecordBatch]:
    """Reads one partition: opens the log read-only, yields Arrow batches, closes the log."""
    if not isinstance(part, RangePartition):  # Spark's placeholder for an empty plan
        return
    log = _open(opts.paths)
    try:
        lo, hi = part.lo, part.hi
        min_off = log.min_offset
        if lo < min_off:  # planned when it was there: deleted since
            _data_loss(opts, f"offsets [{lo}, {min(hi, min_off)}) are below min_offset={min_off}")
            if hi <= min_off:
                return
        pos = log._record_start_at_or_after(max(lo, min_off))
        while pos < hi:
            nxt, n, offs, ts, segs, value_offsets, data = log._read_batch(
                pos, hi, opts.batch_records, opts.batch_bytes
            )
            if n:
                yield _record_batch(n, offs, ts, segs, value_offsets, data)
            if nxt <= pos:
                break
            pos = nxt
        if pos < hi and log.max_offset < hi:
            raise RuntimeError(
                f"rmqlog: the log ends at {log.max_offset}, before the end of this partition "
                f"({hi}) that the planner saw: was the tail cut by a writer's recovery?"
            )
    finally:
        log.close()


class RmqlogReader(DataSourceReader):
    """Batch reader: holds only the options; partitions are planned from the segment list."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts

    def partitions(self) -> list[RangePartition]:
        log = _open(self.opts.paths)
        try:
            lo, hi = _resolve_range(log, self.opts)
            return _byte_ranges(log, lo, hi, self.opts.max_partition_bytes)
        finally:
            log.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.opts, partition)


def _offset(value: Any, what: str) -> int:
    if isinstance(value, dict) and isinstance(value.get("offset"), int):
        return value["offset"]
    raise ValueError(f'rmqlog: bad {what} offset {value!r}: expected {{"offset": <int>}}')


class RmqlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. Offsets are ``{"offset": <physical offset>}``: a record boundary (or
    the end of a segment's records); a micro-batch reads the records that start in
    ``[start, end)``. The driver side follows the writer with a read-only log and ``refresh()``.
    """

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self._log: CommitLog | None = None
        self._target: int | None = None  # Trigger.AvailableNow

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_log"] = None  # the reader is pickled to executors: never ship an open log
        return state

    def _follower(self, refresh: bool = True) -> CommitLog:
        if self._log is None:
            self._log = _open(self.opts.paths)
        elif refresh:
            self._log.refresh()
        return self._log

    def initialOffset(self) -> dict:
        log = self._follower()
        so = self.opts.start_offset
        if so == "latest":
            start = log.max_offset
        elif isinstance(so, int):
            if so < log.min_offset:
                _data_loss(self.opts, f"start_offset={so} is below min_offset={log.min_offset}")
            start = log._record_start_at_or_after(max(so, log.min_offset))
        else:
            start = log.min_offset
        if self.opts.start_timestamp is not None:
            start = max(start, log.offset_for_timestamp(self.opts.start_timestamp))
        return {"offset": start}

    def getDefaultReadLimit(self) -> Any:
        if self.opts.max_records_per_trigger is not None:
            return ReadMaxRows(self.opts.max_records_per_trigger)
        if self.opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.opts.max_bytes_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        log = self._follower()
        end = log.max_offset
        if self._target is not None:
            end = min(end, self._target)
        if start is None:  # PySpark < 4.2: no admission control
            return {"offset": end}
        pos = _offset(start, "start")
        if pos >= end:
            return {"offset": pos}
        if limit is None or isinstance(limit, ReadAllAvailable):
            return {"offset": end}
        max_bytes = self.opts.max_bytes_per_trigger
        max_records = self.opts.max_records_per_trigger
        if isinstance(limit, ReadMaxBytes):
            max_bytes = min(max_bytes or limit.max_bytes, limit.max_bytes)
        if isinstance(limit, ReadMaxRows):
            max_records = min(max_records or limit.max_rows, limit.max_rows)
        pos = max(pos, log.min_offset)
        if max_bytes is not None and pos + max_bytes < end:
            # the first boundary at or after pos + max_bytes: at least one record, at most one
            # record over the limit
            end = min(end, log._record_start_at_or_after(pos + max_bytes))
        if max_records is not None:
            end = self._after_records(log, pos, end, max_records)
        return {"offset": end}

    @staticmethod
    def _after_records(log: CommitLog, pos: int, end: int, count: int) -> int:
        """Where the ``count`` records starting at ``pos`` end (at most ``end``)."""
        while count > 0 and pos < end:
            nxt, n, *_ = log._read_batch(pos, end, count, _COUNT_CHUNK_BYTES)
            count -= n
            if nxt <= pos:
                break
            pos = nxt
        return pos

    def reportLatestOffset(self) -> dict | None:
        return {"offset": self._follower().max_offset}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._follower().max_offset

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        lo, hi = _offset(start, "start"), _offset(end, "end")
        if lo >= hi:
            return []
        log = self._follower(refresh=False)
        if log.max_offset < hi:
            log.refresh()
        if lo < log.min_offset:
            _data_loss(
                self.opts,
                f"the micro-batch starts at {lo}, below the log's min_offset={log.min_offset} "
                f"({log.min_offset - lo} bytes deleted before the query reached them)",
            )
            lo = min(log.min_offset, hi)
        return _byte_ranges(log, lo, hi, self.opts.max_partition_bytes)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the log is not consumed, retention is the writer's business."""

    def stop(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


class RmqlogDataSource(DataSource):
    """The ``rmqlog`` data source: ``spark.read.format("rmqlog").load(paths)`` and readStream."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        parse_options(self.options)  # bad options fail at load(), before any job
        return SCHEMA

    def reader(self, schema: StructType) -> RmqlogReader:
        _check_schema(schema)
        return RmqlogReader(parse_options(self.options, "batch"))

    def streamReader(self, schema: StructType) -> RmqlogStreamReader:
        _check_schema(schema)
        return RmqlogStreamReader(parse_options(self.options, "stream"))


def register(spark: Any) -> type[RmqlogDataSource]:
    """Registers the ``rmqlog`` data source (batch and streaming) with a SparkSession."""
    spark.dataSource.register(RmqlogDataSource)
    return RmqlogDataSource


# --------------------------------------------------------------------------------------------
# Body lookups by offset (a vectorized UDF)

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


_cache: dict[tuple[str, ...], _Cached] = {}
_cache_lock = threading.Lock()
_janitor_pid: int | None = None


def _cached(paths: tuple[str, ...]) -> _Cached:
    _start_janitor()
    with _cache_lock:
        entry = _cache.get(paths)
        if entry is not None and (entry.pid != os.getpid() or entry.log.closed):
            entry = None  # inherited through a fork, or closed: not usable here
        if entry is None:
            entry = _Cached(_open(paths))
            _cache[paths] = entry
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


def lookup_bodies(
    paths: str | Sequence[str], offsets: Iterable[Any], strict: bool = False
) -> list[bytes | None]:
    """The bodies at ``offsets`` (None for a null, missing or invalid offset, counted in
    ``body_udf_nulls``; with ``strict`` such an offset raises). The log is opened read-only once
    per process and refreshed when an offset at or past its ``max_offset`` is asked for."""
    key = tuple(paths.split(os.pathsep)) if isinstance(paths, str) else tuple(map(str, paths))
    while True:
        entry = _cached(key)
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
                out.append(bytes(log.read(off)))
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


def _bodies_series(paths: tuple[str, ...], strict: bool, offsets: Any) -> Any:
    import pandas as pd

    return pd.Series(lookup_bodies(paths, offsets.tolist(), strict), index=offsets.index)


def body_udf(paths: str | Sequence[str], strict: bool = False) -> Any:
    """A vectorized (pandas) UDF: a column of offsets (BIGINT) -> their bodies (BINARY).

    ``df.select(body_udf("/d0/store:/d1/store")("offset"))``. Each Python worker opens the log
    read-only once and keeps it (closed after ``IDLE_SECONDS`` unused). A null, missing
    (deleted, not yet written) or invalid offset gives null, counted by reason in
    ``body_udf_nulls`` of the worker process; ``strict=True`` raises instead.
    """
    import pandas as pd
    from pyspark.sql.functions import pandas_udf

    key = tuple(paths.split(os.pathsep)) if isinstance(paths, str) else tuple(map(str, paths))
    if not key or not all(key):
        raise ValueError(f"rmqlog body_udf: no store directories in {paths!r}")

    def rmqlog_body(offsets: pd.Series) -> pd.Series:
        return _bodies_series(key, strict, offsets)

    return pandas_udf(rmqlog_body, BinaryType())
