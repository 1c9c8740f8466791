"""The Arrow API from Python: ``scan_batches`` (``BatchScan``), ``append_batch`` of Arrow input,
``rmqlog.to_arrow``. Each contract of ``_native.pyi`` and ``_arrow.py``, checked against
``scan()`` and ``read()``."""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import struct
import subprocess
import sys
import textwrap
import threading
import time

import pyarrow as pa
import pytest

import rmqlog
from rmqlog import (
    BatchScan,
    ClosedError,
    CorruptionError,
    InvalidOffsetError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    ReadOnlyError,
)

SEG = 4096
SIZES = (0, 3, 12, 13, 100, 700)  # empty, inline views (<= 12 bytes), and longer bodies
ALL = ("offset", "timestamp", "body", "segment")
TS = pa.timestamp("ms", tz="UTC")


def bodies(n, first=0):
    return [(b"%d-" % i * 700)[: SIZES[i % len(SIZES)]] for i in range(first, first + n)]


@pytest.fixture
def log(make_log):
    """200 records over many 4 KiB segments."""
    log = make_log()
    log.append_batch(bodies(100))
    for b in bodies(100, first=100):
        log.append(b)
    assert len(log.segments()) > 6
    return log


def rows(log, start=None, end=None):
    """``{column: values}`` of the records in ``[start, end)``, from ``scan()``, ``read_record``
    and ``segments()``."""
    segs = [s.start_offset for s in log.segments()]
    out = {c: [] for c in ALL}
    for off, body in log.scan(start, end):
        out["offset"].append(off)
        out["timestamp"].append(log.read_record(off).timestamp_ms)
        out["body"].append(bytes(body))
        out["segment"].append(max(s for s in segs if s <= off))
    return out


def values(batches, column):
    """A column of ``batches`` as Python values (timestamps in ms, bodies as bytes)."""
    out = []
    for b in batches:
        col = b.column(column)
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.int64())
        out.extend(col.to_pylist())
    return out


def view_slots(array):
    """``(length, buffer_index, offset)`` of each element of a binary_view array (the 16-byte
    view layout: length, 4-byte prefix, then buffer index and offset for non-inline values)."""
    raw = array.buffers()[1].to_pybytes()[array.offset * 16 :]
    return [struct.unpack_from("<i4xii", raw, 16 * i) for i in range(len(array))]


