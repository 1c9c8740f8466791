"""Several directories: placement strategies, full and failing disks, read-only directories.

Disk space, ENOSPC and EROFS are real: the tests that need them mount small tmpfs filesystems (and
one ext4 image), and skip only where this process may not mount.
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import threading
from pathlib import Path

import _mounts
import pytest
from _procs import wait_for

from rmqlog import CommitLog, DirInfo, DiskFullError

KIB = 1024
MIB = 1024 * KIB


# ---------------------------------------------------------------------------------------------
# helpers


def rec(i: int, size: int) -> bytes:
    head = f"rec-{i}-".encode()
    return (head * (size // len(head) + 1))[:size]


def roll_size(segment_size: int) -> int:
    """A body over half a segment: every append of one starts a new segment."""
    return segment_size // 2 + 64


def rolls(log: CommitLog, n: int, segment_size: int, first: int = 0) -> dict[int, bytes]:
    """Appends ``n`` records, one per new segment; returns ``{offset: body}``."""
    out = {}
    for i in range(first, first + n):
        b = rec(i, roll_size(segment_size))
        out[log.append(b)] = b
    return out


def placement(log: CommitLog) -> list[str]:
    """Name of the directory holding each segment, in offset order."""
    return [Path(s.path).parent.name for s in log.segments()]


def assert_intact(log: CommitLog, written: dict[int, bytes]) -> None:
    for off, b in written.items():
        assert bytes(log.read(off)) == b, off
    assert [(o, bytes(v)) for o, v in log.scan()] == sorted(written.items())


def info(log: CommitLog, path: Path) -> DirInfo:
    (d,) = [d for d in log.dirs() if d.path == str(path)]
    return d


def logged(caplog, text: str) -> bool:
    return any(r.name == "rmqlog" and text in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------------------------------
# round robin


@pytest.mark.parametrize("n", [2, 3, 4])
def test_round_robin_spreads_segments_evenly(make_log, tmp_path, n):
    paths = [tmp_path / f"d{i}" for i in range(n)]
    log = make_log(paths, clean_interval_ms=0)
    written = rolls(log, 5 * n, 4096)
    segs = log.segments()
    assert [s.start_offset for s in segs] == [k * 4096 for k in range(5 * n)]
    # RIP-7: segment number modulo the number of directories, in configuration order.
    assert placement(log) == [f"d{k % n}" for k in range(5 * n)]
    for s in segs:
        assert Path(s.path).is_file()
    assert [d.path for d in log.dirs()] == [str(p) for p in paths]
    assert [d.segments for d in log.dirs()] == [5] * n
    assert all(d.state == "writable" and d.error is None for d in log.dirs())
    assert_intact(log, written)


def test_directories_on_one_filesystem_are_accepted(make_log, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="rmqlog")
    a, b = tmp_path / "same" / "a", tmp_path / "same" / "b"
    log = make_log([a, b], clean_interval_ms=0)
    written = rolls(log, 6, 4096)
    assert placement(log) == ["a", "b"] * 3
    da, db = log.dirs()
    assert da.total_bytes == db.total_bytes > 0
    assert_intact(log, written)
    # Said once, as information, naming both.
    assert wait_for(lambda: logged(caplog, "one filesystem")), caplog.text
    notes = [r for r in caplog.records if "one filesystem" in r.getMessage()]
    assert len(notes) == 1 and notes[0].levelno == logging.INFO, notes
    assert str(a) in notes[0].getMessage() and str(b) in notes[0].getMessage()


# ---------------------------------------------------------------------------------------------
# most_free, weighted_free, fewest_segments


def test_most_free_takes_the_bigger_disk_until_it_is_no_longer_bigger(mnt):
    seg = 64 * KIB
    small, big = mnt.tmpfs("small", 1 * MIB), mnt.tmpfs("big", 3 * MIB)
    log = mnt.log(
        [small, big], segment_size=seg, strategy="most_free", flush="none", clean_interval_ms=0
    )
    written = {}
    for i in range(40):
        before = [d.free_bytes for d in log.dirs()]
        b = rec(i, roll_size(seg))
        written[log.append(b)] = b
        chosen = ["small", "big"].index(placement(log)[-1])
        # The most free space; a tie goes to the first directory in configuration order.
        assert chosen == before.index(max(before)), (i, before)
    names = placement(log)
    # 3 MiB vs 1 MiB of 64 KiB segments: 32 go to the big disk before the two are level, but
    # for one page: the first directory also holds the store's control page (rmqlog.ctl), so
    # the big one stays ahead by it and takes the next one first.
    assert names[:32] == ["big"] * 32
    assert names[32:] == ["big", "small"] * 4
    assert_intact(log, written)


def test_weighted_free_follows_free_space_without_starving_the_smaller_disk(mnt):
    small, big = mnt.tmpfs("small", 1 * MIB), mnt.tmpfs("big", 3 * MIB)
    log = mnt.log(
        [small, big], segment_size=4096, strategy="weighted_free", flush="none", clean_interval_ms=0
    )
    n = 400
    rolls(log, n, 4096)
    counts = {d.path: d.segments for d in log.dirs()}
    on_small, on_big = counts[str(small)], counts[str(big)]
    assert on_small + on_big == n
    # Expected 1:3 (100 and 300, sd 8.7): the bigger takes roughly three times as many, the
    # smaller a real share.
    assert on_small >= 60, counts
    assert 2.0 <= on_big / on_small <= 5.0, counts


def test_fewest_segments_fills_a_new_directory_until_counts_even_out(make_log, tmp_path):
    old = [tmp_path / f"d{i}" for i in range(3)]
    log = make_log(old, clean_interval_ms=0)
    written = rolls(log, 6, 4096)
    assert placement(log) == ["d0", "d1", "d2"] * 2
    log.close()

    log = make_log([*old, tmp_path / "d3"], strategy="fewest_segments", clean_interval_ms=0)
    assert [d.segments for d in log.dirs()] == [2, 2, 2, 0]
    assert_intact(log, written)
    new = []
    for i in range(6):
        written.update(rolls(log, 1, 4096, first=100 + i))
        new.append(placement(log)[-1])
    # The new directory until it has as many; then ties go in configuration order.
    assert new == ["d3", "d3", "d0", "d1", "d2", "d3"]
    assert [d.segments for d in log.dirs()] == [3, 3, 3, 3]
    assert_intact(log, written)


# ---------------------------------------------------------------------------------------------
# full directories


def test_a_full_directory_is_skipped_and_reported(mnt):
    seg = 8192
    events = []
    a, tiny, c = mnt.tmpfs("a", 1 * MIB), mnt.tmpfs("tiny", 40 * KIB), mnt.tmpfs("c", 1 * MIB)
    log = mnt.log(
        [a, tiny, c],
        segment_size=seg,
        clean_interval_ms=0,
        on_dir_event=lambda *ev: events.append(ev),
    )
    written = rolls(log, 30, seg)
    # 40 KiB: a page each for rmqlog.meta, rmqlog.tail and rmqlog.id, 3 segments of 8 KiB, then
    # less than a segment is left.
    assert placement(log).count("tiny") == 3
    assert placement(log)[-12:] == ["a", "c"] * 6
    d = info(log, tiny)
    assert d.state == "full"
    assert d.free_bytes < seg
    assert d.segments == 3
    assert "free" in d.error
    assert [info(log, p).state for p in (a, c)] == ["writable", "writable"]
    assert_intact(log, written)
    assert wait_for(lambda: any(e[:3] == (str(tiny), "writable", "full") for e in events)), events
    (ev,) = [e for e in events if e[0] == str(tiny)]
    assert "free" in ev[3]


def fill_until_full(log: CommitLog, seg: int, limit: int = 200) -> tuple[dict, DiskFullError]:
    written = {}
    for i in range(limit):
        b = rec(i, roll_size(seg))
        try:
            written[log.append(b)] = b
        except DiskFullError as e:
            return written, e
    raise AssertionError(f"no DiskFullError after {limit} segments: {log.dirs()}")


def test_every_directory_full_raises_disk_full_then_appends_resume_when_space_is_freed(mnt):
    seg = 8192
    events = []
    a, b = mnt.tmpfs("a", 64 * KIB), mnt.tmpfs("b", 64 * KIB)
    ballast = [_mounts.fill(p, 16 * KIB) for p in (a, b)]  # another program's files
    log = mnt.log(
        [a, b], segment_size=seg, clean_interval_ms=0, on_dir_event=lambda *ev: events.append(ev)
    )
    written, err = fill_until_full(log, seg)
    assert isinstance(err, OSError)
    assert err.errno == errno.ENOSPC
    for p in (a, b):
        assert f"{p}: full" in str(err), str(err)
    assert len(written) == 8  # 4 segments of 8 KiB next to ballast and metadata in each disk
    assert [d.state for d in log.dirs()] == ["full", "full"]
    # Nothing written is lost, nothing half-written became visible.
    end = log.max_offset
    assert_intact(log, written)
    with pytest.raises(DiskFullError):
        log.append(rec(999, roll_size(seg)))
    assert log.max_offset == end
    # Small records still fit in the active segment.
    small = log.append(b"still fits")
    written[small] = b"still fits"

    ballast[1].unlink()  # space comes back on b: no reopen needed
    more = rolls(log, 2, seg, first=500)
    written.update(more)
    assert placement(log)[-2:] == ["b", "b"]
    assert info(log, b).state == "writable"
    assert info(log, a).state == "full"
    assert_intact(log, written)
    log.flush()
    assert wait_for(lambda: (str(b), "full", "writable") in [e[:3] for e in events]), events


def test_truncate_before_frees_space_on_full_disks(mnt):
    seg = 8192
    a, b = mnt.tmpfs("a", 64 * KIB), mnt.tmpfs("b", 64 * KIB)
    log = mnt.log([a, b], segment_size=seg, clean_interval_ms=0)
    written, _ = fill_until_full(log, seg)
    assert len(written) == 12  # 6 segments of 8 KiB next to the 3 metadata pages in each disk
    assert log.truncate_before(2 * seg) == 2 * seg
    assert not (a / f"{0:020}").exists() and not (b / f"{seg:020}").exists()
    written = {o: v for o, v in written.items() if o >= 2 * seg}
    written.update(rolls(log, 2, seg, first=500))
    assert_intact(log, written)


def test_truncate_before_frees_space_on_disks_full_to_the_last_byte(mnt):
    """One-page segments fill a disk to its last byte (0 bytes free): the log must still be able
    to free space and go on."""
    seg = 4096
    a, b = mnt.tmpfs("a", 64 * KIB), mnt.tmpfs("b", 64 * KIB)
    log = mnt.log([a, b], segment_size=seg, clean_interval_ms=0)
    written, err = fill_until_full(log, seg)
    assert err.errno == errno.ENOSPC
    assert [d.free_bytes for d in log.dirs()] == [0, 0]
    assert_intact(log, written)
    assert log.truncate_before(4 * seg) == 4 * seg
    for start in range(0, 4 * seg, seg):
        assert not any((p / f"{start:020}").exists() for p in (a, b))
    written = {o: v for o, v in written.items() if o >= 4 * seg}
    written.update(rolls(log, 2, seg, first=500))
    assert_intact(log, written)
    log.close()


def test_a_directory_full_to_the_last_byte_does_not_break_flush_or_close(mnt):
    """A full directory is a normal state: flush(), truncate_before() and close() go on."""
    seg = 4096
    tiny, roomy = mnt.tmpfs("tiny", 32 * KIB), mnt.tmpfs("roomy", 1 * MIB)
    log = mnt.log([tiny, roomy], segment_size=seg, clean_interval_ms=0)
    written = rolls(log, 30, seg)
    assert info(log, tiny).state == "full"
    assert info(log, tiny).free_bytes == 0
    log.flush()
    assert log.flushed_offset == log.max_offset
    assert log.truncate_before(2 * seg) == 2 * seg
    written = {o: v for o, v in written.items() if o >= 2 * seg}
    log.close()
    log = mnt.log([tiny, roomy], segment_size=seg, clean_interval_ms=0)
    assert log.min_offset == 2 * seg
    assert_intact(log, written)


def test_min_free_bytes_makes_a_directory_ineligible(mnt):
    seg = 64 * KIB
    small, big = mnt.tmpfs("small", 1 * MIB), mnt.tmpfs("big", 4 * MIB)
    log = mnt.log([small, big], segment_size=seg, min_free_bytes=1 * MIB, clean_interval_ms=0)
    written = rolls(log, 10, seg)
    # The 1 MiB disk has room for segments, but not for one plus min_free_bytes.
    assert placement(log) == ["big"] * 10
    d = info(log, small)
    assert d.state == "full"
    assert seg <= d.free_bytes < seg + MIB
    assert "min_free_bytes" in d.error
    more, err = fill_until_full(log, seg)
    written.update(more)
    # big refuses while it still has more than min_free_bytes left.
    assert info(log, big).state == "full"
    assert _mounts.free_bytes(big) >= MIB
    # Only rmqlog.meta, rmqlog.tail, rmqlog.id and (the first directory) rmqlog.ctl.
    assert _mounts.free_bytes(small) >= MIB - 16 * KIB
    assert f"{big}: full" in str(err) and f"{small}: full" in str(err)
    assert placement(log).count("small") == 0
    assert_intact(log, written)


# ---------------------------------------------------------------------------------------------
# a directory failing: offline


def test_a_directory_remounted_read_only_goes_offline(mnt):
    seg = 4096
    events = []
    d0, d1, d2 = (mnt.tmpfs(f"d{i}", 1 * MIB) for i in range(3))
    log = mnt.log(
        [d0, d1, d2],
        segment_size=seg,
        clean_interval_ms=0,
        on_dir_event=lambda *ev: events.append(ev),
    )
    written = rolls(log, 6, seg)
    on_d1 = {o: v for o, v in written.items() if (o // seg) % 3 == 1}
    mnt.remount_ro(d1)
    with pytest.raises(OSError) as e:
        (d1 / "probe").write_bytes(b"x")
    assert e.value.errno == errno.EROFS

    written.update(rolls(log, 6, seg, first=100))
    # Segment 7 was d1's turn: creating it failed, it went to d2 and the append succeeded;
    # round robin goes on over the two directories left.
    assert placement(log) == ["d0", "d1", "d2", "d0", "d1", "d2"] + ["d0", "d2"] * 3
    d = info(log, d1)
    assert d.state == "offline"
    assert "Read-only file system" in d.error or "os error 30" in d.error, d.error
    assert d.segments == 2
    assert [info(log, p).state for p in (d0, d2)] == ["writable", "writable"]
    for o, v in on_d1.items():
        assert bytes(log.read(o)) == v
    assert_intact(log, written)
    log.flush()
    assert wait_for(lambda: any(e[:3] == (str(d1), "writable", "offline") for e in events))
    (ev,) = [e for e in events if e[0] == str(d1)]
    assert "Read-only file system" in ev[3] or "os error 30" in ev[3], ev
    log.close()

    # The failed disk retired: its segments read from the read-only filesystem.
    log = mnt.log([d0, d2], read_only_paths=[d1], segment_size=seg, clean_interval_ms=0)
    assert info(log, d1).state == "read_only"
    assert_intact(log, written)


# ---------------------------------------------------------------------------------------------
# read_only_paths


def test_read_only_paths_are_read_and_never_written(make_log, tmp_path):
    seg = 4096
    d0, d1, d2 = (tmp_path / f"d{i}" for i in range(3))
    log = make_log([d0, d1, d2], clean_interval_ms=0)
    written = rolls(log, 9, seg)
    assert placement(log) == ["d0", "d1", "d2"] * 3
    log.close()
    on_d1 = sorted(os.listdir(d1))

    log = make_log([d0, d2], read_only_paths=[d1], clean_interval_ms=0)
    assert [(d.path, d.state) for d in log.dirs()] == [
        (str(d0), "writable"),
        (str(d2), "writable"),
        (str(d1), "read_only"),
    ]
    assert [d.segments for d in log.dirs()] == [3, 3, 3]
    assert_intact(log, written)
    written.update(rolls(log, 6, seg, first=100))
    # Round robin over the two writable directories only.
    assert placement(log)[9:] == [["d0", "d2"][k % 2] for k in range(9, 15)]
    assert sorted(os.listdir(d1)) == on_d1
    log.close()

    log = make_log([d0, d2], read_only_paths=[d1], clean_interval_ms=0)
    assert_intact(log, written)
    assert info(log, d1).state == "read_only"


def test_read_only_path_on_a_read_only_filesystem(mnt):
    seg = 4096
    d0, d1, d2 = (mnt.tmpfs(f"d{i}", 1 * MIB) for i in range(3))
    with CommitLog([d0, d1, d2], segment_size=seg, clean_interval_ms=0) as log:
        written = rolls(log, 9, seg)
    del log  # its segment maps (open for writing) go with it
    gc.collect()
    assert mnt.remount_ro(d1) == 0  # nothing open there: a plain `mount -o remount,ro`
    log = mnt.log([d0, d2], read_only_paths=[d1], segment_size=seg, clean_interval_ms=0)
    assert info(log, d1).state == "read_only"
    assert_intact(log, written)
    written.update(rolls(log, 4, seg, first=100))
    assert placement(log).count("d1") == 3
    assert_intact(log, written)


# ---------------------------------------------------------------------------------------------
# a callable strategy


def test_callable_strategy_is_honoured(make_log, tmp_path):
    paths = [tmp_path / f"d{i}" for i in range(3)]
    calls = []

    def strategy(dirs, start):
        calls.append(([(d.path, d.state) for d in dirs], start))
        assert all(isinstance(d, DirInfo) for d in dirs)
        return [d.path for d in dirs].index(str(paths[2]))

    log = make_log(paths, strategy=strategy, clean_interval_ms=0)
    written = rolls(log, 8, 4096)
    assert placement(log) == ["d2"] * 8
    assert [start for _, start in calls] == [s.start_offset for s in log.segments()]
    assert all(dirs == [(str(p), "writable") for p in paths] for dirs, _ in calls)
    assert log.stats()["strategy"] == "custom"
    assert_intact(log, written)


def test_callable_strategy_indexes_the_eligible_directories(mnt):
    seg = 8192
    full, b, c = mnt.tmpfs("full", 64 * KIB), mnt.tmpfs("b", 1 * MIB), mnt.tmpfs("c", 1 * MIB)
    _mounts.fill(full, 56 * KIB)
    seen = []

    def strategy(dirs, start):
        seen.append([Path(d.path).name for d in dirs])
        return 1

    log = mnt.log([full, b, c], segment_size=seg, strategy=strategy, clean_interval_ms=0)
    written = rolls(log, 4, seg)
    assert seen == [["b", "c"]] * 4
    assert placement(log) == ["c"] * 4
    assert info(log, full).state == "full"
    assert_intact(log, written)


def test_callable_strategy_that_raises_falls_back_to_round_robin(make_log, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="rmqlog")
    paths = [tmp_path / f"d{i}" for i in range(3)]

    def strategy(dirs, start):
        raise RuntimeError(f"no idea where {start} goes")

    log = make_log(paths, strategy=strategy, clean_interval_ms=0)
    written = rolls(log, 6, 4096)
    assert placement(log) == ["d0", "d1", "d2"] * 2
    assert_intact(log, written)
    assert logged(caplog, "no idea where 4096 goes"), caplog.text


@pytest.mark.parametrize("answer", [99, 3, -1, None, "d1"])
def test_callable_strategy_with_a_bad_answer_falls_back_to_round_robin(
    make_log, tmp_path, caplog, answer
):
    caplog.set_level(logging.WARNING, logger="rmqlog")
    paths = [tmp_path / f"d{i}" for i in range(3)]
    log = make_log(paths, strategy=lambda dirs, start: answer, clean_interval_ms=0)
    written = rolls(log, 6, 4096)
    assert placement(log) == ["d0", "d1", "d2"] * 2
    assert_intact(log, written)
    # The fallback is reported on the `rmqlog` logger.
    assert wait_for(lambda: logged(caplog, "strategy")), caplog.text


def test_callable_strategy_may_read_the_log(make_log, tmp_path):
    paths = [tmp_path / f"d{i}" for i in range(2)]
    holder = {}
    seen = []

    def strategy(dirs, start):
        if start == 0:
            return 0
        log = holder["log"]
        first = log.min_offset
        seen.append(
            (
                start,
                log.max_offset,
                bytes(log.read(first)),
                sum(1 for _ in log.scan()),
                len(log.segments()),
                [d.segments for d in log.dirs()],
                log.stats()["appends"],
            )
        )
        return (start // 4096 + 1) % len(dirs)  # the other directory than round robin

    log = make_log(paths, strategy=strategy, clean_interval_ms=0)
    holder["log"] = log
    first = log.append(rec(0, roll_size(4096)))
    errors = []

    def work():
        try:
            rolls(log, 6, 4096, first=1)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(timeout=20)
    assert not t.is_alive(), "append deadlocked with a strategy that reads the log"
    assert errors == []
    assert first == 0
    assert len(seen) == 6
    for k, (start, max_off, first_body, n_recs, n_segs, _, appends) in enumerate(seen):
        assert start == (k + 1) * 4096
        assert first_body == rec(0, roll_size(4096))
        assert n_recs == appends == k + 1
        assert n_segs == k + 1
        assert max_off <= start
    assert placement(log) == ["d0", "d0", "d1", "d0", "d1", "d0", "d1"]


# ---------------------------------------------------------------------------------------------
# DirInfo on a filesystem with reserved blocks


def test_dirinfo_reports_space_as_df_does(mnt):
    seg = 64 * KIB
    disk = mnt.ext4("ext4", 8 * MIB)
    log = mnt.log([disk], segment_size=seg, flush="none", clean_interval_ms=0)
    rolls(log, 5, seg)
    (d,) = log.dirs()
    s = os.statvfs(disk)
    assert s.f_bavail < s.f_bfree  # root's reserved blocks: not for an unprivileged writer
    assert d.free_bytes == s.f_bavail * s.f_frsize
    assert d.total_bytes == s.f_blocks * s.f_frsize
    used = s.f_blocks - s.f_bfree
    assert d.used_ratio == pytest.approx(used / (used + s.f_bavail))
    assert d.segments == 5
    assert d.state == "writable" and d.error is None
