"""Spark filters on ``offset`` and ``timestamp``, turned into the parts of the log they select.

A pushed filter is taken only when the records it selects are exactly the records that start in
the byte ranges it is turned into: the filter is then never evaluated again by Spark. Offsets are
record starts, so ``offset > x`` is the records starting at or after byte ``x + 1`` (a read
starts at the first record boundary at or after a range's start). Timestamps are non-decreasing
within a log (docs/format.md: each is ``max(previous, now)``), so the records stored in
``[t0, t1)`` are those starting in ``[offset_for_timestamp(t0), offset_for_timestamp(t1))``, the
same rule the ``start_timestamp``/``end_timestamp`` options rely on.

In a fleet, filters on ``store`` (equality, ``IN``) choose the stores planned; the offset and
timestamp filters then apply to each store's log.

Filters on ``key`` (equality, ``IN``) are looked up in the segments' key indexes
(``CommitLog.lookup``, docs/messages.md): each record found is the one-byte range at its offset,
so only the segments holding those records are planned and only those records are read.
"""

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
)

from rmqlog import CommitLog

Interval = tuple[int, int]  # [lo, hi)
TOP = 1 << 64  # above every offset and every millisecond timestamp
_ALL: tuple[Interval, ...] = ((0, TOP),)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_US = datetime.timedelta(microseconds=1)
_COLUMNS = ("offset", "timestamp", "body", "segment", "store", "key")


def intersect(a: Sequence[Interval], b: Sequence[Interval]) -> tuple[Interval, ...]:
    """The intersection of two sorted lists of disjoint intervals."""
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def union(items: Iterable[Interval]) -> tuple[Interval, ...]:
    """Sorted, disjoint, merged (touching intervals join)."""
    out: list[Interval] = []
    for lo, hi in sorted(i for i in items if i[0] < i[1]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def _micros(value: Any) -> int | None:
    """A filter's timestamp literal in microseconds since the epoch. Spark hands an aware
    datetime in UTC; a naive one (no zone: which instant it means is unknown) is not pushed."""
    if isinstance(value, datetime.datetime) and value.tzinfo is not None:
        return (value - _EPOCH) // _US
    return None


def _key(column: str, value: Any) -> int | None:
    """A literal compared with ``column``, in the unit the column's values are kept in Spark."""
    if column == "timestamp":
        return _micros(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def _selected(f: Filter, column: str, unit: int) -> tuple[Interval, ...] | None:
    """The stored values (offsets, or milliseconds for ``unit=1000`` microseconds) that ``f``
    keeps, as intervals; None when ``f`` is not a comparison with a literal this can read."""
    values = f.value if isinstance(f, In) else (f.value,)  # type: ignore[attr-defined]
    keys = [_key(column, v) for v in values if v is not None]
    if not keys or None in keys:
        return None
    k = [x for x in keys if x is not None]
    if isinstance(f, In | EqualTo | EqualNullSafe):
        return union((x // unit, x // unit + 1) for x in k if x % unit == 0)
    (x,) = k
    below, above = -(-x // unit), x // unit + 1  # first unit value >= x, first one > x
    bounds: dict[type, Interval] = {
        GreaterThan: (above, TOP),
        GreaterThanOrEqual: (below, TOP),
        LessThan: (0, below),
        LessThanOrEqual: (0, above),
    }
    if type(f) not in bounds:
        return None
    lo, hi = bounds[type(f)]
    return union([(max(lo, 0), min(hi, TOP))])


@dataclass
class Pushed:
    """The filters a reader took: records whose offset is in ``offsets`` and whose millisecond
    timestamp is in ``times`` (sorted, disjoint intervals)."""

    offsets: tuple[Interval, ...] = _ALL
    times: tuple[Interval, ...] = _ALL
    stores: frozenset[str] | None = None  # None: every store of the fleet
    keys: frozenset[bytes] | None = None  # None: any key (or none)
    taken: list[Filter] = field(default_factory=list)

    def take(self, f: Filter) -> bool:
        """Narrows to ``f`` and returns True when ``f`` can be applied exactly, else False."""
        attr: tuple[str, ...] = getattr(f, "attribute", ())
        column = attr[0].lower() if len(attr) == 1 else None
        if column not in _COLUMNS:
            return False
        if column == "key" and isinstance(f, IsNull | IsNotNull):
            return False  # the one nullable column (a record without a key): Spark decides
        if isinstance(f, IsNotNull):  # no other column of this source is ever null
            sel: tuple[Interval, ...] | None = _ALL
            column = "offset"
        elif isinstance(f, IsNull):
            sel, column = (), "offset"
        elif column == "store":
            return self._take_stores(f)
        elif column == "key":
            return self._take_keys(f)
        elif column == "offset":
            sel = _selected(f, column, 1)
        elif column == "timestamp":
            sel = _selected(f, column, 1000)
        else:
            return False
        if sel is None:
            return False
        if column == "offset":
            self.offsets = intersect(self.offsets, sel)
        else:
            self.times = intersect(self.times, sel)
        self.taken.append(f)
        return True

    def _take_stores(self, f: Filter) -> bool:
        """``store = 'url'``, ``store <=> 'url'``, ``store IN (...)``: the stores to plan."""
        if not isinstance(f, EqualTo | EqualNullSafe | In):
            return False
        values = f.value if isinstance(f, In) else (f.value,)
        if not all(isinstance(v, str) or v is None for v in values):
            return False
        chosen = frozenset(v for v in values if v is not None)
        self.stores = chosen if self.stores is None else self.stores & chosen
        self.taken.append(f)
        return True

    def _take_keys(self, f: Filter) -> bool:
        """``key = x``, ``key <=> x``, ``key IN (...)``: the records the key indexes name. A null
        literal matches nothing (``key <=> NULL``, the records without a key, is not taken)."""
        if not isinstance(f, EqualTo | EqualNullSafe | In):
            return False
        values = f.value if isinstance(f, In) else (f.value,)
        if isinstance(f, EqualNullSafe) and f.value is None:
            return False
        if not all(isinstance(v, bytes | bytearray | str) or v is None for v in values):
            return False
        chosen = frozenset(
            v.encode() if isinstance(v, str) else bytes(v) for v in values if v is not None
        )
        self.keys = chosen if self.keys is None else self.keys & chosen
        self.taken.append(f)
        return True

    def of_stores(self, fleet: Sequence[str]) -> list[str]:
        """The stores of ``fleet`` the filters on ``store`` keep, in its order."""
        return [u for u in fleet if self.stores is None or u in self.stores]

    def ranges(self, log: CommitLog, lo: int, hi: int) -> tuple[Interval, ...]:
        """The byte ranges of ``[lo, hi)`` whose records pass every filter taken."""
        out = intersect(((lo, hi),), self.offsets)
        if out and self.times != _ALL:
            cut = {0: log.min_offset, TOP: log.max_offset}

            def at(ms: int) -> int:
                return cut[ms] if ms in cut else log.offset_for_timestamp(ms)

            out = intersect(out, union((at(a), at(b)) for a, b in self.times))
        if out and self.keys is not None:
            found = (o for k in self.keys for o in log.lookup(k))
            out = intersect(out, union((o, o + 1) for o in found))
        return out


def push(pushed: Pushed, filters: Iterable[Filter]) -> list[Filter]:
    """Takes what ``pushed`` can apply exactly; returns the others (the same objects), which
    Spark evaluates after the scan."""
    return [f for f in filters if not pushed.take(f)]