def segment_maps():
    """``(start, end, path)`` of the file mappings of this process."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6:
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                out.append((lo, hi, parts[5].strip()))
    return out


# ---------------------------------------------------------------------------------------------
# scan_batches against scan()


@pytest.mark.parametrize("body", ["view", "binary"])
def test_every_column_subset_and_order_matches_scan(log, body):
    want = rows(log)
    orders = [p for k in range(5) for p in itertools.permutations(ALL, k)]
    assert len(orders) == 65
    for columns in orders:
        batches = list(log.scan_batches(columns=columns, body=body, max_records=37))
        assert len(batches) == 6  # 200 records, 37 a batch
        for b in batches:
            assert b.schema.names == list(columns)
        assert sum(b.num_rows for b in batches) == 200
        for c in columns:
            assert values(batches, c) == want[c], (columns, c)


def test_default_columns_and_schema(log):
    scan = log.scan_batches()
    assert isinstance(scan, BatchScan)
    assert scan.schema == pa.schema(
        [
            pa.field("offset", pa.int64(), nullable=False),
            pa.field("timestamp", TS, nullable=False),
            pa.field("body", pa.binary_view(), nullable=False),
        ]
    )
    batches = list(scan)
    assert len(batches) == 1  # 200 records fit the default 65,536 / 64 MiB
    assert batches[0].schema == scan.schema
    full = log.scan_batches(columns=ALL, body="binary")
    assert full.schema.types == [pa.int64(), TS, pa.binary(), pa.int64()]
    assert next(full).schema == full.schema
    for b in batches:
        assert all(col.null_count == 0 for col in b.columns)


def test_timestamps_are_the_append_time(make_log):
    log = make_log()
    before = time.time_ns() // 1_000_000
    log.append_batch([b"a", b"b"])
    after = time.time_ns() // 1_000_000
    (batch,) = log.scan_batches(columns=["timestamp"])
    for ts in batch.column(0).to_pylist():
        assert ts.tzinfo is not None and ts.utcoffset().total_seconds() == 0
        assert before <= ts.timestamp() * 1000 <= after


@pytest.mark.parametrize(
    ("max_records", "max_bytes"), [(1, 2**26), (7, 2**26), (1000, 1), (1000, 750), (5, 800)]
)
@pytest.mark.parametrize("body", ["view", "binary"])
def test_batches_split_and_position_advances_exactly(log, body, max_records, max_bytes):
    want = rows(log)
    scan = log.scan_batches(columns=ALL, body=body, max_records=max_records, max_bytes=max_bytes)
    assert scan.end == log.max_offset
    at = 0
    while True:
        pos = scan.position
        try:
            batch = next(scan)
        except StopIteration:
            break
        n = batch.num_rows
        assert pos == want["offset"][at]
        assert 1 <= n <= max_records
        size = sum(len(b) for b in want["body"][at : at + n])
        assert n == 1 or size <= max_bytes
        if at + n < len(want["offset"]):  # greedy: the next record did not fit
            assert n == max_records or size + len(want["body"][at + n]) > max_bytes
            assert scan.position == want["offset"][at + n]
        for c in ALL:
            assert values([batch], c) == want[c][at : at + n]
        at += n
    assert at == 200
    assert scan.position == scan.end == log.max_offset
    with pytest.raises(StopIteration):
        next(scan)
    assert repr(scan).startswith(f"BatchScan(position={scan.end}, end={scan.end}, columns=")


def test_ranges_match_scan(log):
    offs = rows(log)["offset"]
    a, b = offs[17], offs[150]
    for start, end in [(a, None), (None, b), (a, b), (a, a), (b, a), (a, a + 1), (0, 2**62)]:
        batches = list(log.scan_batches(start, end, columns=["offset", "body"]))
        want = rows(log, start, end)
        assert values(batches, "offset") == want["offset"]
        assert values(batches, "body") == want["body"]
        assert all(b.num_rows > 0 for b in batches)


def test_an_empty_log_gives_no_batch(make_log):
    log = make_log()
    scan = log.scan_batches()
    assert (scan.position, scan.end) == (0, 0)
    assert list(scan) == []
    table = pa.RecordBatchReader.from_stream(log.scan_batches()).read_all()
    assert table.num_rows == 0
    assert table.schema == log.scan_batches().schema
    empty = rmqlog.to_arrow(log, columns=["body"], body="binary")
    assert empty.num_rows == 0 and empty.schema.types == [pa.binary()]


def test_no_columns_gives_row_counts(log):
    batches = list(log.scan_batches(columns=[], max_records=64))
    assert [b.num_rows for b in batches] == [64, 64, 64, 8]
    assert all(b.num_columns == 0 for b in batches)


def test_the_range_is_fixed_when_the_scan_is_made(log):
    scan = log.scan_batches(columns=["offset"])
    end = log.max_offset
    log.append(b"later")
    assert scan.end == end
    assert values(list(scan), "offset") == rows(log, None, end)["offset"]


# ---------------------------------------------------------------------------------------------
# zero copy, and the lifetime of a batch


def test_view_bodies_are_the_mapped_segment_bytes(log):
    (batch,) = log.scan_batches(columns=["offset", "body"])
    offsets = batch.column(0).to_pylist()
    array = batch.column(1)
    data = array.buffers()[2:]  # validity, views, then the data buffers
    assert data
    maps = segment_maps()
    seg_paths = {s.path for s in log.segments()}
    for buf in data:
        inside = [p for lo, hi, p in maps if lo <= buf.address and buf.address + buf.size <= hi]
        assert inside and inside[0] in seg_paths, "a data buffer outside every segment map"
    checked = 0
    for off, (length, index, at) in zip(offsets, view_slots(array), strict=True):
        if length <= 12:
            continue  # inline: the bytes are in the view itself
        mem = pa.py_buffer(log.read(off))  # read(): a memoryview over the map, no copy
        assert data[index].address + at == mem.address
        checked += 1
    assert checked == sum(len(b) > 12 for b in rows(log)["body"])


def test_binary_bodies_are_copies(log):
    (batch,) = log.scan_batches(columns=["offset", "body"], body="binary")
    data = batch.column(1).buffers()[2]
    seg_paths = {s.path for s in log.segments()}
    maps = [(lo, hi) for lo, hi, p in segment_maps() if p in seg_paths]
    assert maps  # the log's own maps
    assert not any(lo <= data.address < hi for lo, hi in maps)


def test_a_batch_outlives_close_and_the_deletion_of_its_segments(make_log):
    log = make_log()
    log.append_batch(bodies(200))
    want = rows(log)
    batches = list(log.scan_batches(columns=ALL, max_records=50))
    copies = list(log.scan_batches(columns=ALL, body="binary", max_records=50))
    first = log.segments()[0].path
    cut = log.segments()[5].start_offset
    assert log.truncate_before(cut) == cut
    assert not os.path.exists(first)
    log.close()
    del log
    gc.collect()
    for bs in (batches, copies):
        for c in ALL:
            assert values(bs, c) == want[c]
    assert f"{first} (deleted)" in {p for _, _, p in segment_maps()}  # still mapped


def test_a_batch_outlives_the_cleaner(make_log):
    log = make_log(retention_bytes=3 * SEG, clean_interval_ms=0)
    log.append_batch(bodies(200))
    want = rows(log)
    (batch,) = log.scan_batches(columns=["offset", "body"])
    first = log.segments()[0].path
    assert log.clean(force=True) > 0
    assert not os.path.exists(first)
    assert log.min_offset > want["offset"][0]
    assert values([batch], "body") == want["body"]


def test_maps_go_when_the_batches_go(make_log):
    log = make_log()
    log.append_batch(bodies(200))
    paths = {s.path for s in log.segments()}
    batches = list(log.scan_batches())
    log.truncate_before(log.segments()[-1].start_offset)
    log.close()

    def mapped():
        return {p for _, _, p in segment_maps() if p.removesuffix(" (deleted)") in paths}

    assert mapped()
    del batches
    gc.collect()
    assert not mapped()


# ---------------------------------------------------------------------------------------------
# the stream


def test_the_stream_equals_iteration(log):
    for body in ("view", "binary"):
        kw = {"columns": ALL, "body": body, "max_records": 30}
        table = pa.RecordBatchReader.from_stream(log.scan_batches(**kw)).read_all()
        assert table.equals(pa.Table.from_batches(list(log.scan_batches(**kw))))
        assert table.schema == log.scan_batches(**kw).schema
        assert table.column("offset").to_pylist() == rows(log)["offset"]


def test_each_export_reads_from_position_and_does_not_advance(log):
    scan = log.scan_batches(columns=["offset"], max_records=50)
    offs = rows(log)["offset"]
    first = pa.RecordBatchReader.from_stream(scan).read_all()
    second = pa.RecordBatchReader.from_stream(scan).read_all()
    assert first.column(0).to_pylist() == second.column(0).to_pylist() == offs
    assert scan.position == offs[0]
    next(scan)
    assert scan.position == offs[50]
    rest = pa.RecordBatchReader.from_stream(scan).read_all()
    assert rest.column(0).to_pylist() == offs[50:]
    assert scan.position == offs[50]
    assert values(list(scan), "offset") == offs[50:]


def test_the_stream_capsule(log):
    capsule = log.scan_batches().__arrow_c_stream__()
    assert type(capsule).__name__ == "PyCapsule"
    assert "arrow_array_stream" in repr(capsule)
    # requested_schema may be ignored by a producer: the batches keep their own.
    reader = pa.RecordBatchReader.from_stream(log.scan_batches(), schema=None)
    assert reader.schema.names == ["offset", "timestamp", "body"]


def test_a_requested_schema_is_ignored(log):
    """The PyCapsule protocol lets a producer keep its schema: choose the columns and the body
    layout with scan_batches, not with the consumer's schema."""
    binary = pa.schema([("offset", pa.int64()), ("body", pa.binary())])
    reader = pa.RecordBatchReader.from_stream(log.scan_batches(), schema=binary)
    assert reader.schema == log.scan_batches().schema
    assert reader.read_all().num_rows == 200


