"""The streaming reader of a fleet (``spark.readStream`` of a prefix, a glob or a list of tier
URLs): one position per store, the stores found anew at each trigger."""

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from rmqlog import CommitLog, StoreNotFoundError
from rmqlog.spark.batch import RangePartition, _byte_ranges, _open, read_range
from rmqlog.spark.errors import _data_loss, store_gone
from rmqlog.spark.options import Options
from rmqlog.spark.schema import Projection
from rmqlog.spark.stream import SupportsTriggerAvailableNow, first_position

Positions = dict[str, int]  # store URL -> offset


def _positions(value: Any, what: str) -> Positions:
    stores = value.get("stores") if isinstance(value, dict) else None
    if isinstance(stores, dict) and all(isinstance(v, int) for v in stores.values()):
        return dict(stores)
    raise ValueError(f'rmqlog: bad {what} offset {value!r}: expected {{"stores": {{url: <int>}}}}')


class FleetStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader of a fleet. Offsets are ``{"stores": {url: offset}}``, each store's
    position as a one-store stream keeps it. Each trigger lists the prefix again and reads each
    store's manifest again: a store that starts publishing joins the stream and is read from its
    head; the options ``start_offset`` and ``start_timestamp`` place the stores found when the
    query starts. A micro-batch reads, per store, the records starting in ``[start, end)``.
    """

    def __init__(self, opts: Options, proj: Projection) -> None:
        self.opts = opts
        self.proj = proj
        self._logs: dict[str, CommitLog] = {}
        self._target: Positions | None = None  # Trigger.AvailableNow

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_logs"] = {}  # the reader is pickled to executors: never ship an open log
        return state

    def _stores(self) -> tuple[str, ...]:
        return self.opts.store.fleet(self._gone) or ()

    def _gone(self, url: str, e: StoreNotFoundError) -> None:
        store_gone(self.opts, url, e)

    def _log(self, url: str, refresh: bool = True) -> CommitLog:
        log = self._logs.get(url)
        if log is None:
            log = self._logs[url] = _open(self.opts.store.at(url))
        elif refresh:
            log.refresh()  # the store's current manifest: the segments uploaded since
        return log

    def _live(self, listed: tuple[str, ...] | None = None) -> Iterator[tuple[str, CommitLog]]:
        """The stores ``listed`` (by default, listed now), each with its log (refreshed). A store
        of an explicit list whose manifest is gone follows ``fail_on_data_loss``, as a store
        that left a prefix's listing does."""
        for url in self._stores() if listed is None else listed:
            try:
                yield url, self._log(url)
            except StoreNotFoundError as e:
                self._gone(url, e)

    def initialOffset(self) -> dict:
        return {"stores": {u: first_position(log, self.opts) for u, log in self._live()}}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        known = _positions(start, "start") if start is not None else {}
        ends: Positions = {}
        listed = self._stores()
        for url in sorted(set(known) - set(listed)):  # gone from the prefix: it leaves the offsets
            store_gone(self.opts, url)
        for url, log in sorted(self._live(listed)):
            end = log.max_offset
            if self._target is not None:
                end = min(end, self._target.get(url, known.get(url, log.min_offset)))
            ends[url] = max(end, known.get(url, 0))
        return {"stores": ends}

    def reportLatestOffset(self) -> dict | None:
        return {"stores": {u: log.max_offset for u, log in self._live()}}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {u: log.max_offset for u, log in self._live()}

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        known, ends = _positions(start, "start"), _positions(end, "end")
        parts: list[RangePartition] = []
        for url, hi in sorted(ends.items()):
            log = self._log(url, refresh=False)
            if log.max_offset < hi:
                log.refresh()
            lo = known.get(url, log.min_offset)  # a store that joined: from its head
            if lo >= hi:
                continue
            if lo < log.min_offset:
                _data_loss(
                    self.opts,
                    f"the micro-batch starts at {lo} in {url}, below its min_offset="
                    f"{log.min_offset} ({log.min_offset - lo} bytes deleted before the query "
                    "reached them)",
                )
                lo = min(log.min_offset, hi)
            parts += _byte_ranges(log, ((lo, hi),), self.opts.max_partition_bytes, url, len(parts))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.opts, partition, self.proj)

    def commit(self, end: dict) -> None:
        """Nothing to do: the stores are not consumed."""

    def stop(self) -> None:
        for log in self._logs.values():
            log.close()
        self._logs.clear()
