"""Hostile input through the Python API: every call gets the documented exception, never a crash,
and nothing already written changes (everything is read back after each attempt).

Offsets of every size, sign and type; offsets inside records and inside end-of-segment fillers;
bodies that are not bytes or not byte-formatted; option values out of range; paths that are files,
under files, missing, or the same directory twice; foreign files in a store directory; a second
writer, a writer killed with its lock file left behind, a forked child, a close racing other
threads, a truncated segment file.
"""

from __future__ import annotations

import array
import ctypes
import math
import multiprocessing
import os
import queue
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from rmqlog import (
    HEADER_LEN,
    ClosedError,
    CommitLog,
    CommitLogError,
    CorruptionError,
    InvalidOffsetError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    StoreLockedError,
)

SEG = 4096
OPTS = {"segment_size": SEG, "clean_interval_ms": 0, "max_used_ratio": 1.0}
HUGE = [2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**200]
NEGATIVE = [-1, -(2**63), -(2**64), -(2**127) - 1, -(2**200)]
WRONG_TYPES = [
    1.0,
    0.5,
    math.nan,
    math.inf,
    "0",
    b"0",
    True,
    False,
    Decimal(0),
    Fraction(0),
    [0],
    (0,),
    object(),
]


def int_id(v) -> str:
    """A readable test id for huge ints: 2**64, -(2**127)-1, ..."""
    if not isinstance(v, int) or abs(v) < 2**32:
        return repr(v)
    for base in (abs(v), abs(v) + 1, abs(v) - 1):
        if base & (base - 1) == 0:
            k = base.bit_length() - 1
            diff = abs(v) - base
            text = f"2**{k}" + (f"{diff:+d}" if diff else "")
            return text if v > 0 else f"-({text})" if diff else f"-(2**{k})"
    return repr(v)