# ---------------------------------------------------------------------------------------------
# errors while reading


def test_a_closed_log_stops_iteration_with_closed_error(log):
    offs = rows(log)["offset"]
    scan = log.scan_batches(max_records=10)
    stream = pa.RecordBatchReader.from_stream(log.scan_batches(max_records=10))
    assert next(scan).num_rows == 10
    assert stream.read_next_batch().num_rows == 10
    log.close()
    with pytest.raises(ClosedError):
        next(scan)
    with pytest.raises(ClosedError):
        scan.__arrow_c_stream__()
    with pytest.raises(ClosedError):
        log.scan_batches()
    with pytest.raises(Exception, match="the log is closed"):
        stream.read_next_batch()
    assert scan.position == offs[10]  # still readable: where a reopened log would resume


def flip_body_byte(log, victim):
    seg = next(s for s in log.segments() if s.start_offset <= victim < s.start_offset + s.size)
    log.close()
    with open(seg.path, "r+b") as f:
        f.seek(victim - seg.start_offset + rmqlog.HEADER_LEN + 5)
        old = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([old[0] ^ 0xFF]))


def test_a_corrupt_record_yields_the_batches_before_it_then_corruption_error(make_log, dirs):
    log = make_log(flush="sync")
    offs = log.append_batch([b"%03d" % i * 100 for i in range(40)])
    victim = offs[25]
    flip_body_byte(log, victim)
    ro = make_log(read_only=True)
    scan = ro.scan_batches(columns=["offset"], max_records=10)
    got = [next(scan), next(scan), next(scan)]  # the third: the 5 records before the bad one
    assert [b.num_rows for b in got] == [10, 10, 5]
    assert values(got, "offset") == offs[:25]
    assert scan.position == victim
    with pytest.raises(CorruptionError, match=str(victim)):
        next(scan)
    scan = ro.scan_batches(columns=["offset"], max_records=10)
    seen = []
    with pytest.raises(CorruptionError) as info:
        for b in scan:
            seen.extend(b.column(0).to_pylist())
    assert seen == offs[:25]
    assert str(victim) in str(info.value)
    with pytest.raises(StopIteration):
        next(scan)  # the error ended the scan
    with pytest.raises(CorruptionError):
        rmqlog.to_arrow(ro)
    with pytest.raises(CorruptionError):
        rmqlog.to_arrow(dirs)
    stream = pa.RecordBatchReader.from_stream(ro.scan_batches(max_records=10))
    with pytest.raises(Exception, match=f"corruption.*{victim}") as info:
        stream.read_all()
    assert not isinstance(info.value, CorruptionError)  # the C stream carries a message only


