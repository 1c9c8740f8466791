"""Filesystems that do not report their size (statvfs ``f_blocks == 0``: LazyFS, FUSE filesystems
without statfs, some network filesystems): their free space is unknown, not zero. As Kafka's
KIP-178, placement counts segments there, the directory is never called full for it, and
usage-based retention and ``min_free_bytes`` skip it; a real ENOSPC still makes it full.

The filesystem is the test FUSE passthrough (``tests/faultfs.py``) with ``no_size()``: statfs
answers as libfuse does without a statfs implementation.
"""

from __future__ import annotations

import datetime
import logging
import os
import time
from pathlib import Path

import pytest

import rmqlog
from rmqlog import CommitLog, DiskFullError

SEG = 4096
STRATEGIES = ["round_robin", "most_free", "fewest_segments", "weighted_free"]


def rolls(log: CommitLog, n: int, first: int = 0) -> dict[int, bytes]:
    """Appends ``n`` records of over half a segment, one per new segment: ``{offset: body}``."""
    out = {}
    for i in range(first, first + n):
        body = (f"rec-{i}-".encode() * SEG)[: SEG // 2 + 64]
        out[log.append(body)] = body
    return out


def unknown_size_warnings(caplog, path: Path) -> list[str]:
    rmqlog._native._flush_logging()
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "rmqlog"
        and r.levelno == logging.WARNING
        and f"free space of {path} is unknown" in r.getMessage()
    ]


@pytest.fixture
def nosize(faultfs):
    """A store directory on a filesystem that reports no size."""
    faultfs.no_size()
    sv = os.statvfs(faultfs.path)
    assert (sv.f_blocks, sv.f_bfree, sv.f_bavail) == (0, 0, 0)
    return faultfs.path / "store"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_places_segments_there_without_disk_full(
    faultfs, nosize, tmp_path, caplog, strategy
):
    caplog.set_level(logging.INFO, logger="rmqlog")
    local = tmp_path / "local"
    log = faultfs.log([nosize, local], segment_size=SEG, strategy=strategy, clean_interval_ms=0)
    written = rolls(log, 8)
    unknown, known = log.dirs()
    assert (unknown.free_bytes, unknown.total_bytes, unknown.used_ratio) == (None, None, None)
    assert (unknown.state, unknown.error) == ("writable", None)
    assert "free_bytes=None" in repr(unknown)
    assert isinstance(known.free_bytes, int) and known.free_bytes > 0
    assert isinstance(known.total_bytes, int) and known.used_ratio is not None
    # Round robin alternates; the free-space strategies fall back to the fewest segments (which
    # alternates too): the local disk's far larger free space does not take every segment.
    assert [unknown.segments, known.segments] == [4, 4]
    assert [(o, bytes(b)) for o, b in log.scan()] == sorted(written.items())
    # Said once for this open, however many rolls and dirs() calls read its usage.
    (warning,) = unknown_size_warnings(caplog, nosize)
    assert "statvfs f_blocks = 0" in warning and "fewest_segments" in warning
    log.close()
    log = faultfs.log([nosize, local], segment_size=SEG, strategy=strategy, clean_interval_ms=0)
    rolls(log, 2, first=100)
    assert len(unknown_size_warnings(caplog, nosize)) == 2  # once more for the new open


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_store_only_there_appends_and_rolls(faultfs, nosize, strategy):
    log = faultfs.log(nosize, segment_size=SEG, strategy=strategy, clean_interval_ms=0)
    written = rolls(log, 6)
    written.update({log.append(b"tail"): b"tail"})
    assert len(log.segments()) == 6
    (d,) = log.dirs()
    assert (d.state, d.free_bytes, d.segments) == ("writable", None, 6)
    log.close()
    with CommitLog(nosize, read_only=True) as ro:
        assert [(o, bytes(b)) for o, b in ro.scan()] == sorted(written.items())


def test_min_free_bytes_does_not_refuse_it(faultfs, nosize, tmp_path):
    # min_free_bytes of 1 PiB refuses every disk whose free space is known: only the unknown
    # one takes segments, and the append succeeds.
    local = tmp_path / "local"
    log = faultfs.log(
        [local, nosize], segment_size=SEG, min_free_bytes=1 << 50, clean_interval_ms=0
    )
    rolls(log, 4)
    known, unknown = log.dirs()
    assert known.state == "full" and "min_free_bytes" in known.error
    assert (unknown.state, unknown.segments, known.segments) == ("writable", 4, 0)


def test_usage_based_retention_skips_it(faultfs, nosize):
    """max_used_ratio and force_clean_ratio at their lowest: a disk of known usage would be over
    both; there, usage is no reason to delete."""
    log = faultfs.log(
        nosize,
        segment_size=SEG,
        retention_hours=1.0,
        delete_hours=[(datetime.datetime.now().hour + 12) % 24],
        max_used_ratio=0.01,
        force_clean_ratio=0.01,
        clean_interval_ms=0,
    )
    written = rolls(log, 6)
    old = time.time() - 2 * 3600
    for seg in log.segments():
        os.utime(seg.path, (old, old))
    assert log.clean() == 0  # expired, but not a delete hour and no disk known to be over
    assert log.min_offset == 0 and len(log.segments()) == 6
    assert [(o, bytes(b)) for o, b in log.scan()] == sorted(written.items())
    # Age still counts: forced past the delete hours, expired segments go.
    assert log.clean(force=True) == 5


def test_a_real_enospc_still_makes_it_full(faultfs, nosize):
    log = faultfs.log(nosize, segment_size=SEG, clean_interval_ms=0)
    written = rolls(log, 2)
    faultfs.fail("fallocate", "/store/*", errno="ENOSPC")
    with pytest.raises(DiskFullError) as err:
        rolls(log, 1, first=10)
    assert "No space left on device" in str(err.value)
    (d,) = log.dirs()
    assert d.state == "full" and d.free_bytes is None
    # The failed segment left no file, not even its temporary one.
    assert sorted(p.name for p in nosize.iterdir() if p.name[0].isdigit()) == [
        f"{0:020}",
        f"{SEG:020}",
    ]
    # Space comes back: the next roll tries it again and it is writable.
    faultfs.clear()
    written.update(rolls(log, 1, first=20))
    assert log.dirs()[0].state == "writable"
    assert [(o, bytes(b)) for o, b in log.scan()] == sorted(written.items())
