"""The public API of rmqlog.CommitLog, call by call."""

from __future__ import annotations

import array
import gc
import itertools
import os
import random
import threading
import time
from pathlib import Path

import pytest

import rmqlog
from rmqlog import (
    HEADER_LEN,
    CommitLog,
    InvalidOffsetError,
    ReadOnlyError,
    Record,
    ScanIterator,
    Segment,
)

SEG = 4096


def model_offsets(sizes, segment_size=SEG, start=0):
    """Offsets sequential appends of bodies of ``sizes`` get in a fresh log (rolls included)."""
    seg_end = start + segment_size
    pos = start
    out = []
    for n in sizes:
        rec = HEADER_LEN + n
        if pos + rec > seg_end:
            pos = seg_end
            seg_end += segment_size
        out.append(pos)
        pos += rec
    return out


def walk(log):
    """Offsets found by following ``next_offset`` from ``min_offset`` up to ``max_offset``."""
    out = []
    off = log.min_offset
    while off < log.max_offset:
        out.append(off)
        off = log.read_record(off).next_offset
    return out, off


# ---------------------------------------------------------------------------------------------
# append / append_batch


def test_module_exports():
    assert HEADER_LEN == 32
    assert isinstance(rmqlog.__version__, str) and rmqlog.__version__
    assert set(rmqlog.__all__) <= set(dir(rmqlog))


def test_append_offsets_follow_header_and_body_lengths(make_log):
    log = make_log()
    rng = random.Random(7)
    sizes = [rng.randrange(0, 1500) for _ in range(80)]
    offsets = [log.append(b"x" * n) for n in sizes]
    assert offsets[0] == 0
    assert offsets == model_offsets(sizes)
    rolled = 0
    for (prev, n), (nxt, _) in itertools.pairwise(zip(offsets, sizes, strict=True)):
        if nxt != prev + HEADER_LEN + n:
            # a roll: the next record did not fit in the rest of the segment
            rolled += 1
            assert nxt % SEG == 0 and nxt > prev
    assert rolled >= 5
    last = offsets[-1] + HEADER_LEN + sizes[-1]
    assert log.max_offset == last


def test_append_accepts_bytes_like_objects(make_log):
    log = make_log()
    cases = [
        (b"plain bytes", b"plain bytes"),
        (bytearray(b"a bytearray"), b"a bytearray"),
        (memoryview(b"a memoryview"), b"a memoryview"),
        (memoryview(b"abcdef")[::2], b"ace"),
        (memoryview(b"0123456789")[2:6], b"2345"),
        (array.array("i", [1, 2, 3]), array.array("i", [1, 2, 3]).tobytes()),
        (b"", b""),
    ]
    offsets = [log.append(obj) for obj, _ in cases]
    assert offsets == model_offsets([len(e) for _, e in cases])
    for off, (_, expected) in zip(offsets, cases, strict=True):
        assert bytes(log.read(off)) == expected
    assert log.read_record(offsets[-1]).next_offset == log.max_offset


def test_append_copies_mutable_buffers(make_log):
    log = make_log()
    buf = bytearray(b"before")
    off = log.append(buf)
    buf[:] = b"AFTER!"
    assert bytes(log.read(off)) == b"before"


def test_empty_body_is_a_record(make_log):
    log = make_log()
    a = log.append(b"")
    b = log.append(b"")
    assert (a, b) == (0, HEADER_LEN)
    assert bytes(log.read(a)) == b""
    assert log.read_record(a).next_offset == b
    assert [o for o, _ in log.scan()] == [a, b]


def test_append_batch_matches_sequential_appends(make_log, tmp_path, body):
    rng = random.Random(3)
    bodies = [body(i, rng.randrange(0, 1200)) for i in range(60)]
    seq = CommitLog(tmp_path / "seq", segment_size=SEG)
    try:
        expected = [seq.append(b) for b in bodies]
    finally:
        seq.close()
    log = make_log()
    offsets = log.append_batch(bodies)
    assert isinstance(offsets, list)
    assert offsets == expected == model_offsets([len(b) for b in bodies])
    assert [bytes(log.read(o)) for o in offsets] == bodies


