"""Segment size on small disks: every segment is preallocated in full when created, so the default
(64 MiB) must fit a small disk, and a segment larger than a disk's free space fails the append with
a ``DiskFullError`` that says how much is free and suggests a smaller ``segment_size``, having
written nothing."""

from __future__ import annotations

import re

import pytest

from rmqlog import DEFAULTS, PRESETS, CommitLog, DiskFullError

KIB = 1024
MIB = 1024 * KIB


def segment_files(path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name[0].isdigit())


def test_the_default_is_64_mib_and_the_broker_preset_keeps_1_gib():
    assert DEFAULTS["segment_size"] == 64 * MIB
    assert PRESETS["broker"]["segment_size"] == 1 << 30


def test_with_the_default_a_small_disk_takes_records(mnt):
    disk = mnt.tmpfs("disk", 96 * MIB)
    store = disk / "store"
    log = mnt.log(store)
    off = log.append(b"hello")
    assert bytes(log.read(off)) == b"hello"
    (seg,) = log.segments()
    assert seg.size == DEFAULTS["segment_size"]
    log.close()
    with CommitLog(store, read_only=True) as ro:
        assert [(o, bytes(b)) for o, b in ro.scan()] == [(off, b"hello")]


@pytest.mark.parametrize("segment_size", [1 << 30, 64 * MIB])
def test_a_segment_larger_than_the_free_space_suggests_a_smaller_one(mnt, segment_size):
    disk = mnt.tmpfs("disk", 32 * MIB)
    store = disk / "store"
    log = mnt.log(store, segment_size=segment_size, clean_interval_ms=0)
    with pytest.raises(DiskFullError) as err:
        log.append(b"hello")
    message = str(err.value)
    (d,) = log.dirs()
    assert d.state == "full"
    assert f"{d.free_bytes} bytes free" in message
    assert f"segment_size is {segment_size} bytes, preallocated in full" in message
    assert "a multiple of 4096" in message and "or free space" in message
    suggested = int(re.search(r"segment_size=(\d+)", message).group(1))
    assert suggested % 4096 == 0 and 4 * suggested <= d.free_bytes
    # Nothing was written: no record, no segment file, the log as empty as it was.
    assert (log.min_offset, log.max_offset, log.segments()) == (0, 0, [])
    assert segment_files(store) == []
    log.close()
    # The suggestion works: four segments of it fit.
    log = mnt.log(store, segment_size=suggested, clean_interval_ms=0)
    big = b"x" * (suggested // 2 + 64)  # one record per segment
    offsets = [log.append(big) for _ in range(4)]
    assert offsets == [k * suggested for k in range(4)]
    assert len(segment_files(store)) == 4


def test_the_hint_counts_min_free_bytes(mnt):
    disk = mnt.tmpfs("disk", 32 * MIB)
    log = mnt.log(disk / "store", segment_size=16 * MIB, min_free_bytes=28 * MIB)
    with pytest.raises(DiskFullError) as err:
        log.append(b"x")
    (d,) = log.dirs()
    suggested = int(re.search(r"segment_size=(\d+)", str(err.value)).group(1))
    assert 4 * suggested <= d.free_bytes - 28 * MIB < 8 * suggested
