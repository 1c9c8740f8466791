"""Retention is opt-in: with default options nothing is ever deleted, however old the segments
and however full the disk; ``preset="broker"`` brings RocketMQ broker's retention back, and a pass
that deletes says once, at INFO on the ``rmqlog`` logger, what it deleted and why.

The store lives on a small tmpfs that other files fill to about 76 %, with segment files 80 hours
old: the scenario of the report in which reopening with the old defaults deleted 4 of 5 segments.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import time
from pathlib import Path

import _mounts
import pytest

import rmqlog
from rmqlog import DEFAULTS, PRESETS, CommitLog

KIB = 1024
MIB = 1024 * KIB
SEG = 64 * KIB
RETENTION = ("retention_hours", "retention_bytes", "max_used_ratio", "force_clean_ratio")


def rolls(log: CommitLog, n: int) -> dict[int, bytes]:
    """Appends ``n`` records of over half a segment, one per new segment: ``{offset: body}``."""
    out = {}
    for i in range(n):
        body = (f"rec-{i}-".encode() * SEG)[: SEG // 2 + 64]
        out[log.append(body)] = body
    return out


def not_now() -> list[int]:
    """An hour of the day that is neither the current local hour nor the next."""
    return [(datetime.datetime.now().hour + 12) % 24]


def retention_records(caplog) -> list[str]:
    rmqlog._native._flush_logging()
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "rmqlog" and r.levelno == logging.INFO and "deleted" in r.getMessage()
    ]


@pytest.fixture
def old_store(mnt):
    """A closed store of 5 segments (4 sealed, 80 hours old) on a 4 MiB tmpfs about 76 % used;
    returns ``(path, {offset: body})``."""
    disk = mnt.tmpfs("disk", 4 * MIB)
    store = disk / "store"
    with CommitLog(store, segment_size=SEG) as log:
        written = rolls(log, 5)
        assert len(log.segments()) == 5
    old = time.time() - 80 * 3600
    for f in store.iterdir():
        if f.name.isdigit():
            os.utime(f, (old, old))
    s = os.statvfs(disk)
    used = (s.f_blocks - s.f_bfree) * s.f_frsize
    _mounts.fill(disk, math.ceil((0.76 * s.f_blocks * s.f_frsize - used) / 4096) * 4096)
    assert 0.755 < _mounts.used_ratio(disk) < 0.79
    return store, written


def assert_all_kept(log: CommitLog, written: dict[int, bytes]) -> None:
    assert log.min_offset == 0
    assert [s.start_offset for s in log.segments()] == [k * SEG for k in range(5)]
    assert all(os.path.exists(s.path) for s in log.segments())
    assert [(o, bytes(b)) for o, b in log.scan()] == sorted(written.items())


def test_defaults_configure_no_retention():
    for key in RETENTION:
        assert DEFAULTS[key] is None, key
    assert DEFAULTS["delete_hours"] is None  # any hour, once retention is configured
    assert DEFAULTS["preset"] is None


def test_an_old_store_on_a_busy_disk_reopened_with_defaults_keeps_every_segment(
    mnt, old_store, caplog
):
    caplog.set_level(logging.INFO, logger="rmqlog")
    store, written = old_store
    log = mnt.log(store)
    assert log.dirs()[0].used_ratio > 0.75
    assert log.clean() == 0
    assert log.clean(force=True) == 0
    time.sleep(4 * DEFAULTS["flush_interval_ms"] / 1000)
    assert_all_kept(log, written)
    assert log.stats()["segments_deleted"] == 0
    log.close()
    # The cleaner thread, run often, deletes nothing either.
    log = mnt.log(store, clean_interval_ms=20)
    deadline = time.monotonic() + 5
    while log.stats()["clean_passes"] < 5:
        assert time.monotonic() < deadline, log.stats()
        time.sleep(0.02)
    assert log.stats()["clean_last_error"] is None
    assert_all_kept(log, written)
    assert retention_records(caplog) == []


def test_the_broker_preset_deletes_and_says_why_once_per_pass(mnt, old_store, caplog):
    caplog.set_level(logging.INFO, logger="rmqlog")
    store, written = old_store
    # Not a delete hour (an explicit option beats the preset): only the disk over
    # max_used_ratio (the preset's 0.75) lets the 80-hour-old segments go now.
    log = mnt.log(store, preset="broker", delete_hours=not_now(), clean_interval_ms=0)
    assert log.clean() == 4
    assert log.min_offset == 4 * SEG
    assert [(o, bytes(b)) for o, b in log.scan()] == [max(written.items())]
    (line,) = retention_records(caplog)
    assert line.startswith(f"retention deleted 4 segments [0, {4 * SEG}) from {store}: ")
    assert "older than 72 h" in line
    assert f"disk {store} used 7" in line and "> max_used_ratio 75%" in line
    # A pass that deletes nothing logs nothing.
    assert log.clean(force=True) == 0
    assert len(retention_records(caplog)) == 1


def test_the_broker_preset_at_its_delete_hour_needs_no_disk_pressure(mnt, old_store):
    store, _ = old_store
    now = datetime.datetime.now().hour
    log = mnt.log(store, preset="broker", delete_hours=[now, (now + 1) % 24], max_used_ratio=None)
    assert log.clean() == 4


def test_explicit_options_override_the_preset(mnt, old_store):
    store, written = old_store
    log = mnt.log(store, preset="broker", retention_hours=None, clean_interval_ms=0)
    assert log.clean(force=True) == 0
    assert_all_kept(log, written)
    log.close()
    log = mnt.log(store, preset="broker", max_used_ratio=None, delete_hours=not_now())
    assert log.clean() == 0  # old, but not at a delete hour and no usage trigger
    assert log.clean(force=True) == 4


def test_each_kind_of_deletion_names_its_cause(make_log, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="rmqlog")
    log = make_log([tmp_path / "d"], retention_bytes=3 * 4096, clean_interval_ms=0)
    rolls_4k = [log.append(b"x" * 3000) for _ in range(8)]
    assert len(log.segments()) == 8 and rolls_4k[0] == 0
    assert log.clean() == 4
    (line,) = retention_records(caplog)
    assert line.startswith(f"retention deleted 4 segments [0, {4 * 4096}) from {tmp_path / 'd'}: ")
    assert "over retention_bytes 12288" in line
    assert log.truncate_before(6 * 4096) == 6 * 4096
    lines = retention_records(caplog)
    assert len(lines) == 2
    assert lines[1] == (
        f"deleted 2 segments [{4 * 4096}, {6 * 4096}) from {tmp_path / 'd'}: "
        f"truncate_before({6 * 4096})"
    )


def test_presets_are_listed_and_differ_from_the_defaults_only_in_retention_and_size():
    broker = PRESETS["broker"]
    assert sorted(broker) == sorted(DEFAULTS)
    changed = {k for k in DEFAULTS if broker[k] != DEFAULTS[k]}
    assert changed == {
        "preset",
        "segment_size",
        "retention_hours",
        "delete_hours",
        "max_used_ratio",
    }
    assert (broker["retention_hours"], broker["delete_hours"], broker["max_used_ratio"]) == (
        72.0,
        (4,),
        0.75,
    )
    assert broker["segment_size"] == 1 << 30
    with pytest.raises(TypeError):
        PRESETS["broker"]["retention_hours"] = 1.0  # type: ignore[index]


@pytest.mark.parametrize(
    ("preset", "error", "text"),
    [
        ("rocketmq", ValueError, 'unknown preset "rocketmq"; accepted: "broker"'),
        ("Broker", ValueError, 'accepted: "broker"'),
        (1, TypeError, "preset must be a str"),
    ],
)
def test_an_unknown_preset_is_refused_before_the_disk_is_touched(tmp_path, preset, error, text):
    target = tmp_path / "never"
    with pytest.raises(error, match=text):
        CommitLog(target, preset=preset)
    assert not Path(target).exists()


def test_forced_cleaning_without_max_used_ratio_frees_to_just_under_the_force_ratio(mnt, caplog):
    caplog.set_level(logging.INFO, logger="rmqlog")
    seg = 32 * KIB
    disk = mnt.tmpfs("disk", 1 * MIB)
    log = mnt.log(disk, segment_size=seg, force_clean_ratio=0.9, max_deletes_per_pass=100)
    while _mounts.used_ratio(disk) < 0.6:
        log.append(b"y" * (seg // 2 + 64))
    assert log.clean(force=True) == 0  # under the force ratio; nothing else configured
    s = os.statvfs(disk)
    used = (s.f_blocks - s.f_bfree) * s.f_frsize
    _mounts.fill(disk, math.ceil((0.93 * s.f_blocks * s.f_frsize - used) / 4096) * 4096)
    assert _mounts.used_ratio(disk) > 0.9
    deleted = log.clean()
    assert deleted > 0
    # Just under the force ratio: one segment fewer would have left it at or over.
    s = os.statvfs(disk)
    total, used = s.f_blocks * s.f_frsize, (s.f_blocks - s.f_bfree) * s.f_frsize
    assert used < 0.9 * total <= used + seg
    (line,) = retention_records(caplog)
    assert line.startswith(f"retention deleted {deleted} segment")
    assert f"disk {disk} used 9" in line and ">= force_clean_ratio 90%" in line