def test_append_batch_continues_after_appends_and_accepts_generators(make_log, body):
    log = make_log()
    first = log.append(body(0, 500))
    gen_offsets = log.append_batch(body(i, 700) for i in range(1, 12))
    assert gen_offsets == model_offsets([500] + [700] * 11)[1:]
    assert first == 0
    mixed = log.append_batch([b"a", bytearray(b"bb"), memoryview(b"ccc")])
    assert [bytes(log.read(o)) for o in mixed] == [b"a", b"bb", b"ccc"]
    assert mixed[0] == log.read_record(gen_offsets[-1]).next_offset


def test_append_batch_empty_changes_nothing(make_log, body):
    log = make_log()
    assert log.append_batch([]) == []
    assert log.max_offset == 0 and log.segments() == []
    log.append(body(0))
    before = (log.max_offset, log.segments())
    assert log.append_batch([]) == []
    assert log.append_batch(iter(())) == []
    assert (log.max_offset, log.segments()) == before


# ---------------------------------------------------------------------------------------------
# read / read_record


def test_read_returns_read_only_memoryview(make_log):
    log = make_log()
    off = log.append(b"hello world")
    view = log.read(off)
    assert isinstance(view, memoryview)
    assert view.readonly
    assert bytes(view) == b"hello world"
    assert view == b"hello world"
    with pytest.raises(TypeError):
        view[0] = 0x41
    with pytest.raises(TypeError):
        view[0:5] = b"HELLO"
    assert bytes(log.read(off)) == b"hello world"
    assert bytes(view[6:]) == b"world"
    assert bytes(view[::2]) == b"hlowrd"
    assert view[0] == ord("h")


def test_read_across_segment_rolls(make_log, body):
    log = make_log()
    bodies = [body(i, 900 + 37 * (i % 7)) for i in range(40)]
    offsets = [log.append(b) for b in bodies]
    assert len(log.segments()) >= 8
    for off, b in zip(offsets, bodies, strict=True):
        assert bytes(log.read(off)) == b
    # backwards and random order too
    order = list(range(len(offsets)))
    random.Random(1).shuffle(order)
    for i in order:
        assert bytes(log.read(offsets[i])) == bodies[i]


def test_views_survive_close_delete_and_gc(dirs, body):
    log = CommitLog(dirs, segment_size=SEG)
    bodies = [body(i, 1500) for i in range(10)]
    offsets = [log.append(b) for b in bodies]
    views = [log.read(o) for o in offsets]
    slices = [v[10:20] for v in views]
    record = log.read_record(offsets[3])
    scanned = list(log.scan())
    files = [s.path for s in log.segments()]
    log.close()
    assert [bytes(v) for v in views] == bodies
    del log
    gc.collect()
    assert [bytes(v) for v in views] == bodies
    assert [bytes(s) for s in slices] == [b[10:20] for b in bodies]
    assert bytes(record.body) == bodies[3]
    assert [(o, bytes(v)) for o, v in scanned] == list(zip(offsets, bodies, strict=True))
    for f in files:
        os.remove(f)
    gc.collect()
    assert [bytes(v) for v in views] == bodies
    assert bytes(views[-1][5:15]) == bodies[-1][5:15]


def test_read_record_fields(make_log, body):
    log = make_log()
    before = time.time() * 1000
    off = log.append(body(0, 64))
    after = time.time() * 1000
    rec = log.read_record(off)
    assert isinstance(rec, Record)
    assert rec.offset == off == 0
    assert rec.next_offset == HEADER_LEN + 64 == log.max_offset
    assert isinstance(rec.body, memoryview) and rec.body.readonly
    assert bytes(rec.body) == body(0, 64)
    assert before - 1000 <= rec.timestamp_ms <= after + 1000


def test_next_offset_chains_through_the_whole_log(make_log, body):
    log = make_log()
    rng = random.Random(11)
    offsets = [log.append(body(i, rng.randrange(0, 1800))) for i in range(120)]
    walked, end = walk(log)
    assert walked == offsets == [o for o, _ in log.scan()]
    assert end == log.max_offset
    assert log.read_record(offsets[-1]).next_offset == log.max_offset


def test_last_record_of_sealed_segment_points_to_next_segment(make_log, body):
    log = make_log()
    offsets = [log.append(body(i, 1500)) for i in range(9)]  # 2 records per segment
    segs = log.segments()
    assert len(segs) >= 4
    starts = {s.start_offset for s in segs}
    lasts = 0
    for a, b in itertools.pairwise(offsets):
        if b in starts and b != 0:
            rec = log.read_record(a)
            assert rec.next_offset == b
            assert rec.next_offset != a + HEADER_LEN + 1500
            lasts += 1
    assert lasts == len(segs) - 1


