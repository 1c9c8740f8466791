"""Type stubs for the native half of rmqlog."""

import datetime
import os
from collections.abc import (
    AsyncIterator,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from types import TracebackType
from typing import Any, Generic, Literal, Protocol, Self, final, overload

import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no stubs
from typing_extensions import Buffer, TypeVar

from rmqlog._appended import Appended

__all__ = [
    "DEFAULTS",
    "FEATURES",
    "HEADER_LEN",
    "MAX_ID_LEN",
    "MAX_KEY_LEN",
    "MAX_OFFSET",
    "PRESETS",
    "SPLIT_EVERY",
    "STORE_SETTINGS",
    "BatchScan",
    "ClaimLostError",
    "ClosedError",
    "CommitLog",
    "CommitLogError",
    "ConfigurationError",
    "Consumer",
    "ConsumerBusyError",
    "CorruptionError",
    "DataLossError",
    "DirInfo",
    "DiskFullError",
    "InvalidOffsetError",
    "LockTimeoutError",
    "MessageTooLargeError",
    "OffsetOutOfRangeError",
    "ReadOnlyError",
    "Record",
    "ScanIterator",
    "Segment",
    "SegmentBuffer",
    "StoreLockedError",
    "StoreNotFoundError",
    "TierError",
    "WriterPoisonedError",
    "__version__",
    "_flush_logging",
    "_shutdown_logging",
    "tier_stores",
]

__version__: str
FEATURES: frozenset[str]
"""The optional cargo features the extension was built with, of ``arrow`` and ``tier``."""
HEADER_LEN: int
# The longest key a record carries, in bytes.
MAX_ID_LEN: int
MAX_KEY_LEN: int
MAX_OFFSET: int
"""The largest offset a log holds, 2**63 - 1: offsets are signed 64-bit in Arrow, Spark and Java."""
SPLIT_EVERY: int
"""The spacing of ``Segment.splits``: a remote segment lists its first record at or after every
multiple of this many bytes (32 MiB)."""
DEFAULTS: dict[str, object]
"""The value each keyword argument of ``CommitLog`` takes when it is not given (no preset); for a
store-wide setting, only where the store records none."""
STORE_SETTINGS: tuple[str, ...]
"""The options a store keeps for all its opens (docs/options.md)."""
PRESETS: dict[str, dict[str, object]]
"""For each ``preset`` name, the value each keyword argument takes with it when not given."""

def _shutdown_logging() -> None:
    """Delivers queued log records and stops the delivery thread (run at exit)."""

def _flush_logging() -> None:
    """Returns once every log record logged before the call is delivered."""

def tier_stores(url: str, tier_options: Mapping[str, str] | None = None) -> list[str]:
    """The tier URLs of the stores ``url`` names, sorted: ``url`` itself when a store publishes
    there; else the stores directly under it (one level); with ``*`` or ``?`` in its last part,
    the stores directly under its parent whose names match. ``tier_options`` are the object
    store's settings (endpoint, region, keys), as for ``CommitLog``. No store there raises
    ``StoreNotFoundError``."""

_StrPath = str | os.PathLike[str]

_Body = TypeVar("_Body", memoryview, bytes, default=memoryview)
# A record's headers as append takes them: (name, value) pairs in order, or a dict.
_Headers = Sequence[tuple[str, Buffer | str]] | Mapping[str, Buffer | str]
# A filter's accepted key or header value (docs/producers-consumers.md, "Filters"): one, or a
# collection of them (any one accepted).
_Accepted = (
    Buffer
    | str
    | list[Buffer | str]
    | tuple[Buffer | str, ...]
    | set[bytes | str]
    | frozenset[bytes | str]
)
# A filter on headers: each name's accepted value(s); every name must match.
_HeaderFilter = dict[str, _Accepted]
"""What a read hands a body out as: ``memoryview`` (``body="view"``, the default) or ``bytes``
(``body="bytes"``)."""

class CommitLogError(Exception):
    """Base of every rmqlog error."""

class OffsetOutOfRangeError(CommitLogError, IndexError):
    """The offset is below min_offset or at/after max_offset."""

class InvalidOffsetError(CommitLogError, ValueError):
    """The offset is inside the log but not the start of a record."""

class MessageTooLargeError(CommitLogError, ValueError):
    """The body is over max_message_size or too large for one segment."""

class DiskFullError(CommitLogError, OSError):
    """No writable directory has room for a new segment."""

class StoreLockedError(CommitLogError):
    """Another writer holds the store."""

class StoreNotFoundError(CommitLogError, FileNotFoundError):
    """The paths hold no rmqlog store (a read-only open of the wrong folder)."""

class ConfigurationError(CommitLogError, ValueError):
    """The directories given do not make up the store: one missing, foreign, or a copy."""

class CorruptionError(CommitLogError):
    """A record or the on-disk layout failed validation."""

class ReadOnlyError(CommitLogError):
    """A write on a read-only log."""

class ClosedError(CommitLogError, ValueError):
    """A call on a closed log."""

class WriterPoisonedError(CommitLogError):
    """An append after a failed sync; reads keep working."""

class DataLossError(CommitLogError):
    """Records a consumer had not read were deleted before it read them; seek to go on."""

class ConsumerBusyError(CommitLogError):
    """Another open, in this process or another, holds the consumer name."""

class ClaimLostError(CommitLogError):
    """Records this open of a shared consumer name had received went to another open before it
    committed (acknowledged, extended) them: their redelivery timeout passed. The records it
    still held were committed first."""

    lost: list[tuple[int, int, int | None]]
    """The records lost, as ``(from, to, pid)``: ``pid`` the process whose open has them now,
    ``None`` if none has them (waiting for the next poll, or done by another open)."""
    committed: int
    """The name's committed position after the call."""

class LockTimeoutError(CommitLogError, TimeoutError):
    """A shared writer waited longer than lock_timeout_ms for the append lock, or a maintenance
    call for the maintenance lock (its holder stopped); nothing was done."""

class TierError(CommitLogError, OSError):
    """The remote tier's object store failed a request (unreachable, refused)."""

@final
class Record(Generic[_Body]):
    """One record (``Record[bytes]`` from ``read_record(offset, body="bytes")``)."""

    @property
    def offset(self) -> int:
        """Physical offset of the record."""
    @property
    def timestamp_ms(self) -> int:
        """Store timestamp, milliseconds since the Unix epoch (non-decreasing in a log)."""
    @property
    def body(self) -> _Body:
        """The body: a read-only memoryview over the segment's map (no copy), or with
        ``body="bytes"`` a ``bytes`` copy."""
    @property
    def key(self) -> bytes | None:
        """The record's key, or None for a record appended without one."""
    @property
    def headers(self) -> list[tuple[str, bytes]]:
        """The record's headers, in the order appended (names may repeat)."""
    @property
    def msg_id(self) -> bytes | None:
        """The message id the record was appended with, or None."""
    @property
    def next_offset(self) -> int:
        """Offset of the next record (after a segment filler: the next segment's start)."""

@final
class Segment:
    """One segment file."""

    @property
    def start_offset(self) -> int:
        """Physical offset of the segment's first byte (its file name)."""
    @property
    def path(self) -> str:
        """Full path of the file."""
    @property
    def size(self) -> int:
        """Length of the file."""
    @property
    def written(self) -> int:
        """Bytes in use: the end of the records in the active segment, all of a sealed one."""
    @property
    def sealed(self) -> bool:
        """Sealed: wholly below ``max_offset`` and not the last segment. Only sealed segments are
        deleted by retention or moved (``move_segment``)."""
    @property
    def local(self) -> bool:
        """The segment has a file in the store's directories."""
    @property
    def remote(self) -> bool:
        """The segment has a verified copy in the remote tier (``path`` is the object's URL when
        it is not local)."""
    @property
    def splits(self) -> list[int]:
        """Offsets inside the segment where a record starts, known without reading it: a remote
        copy's first record at or after every 32 MiB. A reader may split the segment there (a
        reader of one part of a remote-only segment fetches only that part). Empty for a segment
        with no remote copy, or of 32 MiB or less."""

@final
class DirInfo:
    """One directory of the store: its state and disk usage."""

    @property
    def path(self) -> str:
        """The directory, absolute."""
    @property
    def state(self) -> Literal["writable", "read_only", "full", "offline"]:
        """Whether new segments may go here, and if not, why."""
    @property
    def total_bytes(self) -> int | None:
        """Size of its filesystem; None when unknown (unreadable, or a filesystem that reports no
        size, such as a FUSE filesystem without statfs)."""
    @property
    def free_bytes(self) -> int | None:
        """Space an unprivileged writer can use there (statvfs ``f_bavail``); None when unknown."""
    @property
    def used_ratio(self) -> float | None:
        """Used ratio as ``df`` computes it; None when unknown."""
    @property
    def segments(self) -> int:
        """Live segments of this log in the directory."""
    @property
    def error(self) -> str | None:
        """Why the directory is offline or full, else None."""

_Strategy = Literal["round_robin", "most_free", "fewest_segments", "weighted_free"]
_StrategyFn = Callable[[list[DirInfo], int], int]
_DirEventFn = Callable[[str, str, str, str], object]

@final
class ScanIterator(Iterator[tuple[int, _Body]]):
    """Iterator of ``(offset, body)`` returned by :meth:`CommitLog.scan` (``ScanIterator[bytes]``
    with ``body="bytes"``)."""

    def __iter__(self) -> Self: ...
    def __next__(self) -> tuple[int, _Body]: ...
    def __aiter__(self) -> Self:
        """``async for offset, body in log.scan(...)``: the same records; a following scan waits
        for the next ones in the event loop instead of blocking it (``timeout``, ``end`` and the
        log's ``close()`` end it as they end a blocking one)."""
    def __anext__(self) -> Coroutine[Any, Any, tuple[int, _Body]]: ...
    def _next_now(self) -> tuple[int, _Body] | None:
        """The next record if one is there now; ``None`` when a following scan is at the end of
        the records; ``StopAsyncIteration`` once the scan is done."""

class _ArrowArrayLike(Protocol):
    """An Arrow array through the PyCapsule interface (``__arrow_c_array__``); objects with
    ``__arrow_c_stream__`` only (``pyarrow.ChunkedArray``, Polars Series) are accepted too."""

    def __arrow_c_array__(
        self, requested_schema: object | None = None
    ) -> tuple[object, object]: ...

@final
class BatchScan(Iterator[pa.RecordBatch]):
    """Record batches returned by :meth:`CommitLog.scan_batches`, built in Rust.

    Iterating yields ``pyarrow.RecordBatch`` objects (pyarrow needed). The object is also an Arrow
    PyCapsule stream (``__arrow_c_stream__``): ``pyarrow.RecordBatchReader.from_stream(scan)``,
    ``polars.from_arrow(scan)`` and ``duckdb.sql("select ... from scan")`` read it without pyarrow
    and with no Python object per record. Each stream export reads from :attr:`position` to
    :attr:`end` anew; it does not advance this iterator. One thread advances it at a time:
    another thread's call meanwhile raises ``RuntimeError``.
    """

    def __iter__(self) -> Self: ...
    def __next__(self) -> pa.RecordBatch: ...
    @property
    def position(self) -> int:
        """The offset the next batch starts at: once done, the end of the last record read (at
        or past :attr:`end` when ``end`` falls inside a record); after an error, the record it
        was about."""
    @property
    def end(self) -> int:
        """The end of the range: no record starting at or after it is read."""
    @property
    def schema(self) -> pa.Schema:
        """The batches' schema."""
    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """An ``arrow_array_stream`` capsule over the batches from :attr:`position` on."""

_Start = Literal["earliest", "latest"] | int | datetime.datetime

@final
class Consumer:
    """A named consumer of a log (``CommitLog.consumer``): a position the store keeps."""

    @property
    def name(self) -> str: ...
    @property
    def position(self) -> int:
        """The next record a poll delivers (shared: the first no open had claimed, as of this
        open's last poll)."""
    @property
    def committed(self) -> int:
        """The committed position: every record below it is done."""
    @property
    def closed(self) -> bool: ...
    @property
    def lag(self) -> dict[str, int]:
        """``{"records": n, "bytes": n}`` between the committed position and the log's end;
        the records are counted from the segments' counts (at most a walk of part of the
        segment holding the position).

        An open with a filter adds ``"exact"`` (a bool): ``True`` when ``records`` counts only
        the records the filter accepts (a walk of their headers, done when the lag is at most
        8 MiB), ``False`` when it counts every record, an upper bound of what the open will
        receive. ``bytes`` is the distance to the end either way."""
    @overload
    def poll(
        self,
        max_records: int | None = None,
        *,
        timeout: float | None = None,
        body: Literal["view"] = "view",
        with_deliveries: Literal[False] = False,
        key: _Accepted | None = None,
        key_prefix: Buffer | str | None = None,
        headers: _HeaderFilter | None = None,
    ) -> list[tuple[int, memoryview]]:
        """Up to ``max_records`` (default 500) records as ``(offset, body)``, waiting up to
        ``timeout`` seconds (None: as long as it takes) for the first; ``[]`` if none came.
        Waits release the GIL; Ctrl-C interrupts them. ``body``: as :meth:`CommitLog.read`'s.
        ``with_deliveries=True``: ``(offset, body, deliveries)``, how many times the name has
        delivered the record (this one included).

        ``key``, ``key_prefix``, ``headers``: a filter for this poll, on top of the open's
        (:meth:`CommitLog.consumer`): both must accept a record. What it refuses is moved over as
        what the open's filter refuses is: a later poll does not see it."""
    @overload
    def poll(
        self,
        max_records: int | None = None,
        *,
        timeout: float | None = None,
        body: Literal["bytes"],
        with_deliveries: Literal[False] = False,
        key: _Accepted | None = None,
        key_prefix: Buffer | str | None = None,
        headers: _HeaderFilter | None = None,
    ) -> list[tuple[int, bytes]]: ...
    @overload
    def poll(
        self,
        max_records: int | None = None,
        *,
        timeout: float | None = None,
        body: Literal["view"] = "view",
        with_deliveries: Literal[True],
        key: _Accepted | None = None,
        key_prefix: Buffer | str | None = None,
        headers: _HeaderFilter | None = None,
    ) -> list[tuple[int, memoryview, int]]: ...
    @overload
    def poll(
        self,
        max_records: int | None = None,
        *,
        timeout: float | None = None,
        body: Literal["bytes"],
        with_deliveries: Literal[True],
        key: _Accepted | None = None,
        key_prefix: Buffer | str | None = None,
        headers: _HeaderFilter | None = None,
    ) -> list[tuple[int, bytes, int]]: ...
    @overload
    def poll_async(
        self,
        max_records: int | None = None,
        *,
        timeout: float | None = None,
        body: Literal["view"] = "view",
        with_deliveries: Literal[False] = False,
        key: _Accepted | None = None,
        key_prefix: Buffer | str | None = None,
        headers: _HeaderFilter | None = None,
    ) -> Coroutine[Any, Any, list[tuple[int, memoryview]]]:
        """:meth:`poll` awaited: the event loop runs while it waits for the first record (no
        thread per waiter: one thread per log sleeps on the store's futex for every coroutine).
        Cancelling the task ends the wait at once; so does closing the consumer (its error) or
        the log (``ClosedError``). It polls again every 0.1 s meanwhile, for claims of other
        workers that lapsed, a nack's delay or another task's seek. See
        docs/producers-consumers.md, "asyncio"."""
    @overload
    def poll_async(
        self,
        max_records: int | None = None,
        *,
        timeout: float | None = None,
        body: Literal["bytes"],
        with_deliveries: Literal[False] = False,
        key: _Accepted | None = None,
        key_prefix: Buffer | str | None = None,
        headers: _HeaderFilter | None = None,
    ) -> Coroutine[Any, Any, list[tuple[int, bytes]]]: ...
    @overload
    def poll_async(
        self,
        max_records: int | None = None,
        *,
        timeout: float | None = None,
        body: Literal["view"] = "view",
        with_deliveries: Literal[True],
        key: _Accepted | None = None,
        key_prefix: Buffer | str | None = None,
        headers: _HeaderFilter | None = None,
    ) -> Coroutine[Any, Any, list[tuple[int, memoryview, int]]]: ...
    @overload
    def poll_async(
        self,
        max_records: int | None = None,
        *,
        timeout: float | None = None,
        body: Literal["bytes"],
        with_deliveries: Literal[True],
        key: _Accepted | None = None,
        key_prefix: Buffer | str | None = None,
        headers: _HeaderFilter | None = None,
    ) -> Coroutine[Any, Any, list[tuple[int, bytes, int]]]: ...
    @overload
    def stream(
        self,
        max_records: int | None = None,
        *,
        body: Literal["view"] = "view",
        key: _Accepted | None = None,
        key_prefix: Buffer | str | None = None,
        headers: _HeaderFilter | None = None,
    ) -> AsyncIterator[list[tuple[int, memoryview]]]:
        """``async for batch in consumer.stream(...)``: each non-empty list :meth:`poll_async`
        returns, until the consumer or its log closes. A batch is what :meth:`commit` covers:
        commit after handling the whole batch."""
    @overload
    def stream(
        self,
        max_records: int | None = None,
        *,
        body: Literal["bytes"],
        key: _Accepted | None = None,
        key_prefix: Buffer | str | None = None,
        headers: _HeaderFilter | None = None,
    ) -> AsyncIterator[list[tuple[int, bytes]]]: ...
    def __aiter__(self) -> AsyncIterator[list[tuple[int, memoryview]]]:
        """``async for batch in consumer``: :meth:`stream` with its defaults."""
    def poll_batches(
        self,
        max_records: int | None = None,
        *,
        timeout: float | None = None,
        columns: Sequence[str] | None = None,
        body: Literal["view", "binary"] | None = None,
        max_bytes: int | None = None,
        with_deliveries: bool = False,
        key: _Accepted | None = None,
        key_prefix: Buffer | str | None = None,
        headers: _HeaderFilter | None = None,
    ) -> list[pa.RecordBatch]:
        """As :meth:`poll`, one Arrow batch in a list (``[]`` if none came); the options are
        :meth:`CommitLog.scan_batches`'. ``with_deliveries=True`` adds a ``deliveries`` column
        (uint32). ``key``, ``key_prefix``, ``headers``: as :meth:`poll`'s."""
    def _has_more_now(self) -> bool:
        """Whether the last poll stopped after stepping over as many records its filter refused
        as one poll may (262,144, or 64 MiB of them), with more there now (``rmqlog._aio``)."""
    @property
    def max_deliveries(self) -> int | None:
        """The name's ``max_deliveries``, as recorded with it as of this open's last poll or
        commit (None: no limit)."""
    def ack(self, offsets: Iterable[int], /) -> int:
        """Marks the records at ``offsets`` done, in any order (a shared name; records this open
        received). The committed position moves over the done records at its front; returns
        it. ``ClaimLostError`` for records another open took meanwhile, after the rest."""
    def nack(self, offsets: Iterable[int] | None = None, delay: float = 0.0) -> None:
        """Hands records back: those at ``offsets``, or all this open received and has not
        committed. A shared name's go to the next poll of any open (a waiting one wakes at
        once), not before ``delay`` seconds; an exclusive consumer's position moves back to the
        first of them."""
    def in_progress(self, offsets: Iterable[int] | None = None) -> None:
        """Extends this open's claims on the records at ``offsets`` (or all it holds) by its
        redelivery timeout from now. ``ClaimLostError`` for those another open took already."""
    def commit(self, offset: int | None = None) -> int:
        """Records durably that records are done; returns the name's committed position.
        Exclusive: every record below ``offset`` (default: the position). Shared: the records
        this open received below ``offset`` (default: all of them); ``ClaimLostError`` for
        those another open took meanwhile (their redelivery timeout passed), after the rest."""
    def seek(self, to: _Start, /) -> int:
        """Moves the position (exclusive consumers only); the next commit moves the committed
        one."""
    def close(self) -> None:
        """Lets the name go; the committed position stays in the store."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

@final
class SegmentBuffer:
    """Read-only buffer over one segment's map; memoryviews over it keep the map alive."""

    def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class CommitLog:
    """A segmented, memory-mapped commit log over one or more directories.

    ``paths`` is one directory, a str of several separated by ``os.pathsep`` (RIP-7's
    ``"/d0/store:/d1/store"``), or a sequence of paths. Each new segment goes to one directory.
    A store-wide option (``rmqlog.STORE_SETTINGS``) not given takes the store's recorded value
    (a writer alone that gives another value changes it, with a warning; docs/options.md). Any
    other option not given takes its value from ``rmqlog.DEFAULTS``, or with ``preset="broker"``
    from ``rmqlog.PRESETS["broker"]`` (RocketMQ broker's retention and 1 GiB segments), as does a
    store-wide one for a new store. ``wait_for_store_ms`` makes a read-only open of a store not
    made yet wait that long for a writer to make it. By
    default nothing is ever deleted: records are kept until ``truncate_before`` or until
    retention is configured (``retention_hours``, ``retention_bytes``, ``force_clean_ratio``).
    """

    def __new__(
        cls,
        paths: _StrPath | Sequence[_StrPath],
        *,
        preset: Literal["broker"] | None = ...,
        segment_size: int = ...,
        strategy: _Strategy | _StrategyFn = ...,
        read_only: bool = ...,
        wait_for_store_ms: int | None = ...,
        exclusive: bool = ...,
        flush: Literal["async", "sync", "none"] = ...,
        flush_interval_ms: int = ...,
        lock_timeout_ms: int = ...,
        max_message_size: int = ...,
        read_only_paths: _StrPath | Sequence[_StrPath] = ...,
        accept_lost: _StrPath | Sequence[_StrPath] = ...,
        max_used_ratio: float | Mapping[_StrPath, float] | None = ...,
        force_clean_ratio: float | Mapping[_StrPath, float] | None = ...,
        min_free_bytes: int = ...,
        warm_ahead: int = ...,
        on_dir_event: _DirEventFn | None = ...,
        retention_hours: float | None = ...,
        delete_hours: Sequence[int] | None = ...,
        retention_bytes: int | None = ...,
        retain_unconsumed: bool = ...,
        consumer_idle_hours: float | None = ...,
        max_deletes_per_pass: int = ...,
        clean_interval_ms: int = ...,
        file_mode: int = ...,
        record_format: Literal[1, 2] = ...,
        tier_url: str | None = ...,
        tier_options: Mapping[str, str] | None = ...,
        tier_after: float | None = ...,
        local_retention_hours: float | None = ...,
        local_retention_bytes: int | None = ...,
        tier_cache_bytes: int | None = ...,
        tier_cache_dir: _StrPath | None = ...,
        dedup_window_ms: int = ...,
        dedup_window_records: int | None = ...,
    ) -> Self: ...
    def append(
        self,
        body: Buffer,
        /,
        *,
        key: Buffer | str | None = None,
        headers: _Headers | None = None,
        msg_id: Buffer | str | None = None,
    ) -> int:
        """Appends one record; returns its physical offset.

        ``body`` is any bytes-like object: ``bytes`` is read in place; any other (bytearray,
        memoryview, array, NumPy, mmap) is copied from its buffer first, with the GIL held, so
        that a change to it while the append runs cannot make a record that fails its check.
        A body over ``max_message_size`` is refused before the copy; a buffer of Python
        objects (format ``O``) is refused.

        ``key`` (bytes-like, or a str as UTF-8; up to ``MAX_KEY_LEN`` bytes; ``b""`` is a key)
        and ``headers`` (a list of ``(str, bytes-like | str)`` pairs, names may repeat, or a
        dict) go into the record, under its CRC (docs/messages.md). Stores of record format 1
        refuse them (``CommitLogError``).

        ``msg_id`` (1 to ``MAX_ID_LEN`` bytes, or a str as UTF-8): when a record of the store's
        de-duplication window (``dedup_window_ms``, ``dedup_window_records``) has this id,
        nothing is written and that record's offset is returned, in every process of the store
        and after a restart (docs/messages.md).
        """
    @overload
    def append_batch(
        self,
        bodies: Iterable[Buffer],
        /,
        *,
        offsets: Literal[True] = True,
        keys: Sequence[Buffer | str | None] | None = None,
        headers: Sequence[_Headers | None] | None = None,
        msg_ids: None = None,
    ) -> list[int]:
        """Appends many records at once (all visible together, or none).

        ``bodies`` is an iterable of bytes-like objects (taken as ``append`` takes one; a single
        bytes-like object is refused: use ``append``), or an Arrow array of binary,
        large_binary, binary_view, fixed_size_binary or string types (any object with
        ``__arrow_c_array__``, or ``__arrow_c_stream__`` such as a ``pyarrow.ChunkedArray`` or a
        Polars Series), framed in Rust with the GIL released; a null element is refused before
        anything is written. Returns the offsets: a list of ints for an iterable, a pyarrow int64
        array for Arrow input, ``None`` with ``offsets=False``.

        ``keys`` and ``headers``: one item per body (``None`` for none), as ``append`` takes them.

        ``msg_ids``: one id per body (``None`` for none). Each record whose id is in the
        de-duplication window, or on an earlier record of the batch, is not written; the others
        are. Returns an ``Appended``: the offsets (a duplicate's is that of the record holding
        its id) and ``duplicates``, the positions not written. Not with Arrow input.

        An Arrow table, record batch or struct array is one record a row: its ``body`` field
        (any of the body types above, never null), and optionally its ``key`` field (a binary
        or string type; null: no key) and its ``headers`` field (a list or large_list of
        ``struct<name: string, value: binary or string>``; null or empty: none). Any other
        field, a null row, body or header, or a field of another type is refused with a
        ``ValueError`` naming it, before anything is written; ``keys=``/``headers=`` are refused
        with such input (``TypeError``): its fields carry them.
        """
    @overload
    def append_batch(
        self,
        bodies: Iterable[Buffer],
        /,
        *,
        offsets: Literal[True] = True,
        keys: Sequence[Buffer | str | None] | None = None,
        headers: Sequence[_Headers | None] | None = None,
        msg_ids: Sequence[Buffer | str | None],
    ) -> Appended: ...
    @overload
    def append_batch(
        self,
        bodies: _ArrowArrayLike,
        /,
        *,
        offsets: Literal[True] = True,
        keys: Sequence[Buffer | str | None] | None = None,
        headers: Sequence[_Headers | None] | None = None,
    ) -> pa.Array: ...
    @overload
    def append_batch(
        self,
        bodies: Iterable[Buffer] | _ArrowArrayLike,
        /,
        *,
        offsets: Literal[False],
        keys: Sequence[Buffer | str | None] | None = None,
        headers: Sequence[_Headers | None] | None = None,
        msg_ids: Sequence[Buffer | str | None] | None = None,
    ) -> None: ...
    def scan_batches(
        self,
        start: int | None = None,
        end: int | None = None,
        *,
        columns: Sequence[str] | None = None,
        body: Literal["view", "binary"] = "view",
        max_records: int = 65536,
        max_bytes: int = 67108864,
        follow: bool | None = False,
        timeout: float | None = None,
        durable: bool | None = False,
        threads: int | None = None,
        key: _Accepted | None = None,
        key_prefix: Buffer | str | None = None,
        headers: _HeaderFilter | None = None,
    ) -> BatchScan:
        """Records starting in ``[start, end)`` (up to ``max_offset`` now) as Arrow batches.

        ``follow=True``: on past ``max_offset`` as records are appended (by any process); each
        batch holds what is there (never empty) and the next one waits, until ``end``,
        ``close()``, or ``timeout`` seconds with no new record; ``durable``: flushed records only.

        ``columns``: any of ``"offset"`` (int64), ``"timestamp"`` (timestamp[ms, UTC]),
        ``"body"``, ``"segment"`` (int64, the start of the record's segment), ``"key"``
        (binary, null for a record without a key; an empty key is ``b""``), ``"headers"``
        (``list<struct<name: string, value: binary>>``, in order, an empty list for a record
        without headers), in the order given (default: offset, timestamp, body; keys and headers
        are copied into the batch, and read only when asked for). ``body="view"``: a binary_view
        column whose data buffers are the mapped segments (no copy; a batch keeps its maps alive
        past ``close()`` and past the deletion of the files); ``"binary"``: the bodies copied
        into one buffer per batch. A batch holds at most ``max_records`` records and
        ``max_bytes`` of bodies and encoded keys and headers (at least one record; they count
        whatever the columns, so a range gives the same batches for any ``columns``). Every
        record is checked (header and body CRC) as by :meth:`scan`.
        ``threads``: worker threads that check and build batches at once, handed out in order
        (default ``None``: one per core, at most 8; ``1``: one thread, one batch ahead); the
        batches are the same whatever the number. A following scan builds on the caller's
        thread. ``None`` for an option means its default. See docs/arrow.md.

        ``key``, ``key_prefix``, ``headers``: a filter, as :meth:`scan`'s: the batches hold only
        the records it accepts (every record is still checked).
        """
    @overload
    def read(self, offset: int, /, *, body: Literal["view"] = "view") -> memoryview:
        """The body of the record at ``offset``: a read-only memoryview over the map.

        ``body="bytes"``: a ``bytes`` copy instead, made in Rust (what ``json.loads``, dict keys
        and pickling want; one copy, and it pins no map). The same option, with the same
        values, on :meth:`read_record`, :meth:`scan` and :meth:`Consumer.poll`.
        """
    @overload
    def read(self, offset: int, /, *, body: Literal["bytes"]) -> bytes: ...
    @overload
    def read_record(self, offset: int, /, *, body: Literal["view"] = "view") -> Record[memoryview]:
        """The record at ``offset`` with its metadata (``body``: as :meth:`read`'s)."""
    @overload
    def read_record(self, offset: int, /, *, body: Literal["bytes"]) -> Record[bytes]: ...
    @overload
    def scan(
        self,
        start: int | None = None,
        end: int | None = None,
        *,
        follow: bool = False,
        timeout: float | None = None,
        durable: bool = False,
        body: Literal["view"] = "view",
        key: _Accepted | None = None,
        key_prefix: Buffer | str | None = None,
        headers: _HeaderFilter | None = None,
    ) -> ScanIterator[memoryview]:
        """``(offset, body)`` for records starting in ``[start, end)``, up to ``max_offset`` now.

        ``follow=True``: on past it, yielding records as they are appended (by any process),
        until ``end``, ``close()``, or ``timeout`` seconds with no new record; ``durable``:
        flushed records only. Waits release the GIL; Ctrl-C interrupts them. ``body``: as
        :meth:`read`'s (``"bytes"``: each body a ``bytes`` copy). ``async for`` iterates it too,
        its waits awaited in the event loop.

        A filter, evaluated in Rust (docs/producers-consumers.md, "Filters"): only the records it
        accepts are yielded; every condition given must hold. ``key``: the record's key is this
        (bytes-like, or a str as UTF-8) or, given a list, tuple, set or frozenset, one of these;
        ``key_prefix``: the key starts with this (with ``key`` too: both hold); ``headers``: a
        dict ``{name: value}`` (a value, or a collection of accepted values): some header of
        each name has an accepted value. A record without a key meets no key condition. The
        records it refuses are still read and checked: a damaged one raises
        ``CorruptionError`` as in a plain scan. A wrong type is a ``TypeError``, an empty
        collection (nothing would match) a ``ValueError``, before anything is read.
        """
    @overload
    def scan(
        self,
        start: int | None = None,
        end: int | None = None,
        *,
        follow: bool = False,
        timeout: float | None = None,
        durable: bool = False,
        body: Literal["bytes"],
        key: _Accepted | None = None,
        key_prefix: Buffer | str | None = None,
        headers: _HeaderFilter | None = None,
    ) -> ScanIterator[bytes]: ...
    def wait(self, offset: int, /, timeout: float | None = None, *, durable: bool = False) -> int:
        """Blocks until ``max_offset`` (``durable``: ``flushed_offset``) passes ``offset``, or
        ``timeout`` seconds pass; returns that end (past ``offset`` unless timed out).

        Whichever process appended; a follower takes the new records in as it wakes. Costs no
        CPU while waiting; releases the GIL; Ctrl-C interrupts; ``ClosedError`` if the log is
        closed meanwhile. See docs/producers-consumers.md.
        """
    def wait_async(
        self, offset: int, /, timeout: float | None = None, *, durable: bool = False
    ) -> Coroutine[Any, Any, int]:
        """:meth:`wait` awaited: the event loop runs meanwhile. One thread per log sleeps on the
        store's futex for every waiting coroutine, of any event loop, and wakes their loops
        through an eventfd; cancelling the task ends the wait at once, and ``close()`` ends it
        with ``ClosedError``. See docs/producers-consumers.md, "asyncio"."""
    def _aio_subscribe(self, fd: int, /) -> None:
        """Signals the eventfd ``fd`` at each change of the store from now on (``rmqlog._aio``)."""
    def _aio_unsubscribe(self, fd: int, /) -> None:
        """Stops signalling ``fd``."""
    def consumer(
        self,
        name: str,
        /,
        *,
        start: _Start | None = None,
        on_loss: Literal["raise", "skip"] | None = None,
        exclusive: bool = False,
        redelivery_timeout: float | None = None,
        max_deliveries: int | None = None,
        dead_letter: _StrPath | Sequence[_StrPath] | None = None,
        key: _Accepted | None = None,
        key_prefix: Buffer | str | None = None,
        headers: _HeaderFilter | None = None,
    ) -> Consumer:
        """The named consumer ``name``: at its committed position if the store knows the name,
        otherwise created (durably) at ``start`` (default ``"earliest"``).

        ``exclusive=True`` holds the name alone (``ConsumerBusyError`` while any other open has
        it); otherwise the opens of the name, in any process, share its records: each poll
        claims the next ones, and claims not committed within ``redelivery_timeout`` seconds
        (default 30, the claiming open's), or whose open closed or died, are delivered again.
        ``on_loss``: what a poll does when records it had not read were deleted (``"raise"``:
        ``DataLossError``; ``"skip"``: a warning, then on from ``min_offset``).
        ``max_deliveries`` (shared names; recorded with the name, 0 turns it off): a record
        delivered that often without a commit is appended, with its origin, to the store at
        ``dead_letter`` (opened as a shared writer; read it with ``rmqlog.dead_letter_origin``),
        or skipped with a warning without one. See docs/producers-consumers.md, "Work queues".

        ``key``, ``key_prefix``, ``headers``: a filter, as :meth:`scan`'s: this open's polls
        deliver only the records it accepts, and move over the others (an exclusive consumer's
        position passes them, the committed one at the next commit; a shared open commits a
        poll's worth of refused records alone at once). ``lag`` then says whether it counts
        exactly. The filter is this open's, not recorded with the name: give every open of a
        shared name the same one. See docs/producers-consumers.md, "Filters".
        """
    def consumers(self) -> list[dict[str, object]]:
        """Every consumer name the store keeps, by name: ``name``, ``position`` (committed),
        ``lag_bytes``, ``lag_records`` (records between the position and the end, from the
        segments' counts), ``committed_ms``, ``created_ms``, ``open`` (an open holds it now, in
        any process), ``holds_retention``; ``members`` (the pids of the opens holding it),
        ``pending`` (records delivered and not committed), ``waiting`` (handed back or lapsed,
        for the next poll), ``redelivered`` (of those two, delivered more than once),
        ``dead_lettered`` and ``max_deliveries``."""
    def drop_consumer(self, name: str, /) -> None:
        """Forgets consumer ``name`` (its position is gone); ``ConsumerBusyError`` while it is
        open anywhere."""
    def __iter__(self) -> ScanIterator[memoryview]: ...
    def lookup(
        self,
        key: Buffer | str,
        /,
        *,
        start: int | datetime.datetime | None = None,
        end: int | datetime.datetime | None = None,
    ) -> list[int]:
        """The offsets of the records whose key is ``key``, in append order; ``start``/``end``:
        only those stored in ``[start, end)`` (milliseconds since the epoch, or datetimes).

        Reads the segments' key indexes and each candidate record (its key is compared, so a
        hash collision never returns another key's record), not the other records' bodies;
        records not indexed yet are found by walking their headers (docs/messages.md)."""
    def offset_for_timestamp(self, ts_ms: int, /) -> int:
        """Offset of the first record with ``timestamp_ms >= ts_ms``, else ``max_offset``.
        Record headers are walked without their CRCs (timestamps never decrease in a log); the
        records that decide the answer are checked whole (``CorruptionError`` if damaged)."""
    def __len__(self) -> int:
        """How many records the log holds (``min_offset`` to ``max_offset``; in a store whose
        writers sync each append, to the durable end, as ``scan()`` reads), without scanning
        it: each segment keeps its count. What an open does not know yet is walked once (headers
        only): records other shared writers appended since it last counted, segments of a store
        written by an older rmqlog (docs/format.md, ``rmqlog.counts``)."""
    def __bool__(self) -> bool:
        """Always True, whatever the log holds (``if log:`` does not count records)."""
    def records_between(self, start: int | None = None, end: int | None = None) -> int:
        """How many records have offsets in ``[start, end)`` (defaults: the whole log), clamped
        to the log's range. Costs at most a walk of the headers of part of the segment holding
        ``start`` and of the one holding ``end``."""
    @property
    def min_offset(self) -> int:
        """First offset of the log."""
    @property
    def max_offset(self) -> int:
        """End of the last record: where the next append goes (or the next segment's start)."""
    @property
    def flushed_offset(self) -> int:
        """Every byte below this offset is durable."""
    @property
    def record_format(self) -> int:
        """The record format this store writes (1 or 2), fixed when it was created: a new store
        takes the ``record_format`` option (default 2); an existing store keeps its own."""
    @property
    def read_only(self) -> bool:
        """Whether the log was opened read-only."""
    @property
    def closed(self) -> bool:
        """Whether the log is closed."""
    @property
    def paths(self) -> list[str]:
        """Every directory of the store."""
    def _record_start_at_or_after(self, offset: int, /) -> int:
        """The first record boundary at or after ``offset``, or ``max_offset`` (headers only)."""
    @property
    def _fallback_lookups(self) -> int:
        """Lookups that missed the O(1) segment guess and searched (diagnostics)."""
    def flush(self) -> int:
        """Syncs everything appended so far; returns ``flushed_offset``."""
    def verify(
        self,
        progress: Callable[[int, int], object] | None = None,
        *,
        remote: bool | None = None,
    ) -> list[tuple[int, int, str]]:
        """Checks every record (headers, stored offsets, body CRCs) without changing anything.
        Returns ``(start_offset, end_offset, reason)`` per damaged range; ``[]`` when clean.
        ``remote=True`` also reads back every object of the remote tier against its manifest
        (length, CRC32C) and walks the remote-only segments; the default is True only for a log
        opened by its tier URL."""
    def verify_counted(
        self,
        progress: Callable[[int, int], object] | None = None,
        *,
        remote: bool | None = None,
    ) -> tuple[int, list[tuple[int, int, str]]]:
        """:meth:`verify`, and how many valid records it walked: ``(records, damaged)``. A
        segment whose record count the log knows (``len()``'s) and whose walk finds another
        number is a damaged range too."""
    def move_segment(self, start_offset: int, dest_path: _StrPath, /) -> None:
        """Moves a sealed segment to another writable directory of the store, online. Records
        read earlier stay valid; the active segment is refused (``CommitLogError``)."""
    def rebalance(self, max_bytes: int | None = None) -> list[tuple[int, str, str]]:
        """Moves sealed segments from the most to the least used directory while that narrows
        the gap between their used ratios, at most ``max_bytes`` per call; returns the moves."""
    def holes(self) -> list[tuple[int, int, str]]:
        """Offsets lost with a directory named in ``accept_lost``: ``(start, end, directory)``."""
    def dirs(self) -> list[DirInfo]:
        """Every directory, in configuration order (paths, then read_only_paths)."""
    def stats(self) -> dict[str, object]:
        """Counters: appends, segments created and deleted, cleaner passes and last error, ...;
        ``consumers`` (each name's committed ``position``, ``lag_bytes`` and ``lag_records``),
        ``head_held_by``
        and ``head_held_at`` (the consumer holding the log's head from retention, if one does)."""
    def tier_status(self) -> dict[str, int | str | None] | None:
        """The remote tier's state (``None`` without a tier): what is local, remote, both and
        pending, the manifest version, the last error, and the counters since open."""
    def recorded_settings(self) -> dict[str, object] | None:
        """The settings the store's writer recorded in its metadata (this log's own, for a
        writer); None when the store records none (written by rmqlog 0.1, no writer since)."""
    def clean(self, force: bool = False) -> int:
        """Runs one cleaning pass now; returns the number of segments deleted. ``force=True``
        ignores ``delete_hours``. With no retention configured (the default) it deletes
        nothing: 0."""
    def truncate_before(self, offset: int, /) -> int:
        """Deletes the sealed segments that end at or before ``offset``; returns ``min_offset``."""
    def segments(self) -> list[Segment]:
        """The segments in offset order."""
    def refresh(self) -> int:
        """Read-only logs: picks up what a writer appended since; returns ``max_offset``."""
    def close(self) -> None:
        """Flushes, stops the background thread, releases the lock. A second call does nothing."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...