def body(i: int, size: int) -> bytes:
    head = b"hostile-%d-" % i
    return (head * (size // len(head) + 1))[:size]


def run(script: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class Store:
    """An open writer over two directories holding records across several segments, some
    sealed with fillers, and what was written, to check after every hostile call."""

    def __init__(self, tmp_path: Path) -> None:
        self.dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
        self.log = CommitLog(self.dirs, **OPTS)
        self.written: dict[int, bytes] = {}
        for i, size in enumerate([1500, 1500, 0, 700, 3000, 10, 1500, 2000, 1800, 100, 5, 900]):
            b = body(i, size)
            self.written[self.log.append(b)] = b
        self.offsets = sorted(self.written)
        self.segs = [(s.start_offset, s.path) for s in self.log.segments()]
        self.end = self.log.max_offset
        assert len(self.segs) >= 4

    def check(self, deleted_below: int = 0) -> None:
        """Nothing changed: every record reads back, the scan is exactly what was written, no
        new record, the segments are the same (minus any truncated below ``deleted_below``)."""
        log = self.log
        assert log.max_offset == self.end
        assert log.min_offset == max(self.segs[0][0], deleted_below)
        live = {o: b for o, b in self.written.items() if o >= log.min_offset}
        for off, b in live.items():
            assert bytes(log.read(off)) == b, off
        assert [(o, bytes(v)) for o, v in log.scan()] == sorted(live.items())
        assert [(s.start_offset, s.path) for s in log.segments()] == [
            s for s in self.segs if s[0] >= log.min_offset
        ]
        for start, path in self.segs:
            assert os.path.exists(path) == (start >= log.min_offset), path

    def fillers(self) -> list[tuple[int, int]]:
        """``(filler_start, segment_end)`` of every sealed segment whose tail is a filler."""
        out = []
        for start, _ in self.segs[:-1]:
            seg_end = start + SEG
            last = max(o for o in self.offsets if o < seg_end)
            filler = last + HEADER_LEN + len(self.written[last])
            if seg_end - filler >= 8:
                out.append((filler, seg_end))
        return out


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path)
    yield s
    s.log.close()


# ---------------------------------------------------------------------------------------------
# offsets: huge, negative, wrong types


@pytest.mark.parametrize("value", [*HUGE, *NEGATIVE], ids=int_id)
@pytest.mark.parametrize("method", ["read", "read_record"])
def test_out_of_range_offsets(store, method, value):
    with pytest.raises(OffsetOutOfRangeError) as info:
        getattr(store.log, method)(value)
    assert isinstance(info.value, IndexError)
    store.check()


@pytest.mark.parametrize("value", [2**64, -1, 2**200, -(2**200)], ids=int_id)
def test_out_of_range_error_names_the_offset_given(store, value):
    """The message names the offset as given (tests/test_errors.py checks this up to 2**70);
    a huge int must not be reported as some other number."""
    with pytest.raises(OffsetOutOfRangeError) as info:
        store.log.read(value)
    assert str(value) in str(info.value)
    store.check()


def test_offsets_at_the_ends_of_the_log(store):
    log = store.log
    for bad in (log.max_offset, log.max_offset + 1, log.max_offset + SEG, log.min_offset - 1):
        with pytest.raises(OffsetOutOfRangeError):
            log.read(bad)
        with pytest.raises(OffsetOutOfRangeError):
            log.read_record(bad)
    store.check()


# Ids without addresses: pytest-xdist's workers must collect the same names.
@pytest.mark.parametrize(
    "value",
    WRONG_TYPES,
    ids=lambda v: f"{type(v).__name__}-{re.sub(' at 0x[0-9a-f]+', '', repr(v))}",
)
def test_offsets_of_the_wrong_type(store, value):
    log = store.log
    for call in (log.read, log.read_record, log.truncate_before, log.offset_for_timestamp):
        with pytest.raises(TypeError):
            call(value)
    with pytest.raises(TypeError):
        log.scan(start=value)
    with pytest.raises(TypeError):
        log.scan(end=value)
    with pytest.raises(TypeError):
        log.scan(value, None)
    store.check()


def test_none_offsets(store):
    log = store.log
    for call in (log.read, log.read_record, log.truncate_before, log.offset_for_timestamp):
        with pytest.raises(TypeError):
            call(None)
    # None is the default of scan's start and end: the whole log.
    assert [o for o, _ in log.scan(None, None)] == store.offsets
    store.check()


@pytest.mark.parametrize("value", NEGATIVE, ids=int_id)
def test_scan_start_below_the_log(store, value):
    with pytest.raises(OffsetOutOfRangeError):
        store.log.scan(start=value)
    store.check()


@pytest.mark.parametrize("value", ["max", "max+1", *HUGE], ids=int_id)
def test_scan_start_at_or_after_the_end_yields_nothing(store, value):
    """No record starts at or after max_offset: an empty scan or OffsetOutOfRangeError, never
    data."""
    start = {"max": store.end, "max+1": store.end + 1}.get(value, value)
    try:
        got = list(store.log.scan(start=start))
    except OffsetOutOfRangeError:
        got = []
    assert got == []
    store.check()


@pytest.mark.parametrize("value", HUGE, ids=int_id)
def test_scan_end_beyond_the_log_is_the_whole_log(store, value):
    assert [(o, bytes(v)) for o, v in store.log.scan(end=value)] == sorted(store.written.items())
    store.check()


@pytest.mark.parametrize("value", [0, *NEGATIVE], ids=int_id)
def test_scan_end_at_or_below_the_start_is_empty(store, value):
    """Records starting in [start, end): none when end <= min_offset, however negative."""
    assert list(store.log.scan(end=value)) == []
    assert list(store.log.scan(store.offsets[0], value)) == []
    store.check()


@pytest.mark.parametrize("value", NEGATIVE, ids=int_id)
def test_truncate_before_a_negative_offset_deletes_nothing(store, value):
    """A negative offset is out of range, as for read(); nothing is deleted."""
    with pytest.raises(OffsetOutOfRangeError):
        store.log.truncate_before(value)
    store.check()


@pytest.mark.parametrize("value", HUGE, ids=int_id)
def test_truncate_before_a_huge_offset_keeps_the_active_segment(store, value):
    active = store.segs[-1][0]
    assert store.log.truncate_before(value) == active
    store.check(deleted_below=active)
    # The log still works.
    off = store.log.append(b"after")
    assert bytes(store.log.read(off)) == b"after"


@pytest.mark.parametrize("value", [*HUGE, *NEGATIVE, 0], ids=int_id)
def test_offset_for_timestamp_extremes(store, value):
    """The first record with timestamp >= ts, else max_offset: the first record for any ts at or
    below the first timestamp (however negative), max_offset for any ts after the last."""
    log = store.log
    first_ts = log.read_record(store.offsets[0]).timestamp_ms
    last_ts = log.read_record(store.offsets[-1]).timestamp_ms
    expected = store.offsets[0] if value <= first_ts else store.end
    assert value <= first_ts or value > last_ts
    assert log.offset_for_timestamp(value) == expected
    store.check()


# ---------------------------------------------------------------------------------------------
# offsets inside records and fillers


def test_offsets_inside_records(store):
    log = store.log
    for off, b in store.written.items():
        length = HEADER_LEN + len(b)
        for inside in {off + 1, off + 8, off + HEADER_LEN - 1, off + length // 2, off + length - 1}:
            if inside in store.written or inside <= off:
                continue
            with pytest.raises(InvalidOffsetError) as info:
                log.read(inside)
            assert isinstance(info.value, ValueError)
            with pytest.raises(InvalidOffsetError):
                log.read_record(inside)
            # scan: refused, or (in the last bytes before max_offset, where no record fits)
            # literally the records starting in [start, max_offset); never anything else.
            try:
                got = [o for o, _ in log.scan(start=inside)]
            except InvalidOffsetError:
                continue
            assert got == [o for o in store.offsets if o >= inside], inside
    store.check()


def test_truncate_before_inside_a_record_deletes_only_whole_segments(store):
    # Inside the first record of the third segment: the first two segments end before it.
    third = store.segs[2][0]
    assert store.log.truncate_before(third + 5) == third
    store.check(deleted_below=third)


def test_offsets_in_segment_fillers(store):
    log = store.log
    fillers = store.fillers()
    assert len(fillers) >= 2
    for filler, seg_end in fillers:
        for inside in (filler, filler + 1, filler + 7, filler + 8, (filler + seg_end) // 2):
            with pytest.raises(InvalidOffsetError):
                log.read(inside)
            with pytest.raises(InvalidOffsetError):
                log.read_record(inside)
        for inside in (filler + 1, filler + 8, seg_end - 8, seg_end - 1):
            # A start inside a filler: refused, or (the last bytes of a segment) the records
            # of the next segments; never anything else.
            try:
                got = [o for o, _ in log.scan(start=inside)]
            except InvalidOffsetError:
                continue
            assert got == [o for o in store.offsets if o >= seg_end], inside
        # The filler's start is a past max_offset: a tailing reader resumes from it.
        assert [o for o, _ in log.scan(start=filler)] == [o for o in store.offsets if o >= filler]
    store.check()


# ---------------------------------------------------------------------------------------------
# bodies


class NoBuffer:
    pass


def released_view():
    mv = memoryview(b"released")
    mv.release()
    return mv


@pytest.mark.parametrize(
    "make",
    [
        lambda: "a str",
        lambda: "",
        lambda: 5,
        lambda: 0.5,
        lambda: [1, 2, 3],
        lambda: (1, 2),
        lambda: {1: 2},
        lambda: None,
        lambda: True,
        NoBuffer,
        object,
        released_view,
        lambda: iter([b"x"]),
    ],
    ids=[
        "str",
        "empty-str",
        "int",
        "float",
        "list-of-ints",
        "tuple",
        "dict",
        "None",
        "bool",
        "plain-class",
        "object",
        "released-memoryview",
        "iterator",
    ],
)
def test_non_buffer_bodies_are_refused(store, make):
    log = store.log
    with pytest.raises(TypeError):
        log.append(make())
    for batch in ([make()], [b"ok", make()], [b"ok", b"ok", make(), b"ok"]):
        with pytest.raises(TypeError):
            log.append_batch(batch)
        with pytest.raises(TypeError):
            log.append_batch(iter(batch))
    store.check()


def other_format_buffers():
    ints = array.array("i", [1, -2, 3, 2**31 - 1])
    doubles = array.array("d", [1.5, -0.0, math.pi])
    grid = memoryview(array.array("i", range(6))).cast("B").cast("i", (2, 3))
    return {
        "array-i": ints,
        "memoryview-i": memoryview(ints),
        "memoryview-i-strided": memoryview(ints)[::2],
        "memoryview-i-reversed": memoryview(ints)[::-1],
        "memoryview-d": memoryview(doubles),
        "memoryview-2d": grid,
        "array-i-empty": array.array("i"),
        "array-Q": array.array("Q", [2**64 - 1, 0]),
        "ctypes-int-array": (ctypes.c_int * 3)(7, 8, 9),
        "memoryview-c": memoryview(b"chars").cast("c"),
        "bytearray-slice": memoryview(bytearray(b"0123456789"))[3:7],
    }


@pytest.mark.parametrize("name", sorted(other_format_buffers()))
def test_buffers_of_other_formats_are_stored_as_their_bytes(store, name):
    """Any buffer is a body: what is stored is its bytes in logical order (``tobytes()``)."""
    obj = other_format_buffers()[name]
    raw = memoryview(obj).tobytes()
    log = store.log
    off = log.append(obj)
    assert off == store.end
    assert bytes(log.read(off)) == raw
    offs = log.append_batch([obj, b"-", obj])
    assert [bytes(log.read(o)) for o in offs] == [raw, b"-", raw]
    for o, b in zip([off, *offs], [raw, raw, b"-", raw], strict=True):
        store.written[o] = b
    store.end = log.max_offset
    store.offsets = sorted(store.written)
    store.segs = [(s.start_offset, s.path) for s in log.segments()]
    store.check()


@pytest.mark.parametrize("size", [SEG - HEADER_LEN + 1, SEG, SEG + 1, 10 * SEG, 1 << 20])
def test_bodies_larger_than_a_segment(store, size):
    log = store.log
    big = bytes(size)
    with pytest.raises(MessageTooLargeError) as info:
        log.append(big)
    assert isinstance(info.value, ValueError)
    for where in (0, 2, 4):
        batch = [body(100 + i, 500) for i in range(4)]
        batch.insert(where, big)
        with pytest.raises(MessageTooLargeError):
            log.append_batch(batch)
        with pytest.raises(MessageTooLargeError):
            log.append_batch(b for b in batch)
    store.check()


def test_bodies_over_max_message_size(tmp_path):
    with CommitLog(tmp_path / "s", max_message_size=100, **OPTS) as log:
        ok = log.append(b"k" * 100)
        for size in (101, 1000, SEG):
            with pytest.raises(MessageTooLargeError):
                log.append(bytes(size))
            with pytest.raises(MessageTooLargeError):
                log.append_batch([b"a", bytes(size)])
        assert log.max_offset == ok + HEADER_LEN + 100
        assert [(o, bytes(v)) for o, v in log.scan()] == [(ok, b"k" * 100)]


def test_a_batch_whose_iterator_raises_writes_nothing(store):
    def bodies():
        yield b"first"
        yield b"second"
        raise ZeroDivisionError("boom")

    with pytest.raises(ZeroDivisionError, match="boom"):
        store.log.append_batch(bodies())
    store.check()


def test_a_batch_of_many_empty_bodies(store):
    offs = store.log.append_batch([b""] * 300)
    assert len(offs) == 300
    assert all(bytes(store.log.read(o)) == b"" for o in offs)
    assert store.log.read_record(offs[-1]).next_offset == store.log.max_offset


# ---------------------------------------------------------------------------------------------
# options


def bad_options(target: str) -> list[tuple[dict, type]]:
    return [
        ({"segment_size": 0}, ValueError),
        ({"segment_size": 4095}, ValueError),
        ({"segment_size": 4097}, ValueError),
        ({"segment_size": -4096}, ValueError),
        ({"segment_size": 2**64}, ValueError),
        ({"segment_size": 2**200}, ValueError),
        ({"segment_size": "4096"}, TypeError),
        ({"segment_size": 4096.0}, TypeError),
        ({"segment_size": True}, TypeError),
        ({"max_used_ratio": 0}, ValueError),
        ({"max_used_ratio": 0.0}, ValueError),
        ({"max_used_ratio": 1.5}, ValueError),
        ({"max_used_ratio": -1}, ValueError),
        ({"max_used_ratio": -1.0}, ValueError),
        ({"max_used_ratio": math.nan}, ValueError),
        ({"max_used_ratio": math.inf}, ValueError),
        ({"max_used_ratio": "0.5"}, TypeError),
        ({"max_used_ratio": True}, TypeError),
        ({"max_used_ratio": {target: 2.0}}, ValueError),
        ({"max_used_ratio": {target: 0}}, ValueError),
        ({"max_used_ratio": {target: math.nan}}, ValueError),
        ({"max_used_ratio": {target: "0.5"}}, TypeError),
        ({"force_clean_ratio": 0}, ValueError),
        ({"force_clean_ratio": 1.5}, ValueError),
        ({"force_clean_ratio": -0.5}, ValueError),
        ({"force_clean_ratio": math.nan}, ValueError),
        ({"force_clean_ratio": "0.9"}, TypeError),
        ({"delete_hours": [24]}, ValueError),
        ({"delete_hours": [-1]}, ValueError),
        ({"delete_hours": [4, 99]}, ValueError),
        ({"delete_hours": [2**70]}, ValueError),
        ({"delete_hours": "4"}, TypeError),
        ({"delete_hours": 4}, TypeError),
        ({"delete_hours": [4.0]}, TypeError),
        ({"delete_hours": ["4"]}, TypeError),
        ({"retention_hours": -1.0}, ValueError),
        ({"retention_hours": math.nan}, ValueError),
        ({"retention_hours": math.inf}, ValueError),
        ({"retention_hours": "72"}, TypeError),
        ({"retention_bytes": -1}, ValueError),
        ({"retention_bytes": 2**64}, ValueError),
        ({"retention_bytes": 1.0}, TypeError),
        ({"max_deletes_per_pass": 0}, ValueError),
        ({"max_deletes_per_pass": -1}, ValueError),
        ({"clean_interval_ms": -1}, ValueError),
        ({"min_free_bytes": -1}, ValueError),
        ({"flush_interval_ms": 0}, ValueError),
        ({"max_message_size": -1}, ValueError),
        ({"flush": "never"}, ValueError),
        ({"strategy": "nope"}, ValueError),
    ]


def option_id(case) -> str:
    kwargs, _ = case
    ((k, v),) = kwargs.items()
    if isinstance(v, dict):
        v = {"<store>": next(iter(v.values()))}
    if isinstance(v, list):
        return f"{k}=[{', '.join(int_id(x) for x in v)}]"
    return f"{k}={int_id(v)}"


BAD_OPTIONS = bad_options("<store>")


@pytest.mark.parametrize("index", range(len(BAD_OPTIONS)), ids=[option_id(c) for c in BAD_OPTIONS])
def test_bad_options_are_refused_before_the_disk_is_touched(tmp_path, index):
    target = str(tmp_path / "store")
    kwargs, exc = bad_options(target)[index]
    opts = {**OPTS, **kwargs}
    with pytest.raises((TypeError, ValueError)) as info:
        CommitLog(target, **opts)
    assert type(info.value) is exc, f"{type(info.value).__name__}: {info.value}"
    assert not isinstance(info.value, CommitLogError)
    assert not os.path.exists(target)


def snapshot(*dirs: str | Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file under ``dirs``: its bytes, mode and mtime."""
    out = {}
    for d in dirs:
        for root, _, files in os.walk(d):
            for name in files:
                p = os.path.join(root, name)
                st = os.lstat(p)
                data = os.readlink(p).encode() if os.path.islink(p) else Path(p).read_bytes()
                out[p] = (data, st.st_mode, st.st_mtime_ns)
    return out


def test_bad_options_leave_an_existing_store_untouched(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    with CommitLog(dirs, **OPTS) as log:
        written = {log.append(body(i, 900)): body(i, 900) for i in range(20)}
    before = snapshot(*dirs)
    for kwargs, _ in bad_options(dirs[0]):
        for ro in (False, True):
            # The exact class is checked above; here: refused, and the store is untouched.
            with pytest.raises((TypeError, ValueError, ArithmeticError)):
                CommitLog(dirs, **{**OPTS, **kwargs, "read_only": ro})
    assert snapshot(*dirs) == before
    with CommitLog(dirs, **OPTS) as log:
        assert [(o, bytes(v)) for o, v in log.scan()] == sorted(written.items())


# ---------------------------------------------------------------------------------------------
# paths


def test_a_path_that_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_bytes(b"a plain file")
    for ro in (False, True):
        with pytest.raises(ValueError, match="not a directory"):
            CommitLog(f, read_only=ro, **OPTS)
    assert f.read_bytes() == b"a plain file"
    assert sorted(os.listdir(tmp_path)) == ["file"]


def test_a_path_under_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_bytes(b"a plain file")
    with pytest.raises(OSError):
        CommitLog(f / "sub", **OPTS)
    with pytest.raises(OSError):
        CommitLog(f / "sub", read_only=True)
    assert f.read_bytes() == b"a plain file"
    assert sorted(os.listdir(tmp_path)) == ["file"]


def test_a_path_under_a_file_next_to_a_good_one_goes_offline(tmp_path):
    """A writable directory that cannot be created goes offline if another one remains; every
    segment then goes to the good one."""
    f = tmp_path / "file"
    f.write_bytes(b"a plain file")
    good, bad = str(tmp_path / "good"), str(f / "sub")
    with CommitLog([good, bad], **OPTS) as log:
        states = {d.path: d.state for d in log.dirs()}
        assert states == {good: "writable", bad: "offline"}
        written = {log.append(body(i, 1500)): body(i, 1500) for i in range(10)}
        assert len(log.segments()) >= 4
        assert all(os.path.dirname(s.path) == good for s in log.segments())
    with CommitLog([good, bad], **OPTS) as log:
        assert [(o, bytes(v)) for o, v in log.scan()] == sorted(written.items())
    assert f.read_bytes() == b"a plain file"


def test_a_missing_directory_read_only(tmp_path):
    with pytest.raises(OSError) as info:
        CommitLog(tmp_path / "missing", read_only=True)
    assert "missing" in str(info.value)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "make",
    [
        lambda t: [t / "a", t / "a"],
        lambda t: [t / "a", t / "link-to-a"],
        lambda t: [t / "link-to-a", t / "a"],
        lambda t: [t / "a", t / "b" / ".." / "a"],
        lambda t: [t / "a", t / "link-to-b" / ".." / "a"],
        lambda t: os.pathsep.join([str(t / "a"), str(t / "link-to-a")]),
    ],
    ids=["plain", "symlink", "symlink-first", "dotdot", "dotdot-through-symlink", "pathsep"],
)
@pytest.mark.parametrize("read_only", [False, True])
def test_the_same_directory_twice(tmp_path, make, read_only):
    (tmp_path / "b").mkdir()
    (tmp_path / "a").mkdir()
    os.symlink(tmp_path / "a", tmp_path / "link-to-a")
    os.symlink(tmp_path / "b", tmp_path / "link-to-b")
    with CommitLog(tmp_path / "a", **OPTS) as log:
        written = {log.append(body(i, 1000)): body(i, 1000) for i in range(8)}
    before = snapshot(tmp_path / "a")
    with pytest.raises(ValueError, match="twice"):
        CommitLog(make(tmp_path), read_only=read_only, **OPTS)
    assert snapshot(tmp_path / "a") == before
    with CommitLog(tmp_path / "a", **OPTS) as log:
        assert [(o, bytes(v)) for o, v in log.scan()] == sorted(written.items())


def test_the_same_new_directory_twice_through_a_dangling_symlink(tmp_path):
    """``link`` points at ``new``, which does not exist yet: the two are still one directory,
    refused like any other duplicate, before anything is created."""
    os.symlink(tmp_path / "new", tmp_path / "link")
    with pytest.raises(ValueError, match="twice"):
        CommitLog([tmp_path / "new", tmp_path / "link"], **OPTS)
    assert not (tmp_path / "new").exists()


def test_unrelated_files_in_a_store_directory_are_never_touched(tmp_path):
    d = tmp_path / "store"
    (d / "sub").mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"outside")
    files = {
        "notes.txt": b"unrelated notes",
        ".hidden": b"hidden",
        "rmqlog.meta.bak": b"an old copy, not the metadata",
        "rmqlog.lock.old": b"",
        "12345": b"a short numeric name",
        "00000000000000000000.bak": b"x" * 100,
        "00000000000000000000.tmpfile": b"y" * 10,
        "0000000000000000000a": b"twenty chars, not digits",
        "sub/00000000000000000000": b"a segment name one level down",
        "sub/inner.bin": bytes(range(256)),
    }
    for name, data in files.items():
        (d / name).write_bytes(data)
    os.symlink(outside, d / "link-outside")
    os.chmod(d / "notes.txt", 0o600)
    before = snapshot(d, outside)

    def ours(path: str) -> bool:
        name = os.path.basename(path)
        return os.path.dirname(path) == str(d) and (
            (len(name) == 20 and name.isdigit())
            or name
            in (
                "rmqlog.lock",
                "rmqlog.meta",
                "rmqlog.tail",
                "rmqlog.id",
                "rmqlog.ctl",
                "rmqlog.counts",
            )
        )

    def foreign() -> dict:
        return {p: v for p, v in snapshot(d, outside).items() if not ours(p)}

    with CommitLog(d, **OPTS) as log:
        written = {log.append(body(i, 1500)): body(i, 1500) for i in range(12)}
        assert foreign() == before
        min_offset = log.truncate_before(log.segments()[2].start_offset)
        assert foreign() == before
    with CommitLog(d, read_only=True) as ro:
        assert [(o, bytes(v)) for o, v in ro.scan()] == sorted(
            (o, b) for o, b in written.items() if o >= min_offset
        )
    with CommitLog(d, **OPTS) as log:
        log.append(b"reopened")
    assert foreign() == before


def test_a_truncated_segment_fails_closed_and_changes_nothing(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    with CommitLog(dirs, **OPTS) as log:
        written = [(log.append(body(i, 1500)), body(i, 1500)) for i in range(10)]
        segs = log.segments()
    victim, last = segs[1].path, segs[-1].path

    def segment_files() -> dict:
        return {p: v for p, v in snapshot(*dirs).items() if os.path.basename(p).isdigit()}

    # A sealed segment's length is checked when it is first mapped: the log opens, every read
    # there fails naming the file, the others read.
    with open(victim, "r+b") as f:
        f.truncate(SEG - 100)
    before = segment_files()
    inside = [(o, b) for o, b in written if segs[1].start_offset <= o < segs[2].start_offset]
    outside = [(o, b) for o, b in written if o < segs[1].start_offset]
    for ro in (False, True):
        with CommitLog(dirs, read_only=ro, **OPTS) as log:
            with pytest.raises(CorruptionError) as info:
                log.read(inside[0][0])
            assert victim in str(info.value) and f"length {SEG - 100}" in str(info.value)
            assert [bytes(log.read(o)) for o, _ in outside] == [b for _, b in outside]
            with pytest.raises(CorruptionError):
                list(log.scan())
    assert segment_files() == before

    # The last segment's length is checked at open: the log does not open, nothing changes.
    with open(last, "r+b") as f:
        f.truncate(SEG - 100)
    before = snapshot(*dirs)
    for ro in (False, True):
        with pytest.raises(CorruptionError) as info:
            CommitLog(dirs, read_only=ro, **OPTS)
        assert last in str(info.value)
    assert snapshot(*dirs) == before


# ---------------------------------------------------------------------------------------------
# processes


def test_a_second_writer_in_another_process(store):
    r = run(
        f"""
        from rmqlog import CommitLog, StoreLockedError
        for paths in ({store.dirs!r}, {store.dirs[1:]!r}, {store.dirs[::-1]!r}):
            try:
                CommitLog(paths, segment_size={SEG})
                print("opened")
            except StoreLockedError as e:
                print("locked")
        with CommitLog({store.dirs[0]!r}, read_only=True) as ro:
            print(ro.max_offset)
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["locked", "locked", "locked", str(store.end)]
    store.check()
    off = store.log.append(b"the first writer still writes")
    assert off == store.end


def test_a_lock_file_left_by_a_sigkilled_writer(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import time
                from rmqlog import CommitLog
                log = CommitLog({dirs!r}, segment_size={SEG}, flush="none")
                for i in range(10):
                    print(log.append(b"killed-%d" % i * 300), flush=True)
                time.sleep(3600)
                """
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    offsets = [int(proc.stdout.readline()) for _ in range(10)]
    # While it lives, the store is locked.
    with pytest.raises(StoreLockedError):
        CommitLog(dirs, **OPTS)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    proc.stdout.close()
    for d in dirs:
        assert os.path.exists(os.path.join(d, "rmqlog.lock"))
    with CommitLog(dirs, **OPTS) as log:
        for i, off in enumerate(offsets):
            assert bytes(log.read(off)) == b"killed-%d" % i * 300
        off = log.append(b"next writer")
        assert bytes(log.read(off)) == b"next writer"


def _forked_child(log: CommitLog, results, release) -> None:
    out = {"closed": log.closed}
    for name, call in (
        ("append", lambda: log.append(b"from the child")),
        ("append_batch", lambda: log.append_batch([b"child"])),
        ("read", lambda: log.read(0)),
        ("flush", lambda: log.flush()),
        ("truncate_before", lambda: log.truncate_before(2**40)),
    ):
        try:
            call()
            out[name] = "no error"
        except ClosedError:
            out[name] = "ClosedError"
        except BaseException as e:
            out[name] = f"{type(e).__name__}: {e}"
    results.put(out)
    release.wait(60)  # still alive while the parent closes and a third process writes


def test_a_forked_child_cannot_write_and_does_not_hold_the_lock(store):
    ctx = multiprocessing.get_context("fork")
    results, release = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=_forked_child, args=(store.log, results, release))
    child.start()
    try:
        try:
            out = results.get(timeout=30)
        except queue.Empty:
            pytest.fail("the forked child reported nothing")
        assert out == {
            "closed": True,
            "append": "ClosedError",
            "append_batch": "ClosedError",
            "read": "ClosedError",
            "flush": "ClosedError",
            "truncate_before": "ClosedError",
        }
        # Nothing changed in the parent, which still writes.
        assert not store.log.closed
        store.check()
        extra = store.log.append(b"parent after fork")
        store.log.close()
        assert child.is_alive()
        r = run(
            f"""
            from rmqlog import CommitLog
            with CommitLog({store.dirs!r}, segment_size={SEG}) as log:
                print(bytes(log.read({extra})).decode(), log.append(b"third process"))
            """
        )
        assert r.returncode == 0, r.stderr
        text, third = r.stdout.split()[:-1], int(r.stdout.split()[-1])
        assert " ".join(text) == "parent after fork"
        assert child.is_alive()
    finally:
        release.set()
        child.join(30)
    assert child.exitcode == 0
    with CommitLog(store.dirs, **OPTS) as log:
        for off, b in store.written.items():
            assert bytes(log.read(off)) == b
        assert bytes(log.read(extra)) == b"parent after fork"
        assert bytes(log.read(third)) == b"third process"
        assert log.read_record(third).next_offset == log.max_offset


def test_close_racing_other_threads(tmp_path):
    """Threads appending, reading and scanning while another closes the log: before the close
    they succeed, after it they get ClosedError; nothing else, no crash; views stay valid."""
    log = CommitLog(tmp_path / "s", **OPTS)
    first = {log.append(body(i, 800)): body(i, 800) for i in range(20)}
    held = [(off, log.read(off)) for off in first]
    errors: list[BaseException] = []
    started = threading.Barrier(5)
    closed_seen = [0]
    calls = [0, 0, 0, 0]  # calls of each thread that returned

    def loop(k, step):
        started.wait()
        try:
            for i in range(100_000):
                try:
                    step(i)
                except ClosedError:
                    assert log.closed
                    closed_seen[0] += 1
                    return
                calls[k] += 1
        except BaseException as e:
            errors.append(e)

    def append(i):
        log.append(body(1000 + i, i % 700))

    def read(i):
        off = list(first)[i % len(first)]
        assert bytes(log.read(off)) == first[off]

    def scan(i):
        for off, v in log.scan(end=list(first)[-1] + 1):
            assert bytes(v) == first[off]

    steps = (append, append, read, scan)
    threads = [threading.Thread(target=loop, args=(k, f)) for k, f in enumerate(steps)]
    for t in threads:
        t.start()
    started.wait()
    try:
        # The close races calls in flight: every thread has had calls return before it.
        deadline = time.monotonic() + 30
        while min(calls) == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        before_close = list(calls)
    finally:
        log.close()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert min(before_close) > 0, f"calls that returned before the close: {before_close}"
    assert closed_seen[0] == 4
    for off, view in held:
        assert bytes(view) == first[off]
    with CommitLog(tmp_path / "s", **OPTS) as again:
        for off, b in first.items():
            assert bytes(again.read(off)) == b
        last = [o for o, _ in again.scan()][-1]
        assert again.read_record(last).next_offset == again.max_offset
