"""Planning a read as byte-range partitions of the log, and reading one as Arrow record batches.

Also the batch reader (``spark.read``); the streaming reader plans and reads with the same pieces.
A fleet's read plans each store's partitions in turn, each partition naming its store.
"""

import itertools
import sys
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from rmqlog import SPLIT_EVERY, CommitLog, OffsetOutOfRangeError, Segment, StoreNotFoundError
from rmqlog.spark.errors import _data_loss, store_gone
from rmqlog.spark.options import Options
from rmqlog.spark.pushdown import Interval, Pushed, intersect, push
from rmqlog.spark.schema import _ARROW_HEADERS, _TIMESTAMP, FULL, STORE, Projection
from rmqlog.spark.store import Store

if sys.byteorder != "little":  # pragma: no cover
    raise ImportError("rmqlog.spark: the columnar batches are little-endian; this host is not")


class RangePartition(InputPartition):
    """The records that start in the byte ranges ``spans`` of one segment (by default the one
    range ``[lo, hi)``; the records a key lookup found: of several, ``_packed``): one Spark
    task. ``lo`` and ``hi`` bound every span. ``store``: the tier URL of the store it reads, in
    a fleet (None: the read's one store)."""

    def __init__(
        self,
        index: int,
        lo: int,
        hi: int,
        spans: Sequence[Interval] | None = None,
        store: str | None = None,
    ) -> None:
        self.spans: tuple[Interval, ...] = tuple(spans) if spans else ((lo, hi),)
        super().__init__(self.spans if store is None else (store, self.spans))
        self.index = index
        self.lo = lo
        self.hi = hi
        self.store = store

    def __repr__(self) -> str:
        spans = "" if self.spans == ((self.lo, self.hi),) else f", spans={list(self.spans)}"
        store = "" if self.store is None else f", store={self.store!r}"
        return f"RangePartition(index={self.index}, lo={self.lo}, hi={self.hi}{spans}{store})"


def _open(store: Store) -> CommitLog:
    return store.open()


def _byte_ranges(
    log: CommitLog,
    ranges: Sequence[Interval],
    max_partition_bytes: int | None,
    store: str | None = None,
    first_index: int = 0,
) -> list[RangePartition]:
    """Partitions over ``ranges`` (sorted, disjoint): per segment, the parts of the ranges in it,
    grouped into partitions of at most ``max_partition_bytes`` bytes (without the option, one
    partition per segment). A local segment's longer part is split anywhere. A segment only in
    the remote tier is split at its ``splits`` (record starts its manifest lists), so that each
    task fetches only its part of the object with one range read; a part between two splits is
    not split further, and a split weighs as its place on the ``SPLIT_EVERY`` grid (the first
    record at or after it), so that a 128 MiB limit groups 4 pieces. A record belongs to the
    partition its offset falls in. The partitions name ``store`` and count from
    ``first_index``."""
    parts: list[RangePartition] = []

    def add(spans: list[Interval]) -> None:
        if spans:
            index = first_index + len(parts)
            parts.append(RangePartition(index, spans[0][0], spans[-1][1], spans, store))

    limit = max_partition_bytes
    for seg in log.segments():
        spans: list[Interval] = []
        size = 0
        for a, b in intersect(ranges, ((seg.start_offset, seg.start_offset + seg.size),)):
            for x, y, weight in _pieces(seg, a, b, limit):
                if limit and spans and size + weight > limit:
                    add(spans)
                    spans, size = [], 0
                if spans and spans[-1][1] == x:
                    spans[-1] = (spans[-1][0], y)  # one scan, one range read
                else:
                    spans.append((x, y))
                size += weight
        add(spans)
    return parts


# The records a key lookup found (one-byte spans) are read this many to a task, whatever their
# segments: ten matches in ten segments are one task, not ten (each task opens the log).
KEY_SPANS = 1024


def _packed(parts: list[RangePartition], first_index: int) -> list[RangePartition]:
    """``parts``' spans, in offset order, regrouped KEY_SPANS to a partition."""
    spans = [s for p in parts for s in p.spans]
    store = parts[0].store if parts else None
    out: list[RangePartition] = []
    for i in range(0, len(spans), KEY_SPANS):
        chunk = spans[i : i + KEY_SPANS]
        out.append(RangePartition(first_index + len(out), chunk[0][0], chunk[-1][1], chunk, store))
    return out


def _pieces(seg: Segment, a: int, b: int, limit: int | None) -> list[tuple[int, int, int]]:
    """``[a, b)`` of ``seg`` cut where a partition may end, each piece with its weight against
    the limit: every ``limit`` bytes of a local segment, or at the splits of a remote-only one
    (a split weighs as its place on the grid)."""
    if seg.local:
        step = limit or (b - a)
        return [(x, min(x + step, b), min(x + step, b) - x) for x in range(a, b, step)]
    splits = set(seg.splits)

    def place(v: int) -> int:
        return v - (v - seg.start_offset) % SPLIT_EVERY if v in splits else v

    cuts = [a, *(s for s in seg.splits if a < s < b), b]
    # (A piece from inside a split's record to that split lies before its place: it weighs 0.)
    return [(x, y, max(0, place(y) - place(x))) for x, y in itertools.pairwise(cuts)]


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