# ---------------------------------------------------------------------------------------------
# bad arguments


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"columns": ["offset", "bodies"]}, ValueError, 'unknown column "bodies".*"segment"'),
        ({"columns": ["body", "offset", "body"]}, ValueError, '"body" is named twice'),
        ({"columns": "body"}, TypeError, "sequence of column names"),
        ({"columns": [1]}, TypeError, "sequence of column names"),
        ({"body": "x"}, ValueError, 'unknown body layout "x".*"view".*"binary"'),
        ({"body": 1}, TypeError, "body must be a str, got int"),
        ({"max_records": 0}, ValueError, r"max_records must be a positive int .*, got 0"),
        ({"max_records": -5}, ValueError, r"max_records must be a positive int .*, got -5"),
        (
            {"max_records": 2**70},
            ValueError,
            r"max_records must be a positive int below 2\*\*64",
        ),
        ({"max_records": True}, TypeError, "max_records must be an int, got bool"),
        ({"max_records": 1.5}, TypeError, "max_records must be an int, got float"),
        ({"max_bytes": -1}, ValueError, r"max_bytes must be a positive int below 2\*\*64, got -1"),
        ({"max_bytes": 0}, ValueError, "max_bytes must be a positive int below 2\\*\\*64, got 0"),
        ({"threads": 0}, ValueError, r"threads must be an int from 1 to 64, or None .*, got 0"),
        ({"threads": 65}, ValueError, r"threads must be an int from 1 to 64, or None .*, got 65"),
        ({"threads": -2}, ValueError, r"threads must be an int from 1 to 64, .*got -2"),
        ({"threads": "2"}, TypeError, "threads must be an int, got str"),
        ({"threads": True}, TypeError, "threads must be an int, got bool"),
    ],
)
def test_bad_arguments(log, kwargs, error, match):
    with pytest.raises(error, match=match):
        log.scan_batches(**kwargs)


def test_none_means_the_default(log):
    scan = log.scan_batches(columns=None, body=None, max_records=None, max_bytes=None)
    assert scan.schema == log.scan_batches().schema
    assert [b.num_rows for b in scan] == [200]


