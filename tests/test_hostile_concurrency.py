"""Regressions of what a hostile user found in the concurrency work (issue 12): a close racing a
move, retention_bytes measured in bytes in use, forced cleaning on a disk full of other programs'
files, out-of-range ints to move_segment and rebalance, names past 2^64, and segments() during a
roll."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import pytest

from rmqlog import (
    ClosedError,
    CommitLog,
    CorruptionError,
    OffsetOutOfRangeError,
)


def _store_state(dirs: list[Path]) -> dict[str, tuple[int, str]]:
    """Every file of the store: its size and a digest of its bytes."""
    out = {}
    for d in dirs:
        for f in sorted(d.iterdir()):
            if f.is_file() and f.name != "rmqlog.lock":
                out[str(f)] = (f.stat().st_size, hashlib.sha256(f.read_bytes()).hexdigest())
    return out


def test_nothing_of_a_closed_log_is_written_after_close_returns(tmp_path):
    """A close racing a move of a 64 MiB segment: whichever finishes first, once close() returns
    no file of the store changes, the move either completed or left no copy, and the store
    reopens with every record (the deterministic version: tests/interleavings.rs)."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    log = CommitLog(dirs, segment_size=64 << 20, clean_interval_ms=0, flush="none")
    body = os.urandom(1 << 20)
    offsets = []
    while len(log.segments()) < 2:
        offsets.append(log.append(body))
    seg = log.segments()[0]
    dest = dirs[1] if Path(seg.path).parent == dirs[0] else dirs[0]
    outcome: dict[str, object] = {}

    def move() -> None:
        try:
            log.move_segment(seg.start_offset, dest)
            outcome["move"] = "moved"
        except ClosedError:
            outcome["move"] = "closed"

    mover = threading.Thread(target=move)
    mover.start()
    time.sleep(0.005)
    log.close()
    after_close = _store_state(dirs)
    mover.join()
    assert _store_state(dirs) == after_close, "the closed log wrote after close() returned"
    name = f"{seg.start_offset:020d}"
    copies = [d for d in dirs if (d / name).exists()]
    assert copies == ([dest] if outcome["move"] == "moved" else [Path(seg.path).parent])
    assert not (dest / f"{name}.tmp").exists()
    with CommitLog(dirs, segment_size=64 << 20, clean_interval_ms=0) as again:
        for off in offsets:
            assert bytes(again.read(off)) == body
        assert again.verify() == []


def test_retention_bytes_counts_the_bytes_in_use(tmp_path):
    """Two sealed 8 KiB segments and an active one holding 1 KiB: deleting the first would leave
    9 KiB of the log, below retention_bytes=12 KiB (counting the active segment's preallocated
    8 KiB, as before, it went)."""
    log = CommitLog(
        tmp_path / "d",
        segment_size=8192,
        retention_hours=None,
        retention_bytes=12288,
        clean_interval_ms=0,
    )
    while len(log.segments()) < 3:
        log.append(b"x" * 1000)
    assert log.max_offset - log.min_offset < 8192 * 2 + 4096
    assert log.clean(force=True) == 0
    assert log.max_offset - log.min_offset >= 12288
    log.close()


def test_other_programs_files_on_one_disk_delete_nothing_elsewhere(mnt):
    """Three 2 MiB disks; another program fills one over force_clean_ratio. The log's two
    segments there could not bring it back under the ratio, so forced cleaning deletes nothing
    (before: 5 unexpired segments, 3 of them on the healthy disks)."""
    dirs = [mnt.tmpfs(f"t{i}", 2 << 20) / "store" for i in range(3)]
    log = mnt.log(
        dirs,
        segment_size=64 << 10,
        retention_hours=1000.0,
        delete_hours=None,
        clean_interval_ms=0,
        force_clean_ratio=0.8,
        max_used_ratio=0.5,
    )
    while len(log.segments()) < 7:
        log.append(b"x" * 1000)
    (dirs[1].parent / "junk").write_bytes(bytes(1700 << 10))
    before = [s.start_offset for s in log.segments()]
    assert log.clean(force=True) == 0
    assert [s.start_offset for s in log.segments()] == before


@pytest.mark.parametrize("start", [-1, -(2**70), 2**64, 2**200])
def test_move_segment_of_an_int_out_of_range(tmp_path, start):
    dirs = [tmp_path / "a", tmp_path / "b"]
    with CommitLog(dirs, segment_size=4096, clean_interval_ms=0) as log:
        while len(log.segments()) < 3:
            log.append(b"x" * 1000)
        with pytest.raises(OffsetOutOfRangeError):
            log.move_segment(start, dirs[1])


@pytest.mark.parametrize("max_bytes", [-1, 2**64, "10"])
def test_rebalance_refuses_a_bad_max_bytes(tmp_path, max_bytes):
    with CommitLog([tmp_path / "a", tmp_path / "b"], segment_size=4096) as log:
        with pytest.raises((ValueError, TypeError)):
            log.rebalance(max_bytes)


@pytest.mark.parametrize("name", ["18446744073709551616", "99999999999999999999"])
def test_a_segment_name_past_2_64_is_refused_and_kept(tmp_path, name):
    store = tmp_path / "store"
    store.mkdir()
    junk = store / name
    junk.write_bytes(bytes(4096))
    for read_only in (False, True):
        with pytest.raises(CorruptionError, match=name):
            CommitLog(store, segment_size=4096, read_only=read_only)
    assert junk.exists()


def test_segments_say_which_are_sealed_and_what_is_published(tmp_path):
    with CommitLog(tmp_path / "d", segment_size=4096, clean_interval_ms=0) as log:
        while len(log.segments()) < 4:
            log.append(b"x" * 1000)
        segs = log.segments()
        assert [s.sealed for s in segs] == [True, True, True, False]
        assert all(s.written == s.size for s in segs[:-1])
        assert segs[-1].written == log.max_offset - segs[-1].start_offset
        assert "sealed=False" in repr(segs[-1])
