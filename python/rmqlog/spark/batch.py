"""Planning a read as byte-range partitions of the log, and reading one as Arrow record batches.

Also the batch reader (``spark.read``); the streaming reader plans and reads with the same pieces.
"""

import sys
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from rmqlog import CommitLog, OffsetOutOfRangeError
from rmqlog.spark.errors import _data_loss
from rmqlog.spark.options import Options
from rmqlog.spark.schema import _TIMESTAMP, ARROW_SCHEMA

if sys.byteorder != "little":  # pragma: no cover
    raise ImportError("rmqlog.spark: the columnar batches are little-endian; this host is not")


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


def read_range(opts: Options, part: InputPartition) -> Iterator[pa.RecordBatch]:
    """Reads one partition: opens the log read-only, yields Arrow batches, closes the log.
    Records deleted by retention before this task read them (planned when they were there)
    follow ``fail_on_data_loss``."""
    if not isinstance(part, RangePartition):  # Spark's placeholder for an empty plan
        return
    log = _open(opts.paths)
    try:
        hi = part.hi
        pos = _start_at(log, opts, part.lo, hi)
        while pos is not None and pos < hi:
            try:
                nxt, n, offs, ts, segs, value_offsets, data = log._read_batch(
                    pos, hi, opts.batch_records, opts.batch_bytes
                )
            except OffsetOutOfRangeError:
                if log.min_offset <= pos:
                    raise
                pos = _start_at(log, opts, pos, hi)
                continue
            if n:
                yield _record_batch(n, offs, ts, segs, value_offsets, data)
            if nxt <= pos:
                break
            pos = nxt
        if pos is not None and pos < hi and log.max_offset < hi:
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