def test_batch_boundaries_do_not_depend_on_the_columns(log):
    """max_bytes counts the bodies whether or not the body column is read: the same records
    make the same batches for any columns."""
    shapes = set()
    for columns in (ALL, ["offset"], [], ["body"]):
        for body in ("view", "binary"):
            scan = log.scan_batches(columns=columns, body=body, max_records=40, max_bytes=3000)
            shapes.add(tuple(b.num_rows for b in scan))
    assert len(shapes) == 1
    assert max(next(iter(shapes))) < 40  # max_bytes cut some batches


def test_bad_ranges(log):
    offs = rows(log)["offset"]
    with pytest.raises(InvalidOffsetError, match=str(offs[3] + 1)):
        log.scan_batches(offs[3] + 1)
    with pytest.raises(OffsetOutOfRangeError):
        log.scan_batches(-1)
    with pytest.raises(TypeError):
        log.scan_batches("0")


# ---------------------------------------------------------------------------------------------
# append_batch of Arrow input


def appended(log, offsets):
    return [bytes(log.read(o)) for o in offsets]


WORDS = ["a", "", "a body longer than twelve bytes", "été", "x" * 5000]


@pytest.mark.parametrize(
    "make",
    [
        lambda: pa.array([w.encode() for w in WORDS], pa.binary()),
        lambda: pa.array([w.encode() for w in WORDS], pa.large_binary()),
        lambda: pa.array([w.encode() for w in WORDS], pa.binary_view()),
        lambda: pa.array(WORDS, pa.string()),
        lambda: pa.array(WORDS, pa.large_string()),
        lambda: pa.array(WORDS, pa.string_view()),
    ],
    ids=["binary", "large_binary", "binary_view", "string", "large_string", "string_view"],
)
def test_append_every_binary_and_string_type(make_log, make):
    log = make_log(segment_size=16384)
    log.append(b"first")
    array = make()
    offsets = log.append_batch(array)
    assert isinstance(offsets, pa.Array) and offsets.type == pa.int64()
    offsets = offsets.to_pylist()
    assert offsets == [o for o, _ in log.scan(offsets[0])]
    assert appended(log, offsets) == [w.encode() for w in WORDS]
    # sliced: the slice's offset into the buffers is honoured
    sliced = log.append_batch(array.slice(2, 2)).to_pylist()
    assert appended(log, sliced) == [w.encode() for w in WORDS[2:4]]
    assert log.append_batch(array.slice(5, 0)).to_pylist() == []


def test_append_fixed_size_binary(make_log):
    log = make_log()
    array = pa.array([b"abc", b"def", b"ghi", b"jkl"], pa.binary(3))
    assert appended(log, log.append_batch(array).to_pylist()) == [b"abc", b"def", b"ghi", b"jkl"]
    assert appended(log, log.append_batch(array.slice(1, 2)).to_pylist()) == [b"def", b"ghi"]


def test_append_a_slice_of_a_long_array(make_log):
    log = make_log()
    data = [b"%d" % i * (i % 20) for i in range(20)]
    for t in (pa.binary(), pa.large_binary(), pa.binary_view()):
        got = appended(log, log.append_batch(pa.array(data, t).slice(3, 5)).to_pylist())
        assert got == data[3:8], t


def test_nulls_outside_a_slice_do_not_count(make_log):
    log = make_log()
    for t in (pa.binary(), pa.string(), pa.binary_view(), pa.binary(1)):
        array = pa.array([None, b"a", b"b", None], t)
        assert appended(log, log.append_batch(array.slice(1, 2)).to_pylist()) == [b"a", b"b"]
        with pytest.raises(ValueError, match=r"1 null element\(s\) \(the first at index 1\)"):
            log.append_batch(array.slice(2, 2))
    empty = log.append_batch(pa.chunked_array([], pa.binary()))
    assert empty.type == pa.int64() and len(empty) == 0


def test_append_chunked_arrays_and_polars(make_log):
    pl = pytest.importorskip("polars")
    log = make_log()
    chunked = pa.chunked_array([[b"a", b"bb"], [], [b"ccc" * 10]], pa.binary())
    assert appended(log, log.append_batch(chunked).to_pylist()) == [b"a", b"bb", b"ccc" * 10]
    sliced = pa.chunked_array([[b"a", b"bb"], [b"c", b"d"]]).slice(1, 2)
    assert appended(log, log.append_batch(sliced).to_pylist()) == [b"bb", b"c"]
    series = pl.Series("body", [b"x", b"y" * 40, b""])
    assert appended(log, log.append_batch(series).to_pylist()) == [b"x", b"y" * 40, b""]
    strings = pl.Series(["é", "long string value, longer than 12"])
    assert appended(log, log.append_batch(strings).to_pylist()) == [
        "é".encode(),
        b"long string value, longer than 12",
    ]