def test_next_offset_of_last_record_equals_max_offset_when_segment_nearly_full(make_log):
    # The last record leaves fewer bytes than a filler (8) at the end of its segment.
    log = make_log()
    off = log.append(b"z" * (SEG - HEADER_LEN - 4))
    rec = log.read_record(off)
    walked, _ = walk(log)
    assert walked == [off]
    assert rec.next_offset == log.max_offset, (rec.next_offset, log.max_offset)
    nxt = log.append(b"q")
    assert nxt == SEG
    assert log.read_record(off).next_offset == nxt


def test_timestamps_are_non_decreasing_and_current(make_log, body):
    log = make_log()
    offsets = []
    for g in range(5):
        offsets += log.append_batch([body(i, 300) for i in range(10)])
        offsets.append(log.append(body(g, 10)))
        time.sleep(0.002)
    now = time.time() * 1000
    stamps = [log.read_record(o).timestamp_ms for o in offsets]
    assert stamps == sorted(stamps)
    assert stamps[-1] > stamps[0]
    assert all(now - 10_000 <= t <= now + 1000 for t in stamps)


# ---------------------------------------------------------------------------------------------
# scan / iter


def test_scan_yields_offsets_and_bodies_in_order(make_log, body):
    log = make_log()
    bodies = [body(i, 700) for i in range(30)]
    offsets = log.append_batch(bodies)
    it = log.scan()
    assert isinstance(it, ScanIterator)
    assert iter(it) is it
    got = list(it)
    assert [o for o, _ in got] == offsets
    assert all(isinstance(v, memoryview) and v.readonly for _, v in got)
    assert [bytes(v) for _, v in got] == bodies
    assert next(it, None) is None


def test_scan_start_end_are_half_open(make_log, body):
    log = make_log()
    offsets = log.append_batch([body(i, 600) for i in range(25)])
    assert [o for o, _ in log.scan(start=offsets[3])] == offsets[3:]
    assert [o for o, _ in log.scan(end=offsets[5])] == offsets[:5]
    assert [o for o, _ in log.scan(offsets[2], offsets[9])] == offsets[2:9]
    # end is exclusive on the record start: one byte past a start includes that record
    assert [o for o, _ in log.scan(offsets[2], offsets[9] + 1)] == offsets[2:10]
    assert [o for o, _ in log.scan(offsets[2], offsets[2])] == []
    assert [o for o, _ in log.scan(offsets[5], offsets[2])] == []
    assert [o for o, _ in log.scan(end=log.max_offset + 10_000)] == offsets
    assert [o for o, _ in log.scan(start=offsets[-1])] == [offsets[-1]]
    assert list(log.scan(start=log.max_offset)) == []


def test_iter_equals_scan(make_log, body):
    log = make_log()
    log.append_batch([body(i, 450) for i in range(30)])
    a = [(o, bytes(v)) for o, v in log]
    b = [(o, bytes(v)) for o, v in log.scan()]
    assert a == b and len(a) == 30


def test_scan_stops_at_max_offset_of_the_call(make_log, body):
    log = make_log()
    offsets = log.append_batch([body(i, 500) for i in range(10)])
    it = log.scan()
    first = next(it)
    later = [log.append(body(100 + i, 500)) for i in range(10)]
    rest = list(it)
    assert [first[0]] + [o for o, _ in rest] == offsets
    assert [o for o, _ in log.scan()] == offsets + later


def test_scan_with_start_inside_a_record_is_invalid(make_log, body):
    log = make_log()
    offsets = log.append_batch([body(i, 100) for i in range(5)])
    for bad in (offsets[0] + 1, offsets[2] + HEADER_LEN, offsets[4] - 1):
        with pytest.raises(InvalidOffsetError):
            log.scan(start=bad)


