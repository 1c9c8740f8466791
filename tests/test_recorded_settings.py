"""What a store records of its writer's settings, so that a reader (``rmqlog stat``) shows the
store's settings and never its own defaults."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


def test_per_directory_ratios_are_recorded(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    CommitLog([a, b], max_used_ratio={a: 0.5}, force_clean_ratio=0.9).close()
    with CommitLog(a, read_only=True) as ro:
        got = ro.recorded_settings()
    assert got["max_used_ratio"] is None and got["max_used_ratio_by_dir"] == {a: 0.5}
    assert got["force_clean_ratio"] == 0.9 and got["force_clean_ratio_by_dir"] == {}


def test_the_command_lines_writer_keeps_the_recorded_settings(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    with CommitLog(
        dirs, segment_size=8192, strategy="most_free", flush="sync", retention_hours=5.0
    ) as log:
        log.append_batch([b"x" * 3000] * 12)
        first = log.segments()[0]
        recorded = log.recorded_settings()
    dest = dirs[1] if first.path.startswith(dirs[0]) else dirs[0]
    rmqlog_cli = Path(sys.executable).with_name("rmqlog")
    joined = os.pathsep.join(dirs)
    proc = subprocess.run(
        [str(rmqlog_cli), "move", joined, "--segment", str(first.start_offset), "--to", dest],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    with CommitLog(dirs[0], read_only=True) as ro:
        assert ro.recorded_settings() == recorded
        assert ro.segments()[0].path.startswith(dest)