def test_the_offsets_returned_are_the_records_offsets(make_log):
    log = make_log()
    log.append_batch(bodies(10))
    before = log.max_offset
    arrow = log.append_batch(pa.array(bodies(30), pa.binary())).to_pylist()
    listed = log.append_batch(bodies(30))
    assert isinstance(listed, list)
    assert arrow == [o for o, _ in log.scan(before, listed[0])]
    assert arrow[0] == before
    assert listed == [o for o, _ in log.scan(listed[0])]


def test_offsets_false_returns_none_for_both_kinds(make_log):
    log = make_log()
    assert log.append_batch([b"a", b"b"], offsets=False) is None
    assert log.append_batch(pa.array([b"c", b"d"]), offsets=False) is None
    assert log.append_batch(pa.chunked_array([[b"e"]]), offsets=False) is None
    assert [bytes(b) for _, b in log.scan()] == [b"a", b"b", b"c", b"d", b"e"]


def test_an_empty_arrow_append_writes_nothing(make_log):
    log = make_log()
    out = log.append_batch(pa.array([], pa.binary()))
    assert out.type == pa.int64() and len(out) == 0
    assert log.max_offset == 0


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (
            lambda: pa.array([b"x", None, b"y", None]),
            ValueError,
            r"2 null element\(s\) \(the first at index 1\)",
        ),
        (
            lambda: pa.chunked_array([[b"ok"], [b"ok", None]]),
            ValueError,
            r"null element\(s\) \(the first at index 2\)",
        ),
        (lambda: pa.array([1, 2], pa.int64()), ValueError, "Int64 cannot.*binary, large_binary"),
        (lambda: pa.array([b"a"]).dictionary_encode(), ValueError, "cannot be appended"),
        (
            lambda: pa.table({"body": [b"a"], "x": [1]}),
            ValueError,
            r'field\(s\) \["x"\] that a record does not have',
        ),
        (lambda: pa.record_batch({"bodies": [b"a"]}), ValueError, r'field\(s\) \["bodies"\]'),
        (lambda: pa.array([b"ok", b"z" * 1001, b"ok"]), MessageTooLargeError, "1001"),
        (lambda: pa.chunked_array([[b"ok"], [b"z" * 1001]]), MessageTooLargeError, "1001"),
    ],
    ids=["null", "null-in-chunk", "int64", "dictionary", "table", "record-batch", "large", "lc"],
)
def test_a_refused_arrow_append_writes_nothing(make_log, make, error, match):
    log = make_log(max_message_size=1000)
    log.append_batch([b"before"])
    end = log.max_offset
    with pytest.raises(error, match=match):
        log.append_batch(make())
    with pytest.raises(error, match=match):
        log.append_batch(make(), offsets=False)
    assert log.max_offset == end
    assert [bytes(b) for _, b in log.scan()] == [b"before"]


def test_arrow_append_on_a_read_only_or_closed_log(make_log):
    log = make_log()
    log.append(b"x")
    ro = make_log(read_only=True)
    with pytest.raises(ReadOnlyError):
        ro.append_batch(pa.array([b"a"]))
    log.close()
    with pytest.raises(ClosedError):
        log.append_batch(pa.array([b"a"]))


def test_a_foreign_arrow_object_that_lies(make_log):
    class Liar:
        def __arrow_c_array__(self, requested_schema=None):
            return (1, 2)

    class NotACapsule:
        def __arrow_c_stream__(self, requested_schema=None):
            return "stream"

    log = make_log()
    with pytest.raises(TypeError, match=r"__arrow_c_array__ must return \(schema, array\)"):
        log.append_batch(Liar())
    with pytest.raises(TypeError, match="__arrow_c_stream__ must return a capsule"):
        log.append_batch(NotACapsule())
    assert log.max_offset == 0


# ---------------------------------------------------------------------------------------------
# to_arrow