def _spark_batch(proj: Projection, batch: pa.RecordBatch, store: str | None) -> pa.RecordBatch:
    """A batch of ``scan_batches`` as Spark takes it: microsecond timestamps (one vectorized
    cast of the millisecond column), headers typed as Spark spells them, a fleet's ``store``
    column, and the query's names for the columns."""

    def column(name: str) -> pa.Array:
        if name == STORE:
            return pa.repeat(pa.scalar(store, pa.string()), batch.num_rows)
        col = batch.column(name)
        if name == "timestamp":
            return col.cast(_TIMESTAMP)
        if name == "headers":  # Spark's names for the list's item (buffers kept, no copy)
            return col.cast(_ARROW_HEADERS)
        return col

    return pa.RecordBatch.from_arrays([column(n) for n in proj.columns], schema=proj.arrow)


def _start_at(log: CommitLog, opts: Options, pos: int, hi: int) -> int | None:
    """The first record boundary at or after ``pos``; where retention deleted records from
    ``pos`` on (before this task read them), the data-loss policy applies and the read resumes at
    the head (None: nothing of ``[pos, hi)`` is left)."""
    while True:
        min_off = log.min_offset
        if pos < min_off:
            _data_loss(opts, f"offsets [{pos}, {min(hi, min_off)}) are below min_offset={min_off}")
            if hi <= min_off:
                return None
            pos = min_off
        try:
            return log._record_start_at_or_after(pos)
        except OffsetOutOfRangeError:
            if log.min_offset <= pos:
                raise  # out of range for another reason than retention


def _read_span(
    log: CommitLog, opts: Options, proj: Projection, lo: int, hi: int, store: str | None = None
) -> Iterator[pa.RecordBatch]:
    """The records that start in ``[lo, hi)``, as batches of the query's columns built in Rust
    (only those columns: without ``body``, no body is read; without ``key`` and ``headers``, no
    record's properties)."""
    pos = _start_at(log, opts, lo, hi)
    while pos is not None and pos < hi:
        scan = None
        try:
            scan = log.scan_batches(
                pos,
                hi,
                columns=proj.own or ("offset",),  # a query of the store column alone counts rows
                body="binary",  # Spark's Arrow ingestion takes plain binary, not binary_view
                max_records=opts.batch_records,
                max_bytes=opts.batch_bytes,
            )
            for batch in scan:
                yield _spark_batch(proj, batch, store)
        except OffsetOutOfRangeError:
            pos = pos if scan is None else scan.position
            if log.min_offset <= pos:
                raise
            pos = _start_at(log, opts, pos, hi)  # deleted by retention since it was planned
            continue
        pos = scan.position
        break
    if pos is not None and pos < hi and log.max_offset < hi:
        raise RuntimeError(
            f"rmqlog: the log ends at {log.max_offset}, before the end of this partition "
            f"({hi}) that the planner saw: was the tail cut by a writer's recovery?"
        )


def read_range(
    opts: Options, part: InputPartition, proj: Projection = FULL
) -> Iterator[pa.RecordBatch]:
    """Reads one partition: opens the log read-only, yields Arrow batches of ``proj``'s columns,
    closes the log. Records deleted by retention before this task read them (planned when they
    were there) follow ``fail_on_data_loss``."""
    if not isinstance(part, RangePartition):  # Spark's placeholder for an empty plan
        return
    if part.store is None:
        log = _open(opts.store)
    else:
        try:
            log = _open(opts.store.at(part.store))
        except StoreNotFoundError as e:
            store_gone(opts, part.store, e)
            return
    try:
        for lo, hi in part.spans:
            yield from _read_span(log, opts, proj, lo, hi, part.store)
    finally:
        log.close()


class RmqlogReader(DataSourceReader):
    """Batch reader: holds only the options, the query's columns and the filters it took;
    partitions are planned from the segment list."""

    def __init__(
        self, opts: Options, proj: Projection = FULL, fleet: tuple[str, ...] | None = None
    ) -> None:
        self.opts = opts
        self.proj = proj
        self.fleet = fleet  # the stores' tier URLs, when the read names a fleet
        self.pushed = Pushed()

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        """Takes the comparisons, ranges and ``IN`` lists on ``offset`` and ``timestamp`` (and
        ``IS [NOT] NULL``); returns the other filters, which Spark evaluates."""
        return push(self.pushed, filters)

    def partitions(self) -> list[RangePartition]:
        if self.fleet is None:
            return self._plan(self.opts.store, None, 0)
        parts: list[RangePartition] = []
        for url in self.pushed.of_stores(self.fleet):
            try:
                parts += self._plan(self.opts.store.at(url), url, len(parts))
            except StoreNotFoundError as e:  # found in load(), deleted since
                store_gone(self.opts, url, e)
        return parts

    def _plan(self, store: Store, url: str | None, first_index: int) -> list[RangePartition]:
        """One store's partitions (``url``: its tier URL in a fleet)."""
        log = _open(store)
        try:
            lo, hi = _resolve_range(log, self.opts)
            ranges = self.pushed.ranges(log, lo, hi)
            parts = _byte_ranges(log, ranges, self.opts.max_partition_bytes, url, first_index)
            return _packed(parts, first_index) if self.pushed.keys is not None else parts
        finally:
            log.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.opts, partition, self.proj)


class NoPushdownReader(RmqlogReader):
    """The batch reader without ``pushFilters``: what Spark gets where its switch for filters
    reaching Python sources (``spark.sql.python.filterPushdown.enabled``) is off, since Spark
    refuses a reader that defines ``pushFilters`` there."""

    pushFilters = DataSourceReader.pushFilters  # type: ignore[assignment]