def test_scan_resumes_from_an_earlier_max_offset_after_a_roll(make_log, body):
    # A tailing consumer remembers max_offset, then scans from it once the writer moved on.
    log = make_log()
    first = log.append(body(0, 3000))
    pos = log.max_offset
    assert list(log.scan(start=pos)) == []
    later = [log.append(body(i, 1500)) for i in range(1, 4)]
    assert later[0] == SEG  # rolled: the old end is now in the sealed segment's filler
    assert [o for o, _ in log.scan(start=first)] == [first, *later]
    assert [o for o, _ in log.scan(start=pos)] == later


# ---------------------------------------------------------------------------------------------
# offset_for_timestamp


def test_offset_for_timestamp(make_log, body):
    log = make_log()
    offsets = []
    for g in range(5):
        offsets += [log.append(body(g * 8 + i, 600)) for i in range(8)]
        time.sleep(0.01)
    assert len(log.segments()) >= 6
    stamps = [log.read_record(o).timestamp_ms for o in offsets]
    for g in range(1, 5):
        assert stamps[8 * g] > stamps[8 * g - 1]

    def expected(target):
        return next(
            (o for o, t in zip(offsets, stamps, strict=True) if t >= target), log.max_offset
        )

    targets = sorted({*stamps, *(t + 1 for t in stamps), *(t - 1 for t in stamps)})
    for target in targets:
        assert log.offset_for_timestamp(target) == expected(target), target
    for g in range(5):
        assert log.offset_for_timestamp(stamps[8 * g]) == offsets[8 * g]
    assert log.offset_for_timestamp(stamps[-1] + 1) == log.max_offset
    assert log.offset_for_timestamp(2**62) == log.max_offset
    assert log.offset_for_timestamp(0) == log.min_offset == 0
    assert log.offset_for_timestamp(-5) == log.min_offset


def test_offset_for_timestamp_on_empty_log(make_log):
    log = make_log()
    assert log.offset_for_timestamp(0) == 0
    assert log.offset_for_timestamp(int(time.time() * 1000)) == 0


# ---------------------------------------------------------------------------------------------
# offsets, flush


def test_empty_log_offsets(make_log):
    log = make_log()
    assert (log.min_offset, log.max_offset) == (0, 0)
    assert log.flushed_offset == 0
    assert log.segments() == []
    assert list(log.scan()) == []
    assert log.flush() == 0


def test_flush_returns_max_offset(make_log, body):
    log = make_log(flush="none")
    for i in range(20):
        log.append(body(i, 700))
        assert 0 <= log.flushed_offset <= log.max_offset
    assert log.flush() == log.max_offset
    assert log.flushed_offset == log.max_offset
    log.append(body(99, 10))
    assert log.flushed_offset < log.max_offset
    assert log.flush() == log.max_offset == log.flushed_offset


# ---------------------------------------------------------------------------------------------
# segments and placement


