"""What a store records of its writer's settings, so that a reader (``rmqlog stat``) shows the
store's settings and never its own defaults."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rmqlog import ClosedError, CommitLog

FIXTURE = Path(__file__).parent / "fixtures" / "store-0.1"


def test_a_reader_sees_the_writers_settings_not_its_own(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    with CommitLog(
        dirs,
        segment_size=8192,
        strategy="most_free",
        flush="sync",
        flush_interval_ms=250,
        retention_hours=12.5,
        delete_hours=(2, 3),
        retention_bytes=1 << 20,
    ) as log:
        log.append(b"x")
        own = log.recorded_settings()
    with CommitLog(dirs[1], read_only=True) as ro:
        got = ro.recorded_settings()
        assert ro.stats()["strategy"] == "round_robin"  # the reader's own option, not the store's
    assert got == own
    assert got["strategy"] == "most_free" and got["flush"] == "sync"
    assert got["segment_size"] == 8192 and got["flush_interval_ms"] == 250
    assert got["retention_hours"] == 12.5 and got["delete_hours"] == (2, 3)
    assert got["retention_bytes"] == 1 << 20
    assert isinstance(got["version"], str) and got["version"]


def test_the_next_writer_records_its_own(tmp_path):
    d = str(tmp_path / "s")
    CommitLog(d, segment_size=8192, strategy="most_free").close()
    CommitLog(d, segment_size=16384, flush="none").close()
    with CommitLog(d, read_only=True) as ro:
        got = ro.recorded_settings()
    assert (got["segment_size"], got["strategy"], got["flush"]) == (16384, "round_robin", "none")


def test_a_0_1_store_records_none_until_a_writer_opens_it(tmp_path):
    shutil.copytree(FIXTURE / "clean", tmp_path / "s")
    with CommitLog(str(tmp_path / "s" / "a"), read_only=True) as ro:
        assert ro.recorded_settings() is None
    CommitLog([str(tmp_path / "s" / "a"), str(tmp_path / "s" / "b")], segment_size=4096).close()
    with CommitLog(str(tmp_path / "s" / "a"), read_only=True) as ro:
        assert ro.recorded_settings()["segment_size"] == 4096


def test_closed(tmp_path):
    log = CommitLog(str(tmp_path / "s"))
    log.close()
    with pytest.raises(ClosedError):
        log.recorded_settings()
