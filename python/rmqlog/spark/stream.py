"""The streaming reader (``spark.readStream``): offsets, read limits and micro-batch planning."""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from rmqlog import CommitLog
from rmqlog.spark.batch import RangePartition, _byte_ranges, _open, read_range
from rmqlog.spark.errors import _data_loss
from rmqlog.spark.options import Options
from rmqlog.spark.schema import FULL, Projection

try:  # PySpark >= 4.2: admission control (read limits) and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxBytes,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - PySpark 4.1: no read limits

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


def first_position(log: CommitLog, opts: Options) -> int:
    """Where a stream starts in ``log``: ``start_offset`` (its head by default, ``latest``: its
    end, an offset: the first record at or after it) and ``start_timestamp``."""
    so = opts.start_offset
    if so == "latest":
        start = log.max_offset
    elif isinstance(so, int):
        if so < log.min_offset:
            _data_loss(opts, f"start_offset={so} is below min_offset={log.min_offset}")
        start = log._record_start_at_or_after(max(so, log.min_offset))
    else:
        start = log.min_offset
    if opts.start_timestamp is not None:
        start = max(start, log.offset_for_timestamp(opts.start_timestamp))
    return start


def _offset(value: Any, what: str) -> int:
    if isinstance(value, dict) and isinstance(value.get("offset"), int):
        return value["offset"]
    raise ValueError(f'rmqlog: bad {what} offset {value!r}: expected {{"offset": <int>}}')


class RmqlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. Offsets are ``{"offset": <physical offset>}``: a record boundary (or
    the end of a segment's records); a micro-batch reads the records that start in
    ``[start, end)``. The driver side follows the writer with a read-only log that catches up
    through the store's control page (a listing only when the segments changed); a trigger that
    finds no new record waits up to ``wait_ms`` for one, woken by the append.
    """

    def __init__(self, opts: Options, proj: Projection = FULL) -> None:
        self.opts = opts
        self.proj = proj
        self._log: CommitLog | None = None
        self._target: int | None = None  # Trigger.AvailableNow

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_log"] = None  # the reader is pickled to executors: never ship an open log
        return state

    def _follower(self, refresh: bool = True) -> CommitLog:
        if self._log is None:
            self._log = _open(self.opts.store)
        elif refresh:
            self._log.wait(self._log.max_offset, timeout=0)  # catches up, waits not
        return self._log

    def initialOffset(self) -> dict:
        return {"offset": first_position(self._follower(), self.opts)}

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
        if pos >= end and self._target is None and self.opts.wait_ms > 0:
            # Nothing new: wait a little for the next append instead of Spark polling again.
            end = log.wait(pos, timeout=self.opts.wait_ms / 1000)
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
        """Where the ``count`` records starting at ``pos`` end (at most ``end``): the offset
        column only, no body read."""
        while count > 0 and pos < end:
            scan = log.scan_batches(pos, end, columns=("offset",), max_records=count)
            batch = next(scan, None)
            if batch is None or scan.position <= pos:
                break
            count -= batch.num_rows
            pos = scan.position
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
        return _byte_ranges(log, ((lo, hi),), self.opts.max_partition_bytes)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.opts, partition, self.proj)

    def commit(self, end: dict) -> None:
        """Nothing to do: the log is not consumed, retention is the writer's business."""

    def stop(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