def test_segments_are_named_sized_and_contiguous(make_log, dirs, body):
    log = make_log()
    for i in range(30):
        log.append(body(i, 1000))
    segs = log.segments()
    assert len(segs) == 10
    assert all(isinstance(s, Segment) for s in segs)
    assert segs[0].start_offset == log.min_offset == 0
    for s in segs:
        assert os.path.basename(s.path) == f"{s.start_offset:020d}"
        assert os.path.isabs(s.path)
        assert s.size == SEG == os.path.getsize(s.path)
        assert Path(s.path).parent == dirs[(s.start_offset // SEG) % 3]
    for a, b in itertools.pairwise(segs):
        assert b.start_offset == a.start_offset + a.size
        assert a.written == a.size  # sealed
    assert segs[-1].written == log.max_offset - segs[-1].start_offset
    assert segs[-1].start_offset <= log.max_offset <= segs[-1].start_offset + segs[-1].size
    assert log.segments() == segs


@pytest.mark.parametrize("ndirs", [1, 2, 3, 4])
def test_round_robin_placement_spreads_evenly(make_log, tmp_path, body, ndirs):
    ds = [tmp_path / f"r{i}" for i in range(ndirs)]
    log = make_log(ds)
    while len(log.segments()) < 3 * ndirs:
        log.append(body(0, 2000))
    segs = log.segments()
    assert len(segs) == 3 * ndirs
    for s in segs:
        assert Path(s.path).parent == ds[(s.start_offset // SEG) % ndirs]
    for d in ds:
        on_disk = sorted(n for n in os.listdir(d) if n.isdigit())
        assert len(on_disk) == 3
        assert on_disk == sorted(os.path.basename(s.path) for s in segs if Path(s.path).parent == d)


# ---------------------------------------------------------------------------------------------
# paths


def test_paths_as_pathsep_string(make_log, dirs):
    log = make_log(os.pathsep.join(str(d) for d in dirs))
    assert log.paths == [str(d) for d in dirs]
    assert all(d.is_dir() for d in dirs)


def test_paths_as_single_path(make_log, tmp_path, body):
    log = make_log(tmp_path / "single")
    assert log.paths == [str(tmp_path / "single")]
    for i in range(5):
        log.append(body(i, 2000))
    assert {Path(s.path).parent for s in log.segments()} == {tmp_path / "single"}


def test_paths_as_list_of_path_and_tuple_of_str(make_log, tmp_path, dirs):
    log = make_log(list(dirs))
    assert log.paths == [str(d) for d in dirs]
    log.close()
    other = [str(tmp_path / "t0"), str(tmp_path / "t1")]
    log2 = make_log(tuple(other))
    assert log2.paths == other


def test_relative_paths_become_absolute(make_log, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    log = make_log(["rel0", Path("rel1")])
    assert log.paths == [str(tmp_path / "rel0"), str(tmp_path / "rel1")]
    assert all(os.path.isabs(p) for p in log.paths)


# ---------------------------------------------------------------------------------------------
# close, context manager, repr


def test_context_manager_closes(make_log, body):
    with make_log() as log:
        assert not log.closed
        off = log.append(body(0))
    assert log.closed
    log2 = make_log()
    assert bytes(log2.read(off)) == body(0)


def test_context_manager_closes_on_error_and_propagates(make_log):
    log = make_log()
    with pytest.raises(KeyError), log:
        log.append(b"x")
        raise KeyError("boom")
    assert log.closed


def _open_files_under(root: Path) -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(root)):
            out.append(target)
    with open("/proc/self/maps") as maps:
        out += [line.split()[-1] for line in maps if str(root) in line]
    return out


@pytest.mark.parametrize("flush", ["none", "async", "sync"])
def test_close_leaves_no_file_open_or_mapped(tmp_path, flush):
    """Once closed (and no view is held), nothing of the store stays open: the directories can
    be deleted and their filesystem unmounted."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd and /proc/self/maps (Linux)")
    paths = [tmp_path / "a", tmp_path / "b"]
    log = CommitLog(paths, segment_size=64 * 1024, flush=flush)
    offs = [log.append(bytes([i]) * size) for i, size in enumerate([100, 20_000, 40_000] * 4)]
    assert len(log.segments()) > 2
    for off in offs[:3]:
        log.read(off)
    list(log.scan())
    assert _open_files_under(tmp_path), "an open log holds its files"
    log.close()
    gc.collect()
    assert _open_files_under(tmp_path) == []


def test_close_twice(make_log):
    log = make_log()
    log.append(b"abc")
    assert log.closed is False
    assert log.close() is None
    assert log.closed is True
    log.close()
    assert log.closed is True


def test_reprs(make_log, dirs, body):
    log = make_log()
    off = log.append(body(0, 10))
    log.append(body(1, 20))
    r = repr(log)
    assert r.startswith("<CommitLog")
    assert str(dirs[0]) in r
    assert f"max_offset={log.max_offset}" in r
    assert "min_offset=0" in r
    assert "segments=1" in r
    rec = log.read_record(off)
    rr = repr(rec)
    assert rr.startswith("Record(")
    for field in (f"offset={off}", f"timestamp_ms={rec.timestamp_ms}", "size=10"):
        assert field in rr
    assert f"next_offset={rec.next_offset}" in rr
    seg = log.segments()[0]
    sr = repr(seg)
    assert sr.startswith("Segment(")
    for field in ("start_offset=0", seg.path, f"size={SEG}", f"written={seg.written}"):
        assert field in sr
    log.close()
    assert "closed" in repr(log)
    reader = make_log([dirs[0]], read_only=True)
    assert "read_only" in repr(reader)


# ---------------------------------------------------------------------------------------------
# reopen


def test_reopen_after_clean_close(make_log, body):
    log = make_log()
    rng = random.Random(5)
    bodies = [body(i, rng.randrange(0, 1500)) for i in range(50)]
    offsets = [log.append(b) for b in bodies]
    end = log.max_offset
    stamps = [log.read_record(o).timestamp_ms for o in offsets]
    segs = log.segments()
    log.close()

    log2 = make_log()
    assert log2.max_offset == end
    assert log2.min_offset == 0
    assert log2.segments() == segs
    assert [(o, bytes(v)) for o, v in log2.scan()] == list(zip(offsets, bodies, strict=True))
    assert [log2.read_record(o).timestamp_ms for o in offsets] == stamps
    nxt = log2.append(b"after reopen")
    assert nxt == end
    assert log2.read_record(nxt).timestamp_ms >= stamps[-1]
    assert log2.read_record(offsets[-1]).next_offset == nxt


def test_reopen_with_other_segment_sizes(make_log, body):
    log = make_log(segment_size=4096)
    old = {log.append(body(i, 1000)): body(i, 1000) for i in range(12)}
    assert len(log.segments()) == 4
    log.close()

    log2 = make_log(segment_size=12288)
    for off, b in old.items():
        assert bytes(log2.read(off)) == b
    new = {log2.append(body(100 + i, 1000)): body(100 + i, 1000) for i in range(30)}
    segs = log2.segments()
    assert [s.size for s in segs[:4]] == [4096] * 4
    assert len(segs) >= 6
    assert all(s.size == 12288 for s in segs[4:])
    for s in segs:
        assert os.path.getsize(s.path) == s.size
    for a, b in itertools.pairwise(segs):
        assert b.start_offset == a.start_offset + a.size
    both = old | new
    assert [(o, bytes(v)) for o, v in log2.scan()] == list(both.items())
    assert walk(log2)[0] == list(both)

    # The O(1) guess (offset // 12288) misses the old 4096-byte segments after the first.
    first_seg_off = min(old)
    before = log2._fallback_lookups
    log2.read(first_seg_off)
    assert log2._fallback_lookups == before
    in_old = [o for o in old if 4096 <= o < 16384]
    for o in in_old:
        log2.read(o)
    assert log2._fallback_lookups >= before + len(in_old)
    log2.close()

    log3 = make_log(segment_size=8192)
    assert [(o, bytes(v)) for o, v in log3.scan()] == list(both.items())
    more = log3.append_batch([body(500 + i, 3000) for i in range(6)])
    sizes = [s.size for s in log3.segments()]
    assert sizes[:4] == [4096] * 4
    assert 12288 in sizes and sizes[-1] == 8192
    for i, o in enumerate(more):
        assert bytes(log3.read(o)) == body(500 + i, 3000)
    for o, b in both.items():
        assert bytes(log3.read(o)) == b


# ---------------------------------------------------------------------------------------------
# threads


def test_concurrent_appends_and_reads(make_log):
    log = make_log(segment_size=8192)
    n_writers, per_writer = 4, 500
    results = {}
    errors = []
    done = threading.Event()
    start = threading.Barrier(n_writers + 2)

    def writer(t):
        try:
            start.wait()
            results[t] = [log.append(f"t{t}-{i}".encode()) for i in range(per_writer)]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    def reader():
        try:
            start.wait()
            rounds = 0
            while not done.is_set() or rounds < 2:
                seen = 0
                for off, view in log.scan():
                    assert bytes(view[:1]) == b"t"
                    assert bytes(log.read(off)) == bytes(view)
                    seen += 1
                assert seen * 10 <= log.max_offset
                rounds += 1
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(n_writers)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads[:n_writers]:
        th.join(60)
    done.set()
    for th in threads[n_writers:]:
        th.join(60)
    assert not any(th.is_alive() for th in threads)
    assert errors == []
    all_offsets = [o for t in range(n_writers) for o in results[t]]
    assert len(all_offsets) == len(set(all_offsets)) == n_writers * per_writer
    for t in range(n_writers):
        assert results[t] == sorted(results[t])  # each thread's appends in order
        for i, off in enumerate(results[t]):
            assert bytes(log.read(off)) == f"t{t}-{i}".encode()
    assert sorted(all_offsets) == [o for o, _ in log.scan()]


# ---------------------------------------------------------------------------------------------
# flush modes


@pytest.mark.parametrize("mode", ["sync", "none", "async"])
def test_flush_modes(make_log, body, mode):
    log = make_log(flush=mode, flush_interval_ms=20)
    offsets = []
    for i in range(25):
        off = log.append(body(i, 500))
        offsets.append(off)
        if mode == "sync":
            assert log.flushed_offset >= off + HEADER_LEN + 500
    offsets += log.append_batch([body(100 + i, 500) for i in range(10)])
    if mode == "sync":
        assert log.flushed_offset == log.max_offset
    if mode == "none":
        time.sleep(0.1)  # five flush intervals: a background flush, if there were one, ran
        assert log.flushed_offset == 0  # nothing is synced before flush() or close()
    if mode == "async":
        deadline = time.monotonic() + 5
        while log.flushed_offset < log.max_offset and time.monotonic() < deadline:
            time.sleep(0.01)
        assert log.flushed_offset == log.max_offset
    expected = [body(i, 500) for i in range(25)] + [body(100 + i, 500) for i in range(10)]
    assert [bytes(log.read(o)) for o in offsets] == expected
    end = log.max_offset
    log.close()
    log2 = make_log(flush=mode)
    assert log2.max_offset == end
    assert [bytes(log2.read(o)) for o in offsets] == expected
    assert log2.append(b"more") == end


# ---------------------------------------------------------------------------------------------
# read-only


def test_read_only_finds_all_directories_from_one(make_log, dirs, body):
    writer = make_log()
    bodies = [body(i, 900) for i in range(20)]
    offsets = writer.append_batch(bodies)
    assert {Path(s.path).parent for s in writer.segments()} == set(dirs)
    writer.flush()

    reader = make_log([dirs[1]], read_only=True)
    assert reader.read_only and not writer.read_only
    assert sorted(reader.paths) == sorted(str(d) for d in dirs)
    assert reader.max_offset == writer.max_offset
    assert reader.min_offset == 0
    assert [s.start_offset for s in reader.segments()] == [
        s.start_offset for s in writer.segments()
    ]
    assert [(o, bytes(v)) for o, v in reader.scan()] == list(zip(offsets, bodies, strict=True))
    end = writer.max_offset
    writer.close()

    reader2 = make_log([dirs[2]], read_only=True)
    assert reader2.max_offset == end
    assert [bytes(reader2.read(o)) for o in offsets] == bodies


def test_read_only_segments_report_written(make_log, dirs, body):
    writer = make_log()
    writer.append_batch([body(i, 900) for i in range(20)])
    writer.flush()  # the writer stays open: the store's metadata is "not clean"
    reader = make_log([dirs[0]], read_only=True)
    assert reader.segments() == writer.segments()
    segs = reader.segments()
    assert all(s.written == s.size for s in segs[:-1])
    assert segs[-1].written == reader.max_offset - segs[-1].start_offset


def test_read_only_refuses_writes(make_log, dirs, body):
    writer = make_log()
    writer.append(body(0))
    writer.close()
    reader = make_log([dirs[0]], read_only=True)
    before = reader.max_offset
    with pytest.raises(ReadOnlyError):
        reader.append(b"x")
    with pytest.raises(ReadOnlyError):
        reader.append_batch([b"x", b"y"])
    with pytest.raises(ReadOnlyError):
        reader.append_batch([])
    assert reader.max_offset == before
    assert bytes(reader.read(0)) == body(0)
    assert reader.flush() == reader.flushed_offset
    assert reader.flushed_offset <= reader.max_offset


def test_read_only_refresh_sees_live_writer(make_log, dirs, body):
    writer = make_log()
    first = writer.append_batch([body(i, 800) for i in range(5)])
    writer.flush()
    reader = make_log([dirs[0]], read_only=True)
    assert reader.max_offset == writer.max_offset
    seen = [o for o, _ in reader.scan()]
    assert seen == first

    later = writer.append_batch([body(100 + i, 800) for i in range(15)])
    writer.flush()
    assert reader.max_offset == first[-1] + HEADER_LEN + 800  # not yet refreshed
    assert reader.refresh() == writer.max_offset
    assert reader.max_offset == writer.max_offset
    assert len(reader.segments()) == len(writer.segments())
    for i, o in enumerate(later):
        assert bytes(reader.read(o)) == body(100 + i, 800)
    assert [o for o, _ in reader.scan(start=later[0])] == later
    # nothing new: refresh is stable
    assert reader.refresh() == writer.max_offset
    # a writer's refresh just reports max_offset
    assert writer.refresh() == writer.max_offset