def test_to_arrow_with_a_log(log):
    want = rows(log)
    table = rmqlog.to_arrow(log)
    assert table.schema == log.scan_batches().schema
    assert table.column("offset").to_pylist() == want["offset"]
    assert [bytes(b) for b in table.column("body").to_pylist()] == want["body"]
    assert not log.closed  # a log given stays open
    a, b = want["offset"][10], want["offset"][20]
    part = rmqlog.to_arrow(log, a, b, columns=["segment", "body"], body="binary")
    assert part.schema.names == ["segment", "body"]
    assert part.column("body").type == pa.binary()
    assert part.column("segment").to_pylist() == want["segment"][10:20]


def test_to_arrow_with_a_path_opens_read_only_and_closes(make_log, dirs):
    log = make_log()
    log.append_batch(bodies(200))
    want = rows(log)
    seg_paths = {s.path for s in log.segments()}
    # A writer holds the store: a writer's open would fail, a read-only one does not.
    table = rmqlog.to_arrow(dirs, columns=ALL)
    assert table.column("offset").to_pylist() == want["offset"]
    assert [bytes(b) for b in table.column("body").to_pylist()] == want["body"]
    assert table.column("segment").to_pylist() == want["segment"]
    log.close()
    del table
    gc.collect()

    def fds():
        out = set()
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(FileNotFoundError):  # the listing's own descriptor
                out.add(os.readlink(f"/proc/self/fd/{fd}"))
        return out

    def mapped():
        return {p for _, _, p in segment_maps() if p in seg_paths}

    assert not mapped()
    held = fds()
    meta = rmqlog.to_arrow([str(d) for d in dirs], columns=["offset", "timestamp"])
    assert meta.column("offset").to_pylist() == want["offset"]
    assert fds() == held  # the read-only log was closed: no file left open
    assert not mapped()  # and no map kept: no view needs one
    views = rmqlog.to_arrow(os.pathsep.join(str(d) for d in dirs))
    assert fds() == held
    assert mapped() == seg_paths  # the views keep their maps, past the close
    assert [bytes(b) for b in views.column("body").to_pylist()] == want["body"]
    del views
    gc.collect()
    assert not mapped()


def test_to_arrow_bad_source(tmp_path):
    with pytest.raises(rmqlog.CommitLogError):
        rmqlog.to_arrow(tmp_path / "no-store")
    with pytest.raises(rmqlog.StoreNotFoundError, match="no rmqlog store"):
        rmqlog.to_arrow(tmp_path / "no-store", columns=["x"])


# ---------------------------------------------------------------------------------------------
# a follower, threads


def test_a_read_only_follower_sees_later_records_after_refresh(make_log):
    writer = make_log()
    writer.append_batch(bodies(20))
    follower = make_log(read_only=True)
    n = lambda: sum(b.num_rows for b in follower.scan_batches())  # noqa: E731
    assert n() == 20
    writer.append_batch(pa.array(bodies(30, first=20), pa.binary()))
    assert n() == 20
    before = follower.scan_batches()
    assert follower.refresh() == writer.max_offset
    assert n() == 50
    assert sum(b.num_rows for b in before) == 20  # a scan's range is fixed when it is made
    table = rmqlog.to_arrow(follower, columns=["offset", "body"], body="binary")
    assert table.column("offset").to_pylist() == rows(writer)["offset"]


