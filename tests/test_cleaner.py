"""Retention: deletion by age, by disk usage and by size, truncate_before, the cleaner thread.

Expiry is judged from a segment file's mtime, so tests age files with ``os.utime``. Tests about
disk usage run on small tmpfs mounts (skipped only where this process may not mount); the others
run in the test's temporary directory with ``max_used_ratio=1.0``, so that how full the host's
disk happens to be never counts as disk pressure. Retention is off by default: each test
configures what it tests.
"""

from __future__ import annotations

import datetime
import gc
import math
import os
import random
import threading
import time
from pathlib import Path

import _mounts
import pytest

from rmqlog import CommitLog, DiskFullError, OffsetOutOfRangeError

KIB = 1024
MIB = 1024 * KIB
SEG = 4096
HOUR = 3600.0
EVERY_HOUR = list(range(24))


# ---------------------------------------------------------------------------------------------
# helpers


def rec(i: int, size: int) -> bytes:
    head = f"rec-{i}-".encode()
    return (head * (size // len(head) + 1))[:size]


def rolls(log: CommitLog, n: int, segment_size: int = SEG, first: int = 0) -> dict[int, bytes]:
    """Appends ``n`` records of over half a segment, one per new segment: ``{offset: body}``."""
    out = {}
    for i in range(first, first + n):
        b = rec(i, segment_size // 2 + 64)
        out[log.append(b)] = b
    return out


def age(log: CommitLog, indexes, hours: float = 2.0) -> None:
    """Sets the mtime of the segments at ``indexes`` (in offset order) ``hours`` back."""
    segs = log.segments()
    t = time.time() - hours * HOUR
    for i in indexes:
        os.utime(segs[i].path, (t, t))


def not_now() -> list[int]:
    """An hour of the day that is not the current local hour (nor the next)."""
    return [(datetime.datetime.now().hour + 12) % 24]


def assert_intact(log: CommitLog, written: dict[int, bytes]) -> None:
    """Records at or above min_offset read back; those below are out of range."""
    low = log.min_offset
    for off, b in written.items():
        if off >= low:
            assert bytes(log.read(off)) == b, off
        else:
            with pytest.raises(OffsetOutOfRangeError):
                log.read(off)
    assert [(o, bytes(v)) for o, v in log.scan()] == sorted(
        (o, b) for o, b in written.items() if o >= low
    )


def wait_for(pred, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def open_log(make_log, tmp_path):
    """A writer over ``tmp_path/d0`` with no disk pressure and no cleaner thread by default."""

    def open_(**kwargs):
        kwargs.setdefault("clean_interval_ms", 0)
        kwargs.setdefault("max_used_ratio", 1.0)
        return make_log(kwargs.pop("paths", [tmp_path / "d0"]), **kwargs)

    return open_


# ---------------------------------------------------------------------------------------------
# expiry


@pytest.mark.parametrize(
    ("hours", "force"),
    [(None, False), ("all", False), ("not now", True)],
    ids=["delete_hours=None", "every-hour", "not-now-forced"],
)
def test_rocketmq_scenario_only_the_expired_prefix_goes(open_log, hours, force):
    delete_hours = {None: None, "all": EVERY_HOUR, "not now": not_now()}[hours]
    log = open_log(retention_hours=1.0, delete_hours=delete_hours, max_deletes_per_pass=100)
    written = rolls(log, 51)  # 50 sealed segments and the active one
    segs = log.segments()
    assert len(segs) == 51
    age(log, [*range(5), *range(21, 50)])
    assert log.clean(force=force) == 5
    # The young segments 5-20 stop the pass: 21-49 stay although expired.
    assert log.min_offset == segs[5].start_offset == 5 * SEG
    assert [s.start_offset for s in log.segments()] == [s.start_offset for s in segs[5:]]
    assert len(log.segments()) - 1 == 45
    for s in segs[:5]:
        assert not os.path.exists(s.path)
    for s in segs[5:]:
        assert os.path.exists(s.path)
    assert_intact(log, written)
    assert log.clean(force=force) == 0
    st = log.stats()
    assert (st["segments_deleted"], st["bytes_deleted"]) == (5, 5 * SEG)


def test_default_max_deletes_per_pass_is_ten(open_log):
    log = open_log(retention_hours=1.0, delete_hours=EVERY_HOUR)
    written = rolls(log, 31)
    age(log, range(30))
    deleted = [log.clean() for _ in range(4)]
    assert deleted == [10, 10, 10, 0]
    assert log.min_offset == 30 * SEG
    assert len(log.segments()) == 1
    assert_intact(log, written)


def test_delete_hours_gate_expiry_when_no_disk_is_under_pressure(open_log):
    log = open_log(retention_hours=1.0, delete_hours=not_now())
    written = rolls(log, 6)
    age(log, range(6))
    before = [s.path for s in log.segments()]
    assert log.clean() == 0
    assert log.clean(force=False) == 0
    assert [s.path for s in log.segments()] == before
    assert log.min_offset == 0
    assert log.clean(force=True) == 5
    assert log.min_offset == 5 * SEG
    assert_intact(log, written)


def test_a_delete_hour_matching_now_deletes_without_force(open_log):
    now = datetime.datetime.now().hour
    log = open_log(retention_hours=1.0, delete_hours=[now, (now + 1) % 24])
    written = rolls(log, 4)
    age(log, range(4))
    assert log.clean() == 3
    assert_intact(log, written)


def test_retention_hours_none_turns_time_expiry_off(open_log):
    log = open_log(retention_hours=None, delete_hours=EVERY_HOUR)
    written = rolls(log, 6)
    age(log, range(6), hours=10_000)
    assert log.clean(force=True) == 0
    assert log.min_offset == 0
    assert_intact(log, written)


def test_young_segments_are_kept(open_log):
    log = open_log(retention_hours=1.0, delete_hours=EVERY_HOUR)
    written = rolls(log, 6)
    age(log, range(6), hours=0.5)
    assert log.clean(force=True) == 0
    assert log.min_offset == 0
    assert_intact(log, written)


def test_a_held_memoryview_outlives_the_deletion_of_its_segment(open_log):
    log = open_log(retention_hours=1.0, delete_hours=EVERY_HOUR)
    written = rolls(log, 4)
    first, body = next(iter(written.items()))
    view = log.read(first)
    record = log.read_record(first)
    path = log.segments()[0].path
    age(log, range(4))
    assert log.clean() == 3
    assert not os.path.exists(path)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(first)
    gc.collect()
    assert bytes(view) == body
    assert bytes(record.body) == body
    assert record.offset == first


# ---------------------------------------------------------------------------------------------
# disk usage


def test_any_disk_over_max_used_ratio_expires_segments_at_any_hour(mnt):
    d0, d1, small = (
        mnt.tmpfs("d0", 2 * MIB),
        mnt.tmpfs("d1", 2 * MIB),
        mnt.tmpfs("small", 256 * KIB),
    )
    log = mnt.log(
        [d0, d1, small],
        segment_size=SEG,
        retention_hours=1.0,
        delete_hours=not_now(),
        max_used_ratio=0.75,
        max_deletes_per_pass=100,
        clean_interval_ms=0,
    )
    written = rolls(log, 12)
    age(log, range(12))
    assert all(d.used_ratio < 0.75 for d in log.dirs())
    assert log.clean() == 0  # not a delete hour, no disk over its ratio

    # Another program fills the small disk over 75 %: RIP-7 deletes expired segments at once,
    # on every disk (the oldest first), not only on the full one.
    _mounts.fill(small, 200 * KIB)
    assert log.dirs()[2].used_ratio > 0.75
    assert log.clean() == 11
    assert len(log.segments()) == 1
    assert log.min_offset == 11 * SEG
    assert_intact(log, written)


def test_a_per_directory_max_used_ratio_applies_to_its_directory(mnt):
    a, b = mnt.tmpfs("a", 1 * MIB), mnt.tmpfs("b", 1 * MIB)
    log = mnt.log(
        [a, b],
        segment_size=SEG,
        retention_hours=1.0,
        delete_hours=not_now(),
        max_used_ratio={a: 0.9, b: 0.2},
        clean_interval_ms=0,
    )
    rolls(log, 6)
    age(log, range(6))
    _mounts.fill(a, 300 * KIB)  # a at ~30 %: under its 0.9
    assert log.clean() == 0
    _mounts.fill(b, 300 * KIB)  # b at ~30 %: over its 0.2
    assert log.clean() == 5


def test_forced_cleaning_frees_what_the_disk_needs_and_no_more(mnt):
    seg = 32 * KIB
    disk = mnt.tmpfs("disk", 1 * MIB)
    log = mnt.log(
        [disk],
        segment_size=seg,
        force_clean_ratio=0.9,
        max_used_ratio=0.5,
        max_deletes_per_pass=100,
        clean_interval_ms=0,
    )
    written = {}
    while _mounts.used_ratio(disk) < 0.8:
        written.update(rolls(log, 1, seg, first=len(written)))
    # Over max_used_ratio but nothing expired and under force_clean_ratio: nothing goes.
    assert log.clean(force=True) == 0

    s = os.statvfs(disk)
    total = s.f_blocks * s.f_frsize
    used = (s.f_blocks - s.f_bfree) * s.f_frsize
    ballast = math.ceil((0.93 * total - used) / 4096) * 4096
    _mounts.fill(disk, ballast)
    assert _mounts.used_ratio(disk) > 0.9
    s = os.statvfs(disk)
    used = (s.f_blocks - s.f_bfree) * s.f_frsize
    need = used - 0.5 * total
    expected = math.ceil(need / seg)
    assert 0 < expected < len(log.segments()) - 1

    assert log.clean() == expected
    # Back to at most max_used_ratio, and one segment fewer would not have been enough.
    s = os.statvfs(disk)
    used_after = (s.f_blocks - s.f_bfree) * s.f_frsize
    assert used_after <= 0.5 * total
    assert used_after + seg > 0.5 * total
    assert log.min_offset == expected * seg
    assert log.stats()["bytes_deleted"] == expected * seg
    assert_intact(log, written)
    assert log.clean() == 0


def test_clean_returns_the_space_of_segments_that_were_read(mnt):
    """Once no caller holds a view, the disk space of deleted segments comes back."""
    seg = 8 * KIB
    disk = mnt.tmpfs("disk", 256 * KIB)
    log = mnt.log([disk], segment_size=seg, retention_hours=1.0, clean_interval_ms=0)
    written = rolls(log, 8, seg)
    assert_intact(log, written)  # reads every record; every view is dropped below
    gc.collect()
    free = _mounts.free_bytes(disk)
    age(log, range(8))
    assert log.clean(force=True) == 7
    assert _mounts.free_bytes(disk) == free + 7 * seg


def test_a_roll_with_every_disk_full_runs_a_cleaning_pass(mnt):
    seg = 8 * KIB
    a, b = mnt.tmpfs("a", 64 * KIB), mnt.tmpfs("b", 64 * KIB)
    log = mnt.log(
        [a, b],
        segment_size=seg,
        retention_hours=1.0,
        delete_hours=not_now(),
        max_used_ratio=0.75,
        clean_interval_ms=0,
    )
    written = {}
    with pytest.raises(DiskFullError):
        for i in range(100):
            written.update(rolls(log, 1, seg, first=i))
    # Each 64 KiB disk: 4 KiB pages for rmqlog.meta, rmqlog.tail and rmqlog.id, then 6 segments.
    assert len(written) == 12
    passes = log.stats()["clean_passes"]
    assert passes >= 1  # the roll that failed tried cleaning first
    # Three segments expire: the next roll finds every disk full, cleans (a full disk is over
    # max_used_ratio, so expiry applies at any hour) and goes on.
    age(log, range(3))
    written.update(rolls(log, 1, seg, first=100))
    assert log.stats()["segments_deleted"] == 3
    assert log.stats()["clean_passes"] == passes + 1
    assert log.min_offset == 3 * seg
    assert_intact(log, written)


# ---------------------------------------------------------------------------------------------
# size, truncate_before, the active segment


def test_retention_bytes_keeps_at_least_that_much(open_log):
    log = open_log(retention_hours=None, retention_bytes=10 * SEG)
    written = rolls(log, 21)
    deleted = [log.clean() for _ in range(3)]
    assert deleted[0] == 10 and deleted[-1] == 0  # at most 10 per pass, until nothing is left
    # The log's size is its bytes in use (the active segment counts what it holds): at least
    # retention_bytes, and without its first segment it would be below.
    held = log.max_offset - log.min_offset
    first = log.segments()[0]
    assert held >= 10 * SEG > held - first.size
    assert log.min_offset == sum(deleted) * SEG
    assert_intact(log, written)


def test_truncate_before(open_log):
    log = open_log()
    written = rolls(log, 10)
    paths = [s.path for s in log.segments()]
    assert log.truncate_before(0) == 0
    assert log.truncate_before(SEG - 1) == 0
    assert log.truncate_before(5 * SEG + 100) == 5 * SEG  # segment 5 ends after the offset
    assert log.min_offset == 5 * SEG
    assert [os.path.exists(p) for p in paths] == [False] * 5 + [True] * 5
    assert log.truncate_before(3 * SEG) == 5 * SEG
    assert log.truncate_before(6 * SEG) == 6 * SEG  # segment 5 ends exactly there
    st = log.stats()
    assert (st["segments_deleted"], st["bytes_deleted"]) == (6, 6 * SEG)
    assert_intact(log, written)


def test_the_active_segment_survives_every_pass(open_log):
    log = open_log(
        retention_hours=0.0, retention_bytes=0, delete_hours=EVERY_HOUR, max_deletes_per_pass=1000
    )
    written = rolls(log, 6)
    age(log, range(6), hours=1000)
    active = log.segments()[-1]
    assert log.clean(force=True) == 5
    assert log.clean(force=True) == 0
    assert log.truncate_before(2**62) == active.start_offset
    assert log.truncate_before(log.max_offset + SEG) == active.start_offset
    assert [s.path for s in log.segments()] == [active.path]
    assert os.path.exists(active.path)
    assert_intact(log, written)
    more = rolls(log, 2, first=10)
    written.update(more)
    assert_intact(log, written)


# ---------------------------------------------------------------------------------------------
# the cleaner thread, stats


def test_the_cleaner_thread_deletes_aged_segments_on_its_own(open_log):
    log = open_log(retention_hours=1.0, delete_hours=EVERY_HOUR, clean_interval_ms=100)
    written = rolls(log, 8)
    paths = [s.path for s in log.segments()]
    age(log, range(7))
    assert wait_for(lambda: log.stats()["segments_deleted"] == 7), log.stats()
    assert log.min_offset == 7 * SEG
    assert [os.path.exists(p) for p in paths] == [False] * 7 + [True]
    assert log.stats()["clean_passes"] >= 1
    assert log.stats()["clean_last_error"] is None
    assert_intact(log, written)


def test_close_is_prompt_with_a_long_clean_interval(open_log):
    log = open_log(clean_interval_ms=60_000)
    rolls(log, 3)
    t0 = time.monotonic()
    log.close()
    assert time.monotonic() - t0 < 1.0
    assert log.closed


def test_stats_count_passes_and_deletions(open_log):
    log = open_log(retention_hours=1.0, delete_hours=EVERY_HOUR)
    st = log.stats()
    assert (st["clean_passes"], st["segments_deleted"], st["bytes_deleted"]) == (0, 0, 0)
    assert st["clean_last_error"] is None
    rolls(log, 5)
    assert log.clean() == 0
    assert log.stats()["clean_passes"] == 1
    age(log, range(3))
    assert log.clean() == 3
    st = log.stats()
    assert (st["clean_passes"], st["segments_deleted"], st["bytes_deleted"]) == (2, 3, 3 * SEG)
    assert st["clean_last_error"] is None


# ---------------------------------------------------------------------------------------------
# cleaning under load


def test_cleaning_while_appending_and_reading(open_log):
    log = open_log(retention_hours=None, retention_bytes=16 * SEG, max_deletes_per_pass=4)
    written: dict[int, bytes] = {}
    offsets: list[int] = []
    errors: list[str] = []
    stop = threading.Event()
    reads = [0]

    def writer():
        rng = random.Random(1)
        i = 0
        try:
            while not stop.is_set():
                b = rec(i, rng.randrange(1, 1500))
                off = log.append(b)
                written[off] = b
                offsets.append(off)
                i += 1
        except Exception as e:
            errors.append(f"writer: {e!r}")

    def cleaner():
        try:
            while not stop.is_set():
                log.clean()
                time.sleep(0.002)
        except Exception as e:
            errors.append(f"cleaner: {e!r}")

    def reader():
        rng = random.Random(2)
        try:
            while not stop.is_set():
                if not offsets:
                    continue
                # Mostly recent records, sometimes any (most of those are deleted by now).
                pick = len(offsets) if rng.random() < 0.2 else min(len(offsets), 300)
                off = offsets[-1 - rng.randrange(pick)]
                try:
                    view = log.read(off)
                except OffsetOutOfRangeError as e:
                    low = log.min_offset
                    if off >= low:
                        errors.append(f"reader: {off} out of range, min_offset {low}: {e}")
                    continue
                if bytes(view) != written[off]:
                    errors.append(f"reader: {off} read back another body")
                reads[0] += 1
        except Exception as e:
            errors.append(f"reader: {e!r}")

    threads = [threading.Thread(target=f) for f in (writer, cleaner, reader)]
    for t in threads:
        t.start()
    time.sleep(2.0)  # the load runs this long; the checks are below
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    st = log.stats()
    assert st["segments_deleted"] > 0
    assert reads[0] > 0
    assert log.min_offset > 0
    assert sum(s.size for s in log.segments()) >= 16 * SEG
    assert_intact(log, written)


# ---------------------------------------------------------------------------------------------
# reopening


def test_reopen_after_deletion(open_log, tmp_path):
    log = open_log(retention_hours=1.0, delete_hours=EVERY_HOUR)
    written = rolls(log, 10)
    age(log, range(5))
    assert log.clean() == 5
    log.close()
    log = open_log(retention_hours=1.0, delete_hours=EVERY_HOUR)
    assert log.min_offset == 5 * SEG
    assert len(log.segments()) == 5
    assert_intact(log, written)
    written.update(rolls(log, 2, first=50))
    assert_intact(log, written)


def test_a_segment_left_below_min_offset_is_removed_on_reopen(open_log, tmp_path):
    log = open_log(retention_hours=1.0, delete_hours=EVERY_HOUR)
    written = rolls(log, 10)
    first = Path(log.segments()[0].path)
    saved = first.read_bytes()
    age(log, range(5))
    assert log.clean() == 5
    log.close()
    # A crash between "checkpoint updated" and "file unlinked" leaves the file behind.
    first.write_bytes(saved)

    with CommitLog([tmp_path / "d0"], read_only=True) as reader:
        assert reader.min_offset == 5 * SEG  # a reader ignores it and never deletes
        assert_intact(reader, written)
    assert first.exists()

    log = open_log(retention_hours=1.0, delete_hours=EVERY_HOUR)
    assert not first.exists()
    assert log.min_offset == 5 * SEG
    assert_intact(log, written)
    written.update(rolls(log, 1, first=50))
    assert_intact(log, written)


def test_leftovers_below_min_offset_in_every_directory_are_removed_on_reopen(make_log, tmp_path):
    dirs = [tmp_path / "d0", tmp_path / "d1", tmp_path / "d2"]
    log = make_log(
        dirs, retention_hours=1.0, delete_hours=EVERY_HOUR, max_used_ratio=1.0, clean_interval_ms=0
    )
    written = rolls(log, 9)
    segs = log.segments()
    saved = {s.path: Path(s.path).read_bytes() for s in segs[:4]}
    age(log, range(4))
    assert log.clean() == 4
    log.close()
    for path, data in saved.items():  # segments 0-3, in d0, d1, d2 and d0
        Path(path).write_bytes(data)
    log = make_log(dirs, max_used_ratio=1.0, clean_interval_ms=0)
    assert not any(os.path.exists(p) for p in saved)
    assert log.min_offset == 4 * SEG
    assert [d.segments for d in log.dirs()] == [1, 2, 2]  # 6 | 4, 7 | 5, 8
    assert_intact(log, written)