def test_two_threads_advancing_one_scan(make_log):
    log = make_log(segment_size=1 << 20)
    log.append_batch([b"%d" % i * 2000 for i in range(2000)])
    want = rows(log)["offset"]
    refused = 0
    for _ in range(5):
        scan = log.scan_batches(columns=["offset", "body"], body="binary", max_records=50)
        got, errors = [], []
        start = threading.Barrier(2)

        def run(scan=scan, got=got, errors=errors, start=start):
            start.wait()
            while True:
                try:
                    batch = next(scan)
                except StopIteration:
                    return
                except RuntimeError as e:
                    errors.append(str(e))
                    continue
                got.append(batch.column(0).to_pylist())

        threads = [threading.Thread(target=run) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(o for b in got for o in b) == want  # each record once, none lost
        assert all(len(b) == 50 for b in got)
        assert set(errors) <= {"this BatchScan is being advanced by another thread"}
        assert scan.position == scan.end
        refused += len(errors)
    assert refused > 0  # the threads did meet (they spin on next() while the other builds)


# ---------------------------------------------------------------------------------------------
# without pyarrow

HIDDEN = """
import sys

class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "pyarrow" or name.startswith("pyarrow."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Block())
import rmqlog
log = rmqlog.CommitLog(sys.argv[1], segment_size=4096)
print("appended", log.append_batch([b"a", b"bb"]))
scan = log.scan_batches()
capsule = scan.__arrow_c_stream__()
print("capsule", type(capsule).__name__, "arrow_array_stream" in repr(capsule))
for what, call in [
    ("iterate", lambda: next(scan)),
    ("schema", lambda: scan.schema),
    ("to_arrow", lambda: rmqlog.to_arrow(log)),
]:
    try:
        call()
        print(what, "no error")
    except ModuleNotFoundError as e:
        print(what, "rmqlog[arrow]" in str(e), str(e))
print("position", scan.position)  # the failed next() read nothing
import polars as pl  # reads the stream and appends without pyarrow

print("polars", pl.DataFrame(log.scan_batches())["body"].to_list())
print("offsets=False", log.append_batch(pl.Series([b"ccc"]), offsets=False), log.max_offset)
try:
    log.append_batch(pl.Series([b"d"]))
except ModuleNotFoundError as e:
    print("offsets", "offsets=False" in str(e), log.max_offset)
print("pyarrow" in sys.modules)
"""


def test_without_pyarrow(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(HIDDEN), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "appended [0, 33]"
    assert lines[1] == "capsule PyCapsule True"
    for line, what in zip(lines[2:5], ["iterate", "schema", "to_arrow"], strict=True):
        assert line.startswith(f"{what} True "), line
        assert "pip install 'rmqlog[arrow]'" in line
    assert lines[5:] == [
        "position 0",
        "polars [b'a', b'bb']",
        "offsets=False None 102",
        "offsets True 102",
        "False",
    ]


# ---------------------------------------------------------------------------------------------
# What a hostile user found


def deleted_maps(root):
    """Maps of deleted files under ``root`` (another test's leftovers in this process do not
    count)."""
    return sum("(deleted)" in path and path.startswith(str(root)) for _, _, path in segment_maps())


def test_an_exhausted_scan_holds_no_deleted_segment(make_log, tmp_path):
    log = make_log()
    for _ in range(200):
        log.append(b"x" * 50)
    last = log.segments()[-1].start_offset
    scan = log.scan_batches(columns=["offset"], body="binary")
    assert sum(b.num_rows for b in scan) == 200  # maps every segment
    log.truncate_before(last)
    gc.collect()
    assert deleted_maps(tmp_path) == 0, "a finished scan (whose batches hold no map) kept maps"
    scan = log.scan_batches(last)  # a scan not yet run holds its snapshot until dropped
    del scan
    gc.collect()
    assert deleted_maps(tmp_path) == 0


def test_one_stream_read_from_two_threads_never_duplicates_or_reports_corruption(make_log):
    log = make_log(segment_size=1 << 16)
    n = 50_000
    log.append_batch(pa.array([b"r%06d" % i for i in range(n)]))
    for _ in range(5):
        reader = pa.RecordBatchReader.from_stream(log.scan_batches(max_records=50))
        got, errors = [], []

        def read(reader=reader, got=got, errors=errors):
            while True:
                try:
                    b = reader.read_next_batch()
                except StopIteration:
                    return
                except Exception as exc:
                    errors.append(str(exc))
                    return
                got.extend(b["offset"].to_pylist())

        threads = [threading.Thread(target=read) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(got) == len(set(got)), "a record was read twice"
        assert not any("corruption" in e for e in errors), errors
        for e in errors:
            assert "being read by another thread" in e, e
        if not errors:
            assert len(got) == n


def test_a_null_is_named_by_its_index_in_the_whole_chunked_array(make_log):
    log = make_log()
    with pytest.raises(ValueError, match=r"1 null element\(s\) \(the first at index 4\)"):
        log.append_batch(pa.chunked_array([[b"a", b"b", b"c"], [b"d", None]]))
    assert log.max_offset == 0


@pytest.mark.parametrize("bad", [0, None, "yes"])
def test_offsets_must_be_a_bool_and_the_error_names_it(make_log, bad):
    log = make_log()
    if bad is None:  # None means the default: offsets are returned
        assert log.append_batch(pa.array([b"x"]), offsets=bad).to_pylist() == [0]
        return
    with pytest.raises(TypeError, match="offsets must be a bool"):
        log.append_batch(pa.array([b"x"]), offsets=bad)
    with pytest.raises(TypeError, match="offsets must be a bool"):
        log.append_batch([b"x"], offsets=bad)
    assert log.max_offset == 0
