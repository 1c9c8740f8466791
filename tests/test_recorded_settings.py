"""What a store records of its writer's settings: the store-wide ones are the default of every
later open (``rmqlog.STORE_SETTINGS``), and a reader (``rmqlog stat``) shows the store's settings,
never its own defaults."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import rmqlog
from rmqlog import STORE_SETTINGS, ClosedError, CommitLog, ConfigurationError

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
        assert ro.stats()["strategy"] == "most_free"  # the store's, which the reader takes
    assert got == own
    assert got["strategy"] == "most_free" and got["flush"] == "sync"
    assert got["segment_size"] == 8192 and got["flush_interval_ms"] == 250
    assert got["retention_hours"] == 12.5 and got["delete_hours"] == (2, 3)
    assert got["retention_bytes"] == 1 << 20
    assert isinstance(got["version"], str) and got["version"]


def test_the_next_writer_records_its_own_changes_and_keeps_the_rest(tmp_path):
    d = str(tmp_path / "s")
    CommitLog(d, segment_size=8192, strategy="most_free").close()
    CommitLog(d, segment_size=16384, flush="none").close()
    with CommitLog(d, read_only=True) as ro:
        got = ro.recorded_settings()
    assert (got["segment_size"], got["strategy"], got["flush"]) == (16384, "most_free", "none")


STORE = {
    "segment_size": 8192,
    "strategy": "most_free",
    "retention_hours": 12.5,
    "delete_hours": (2, 3),
    "retention_bytes": 1 << 20,
    "retain_unconsumed": True,
    "consumer_idle_hours": 2.0,
    "force_clean_ratio": 0.999,  # not 0.9: the machine's disk may be fuller than that
    "min_free_bytes": 4096,
    "clean_interval_ms": 60_000,
}


def _store_wide(settings):
    return {k: v for k, v in settings.items() if k.removesuffix("_by_dir") in STORE_SETTINGS}


@pytest.mark.parametrize("exclusive", [True, False])
def test_an_open_that_names_no_setting_takes_the_stores(tmp_path, caplog, exclusive):
    caplog.set_level(logging.WARNING, logger="rmqlog")
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    with CommitLog([a, b], exclusive=exclusive, max_used_ratio={a: 0.5}, **STORE) as log:
        first = _store_wide(log.recorded_settings())
    # A restarted producer, a maintenance script: no option repeated, none changed.
    with CommitLog([a, b], exclusive=exclusive) as log:
        assert _store_wide(log.recorded_settings()) == first
        assert log.stats()["strategy"] == "most_free"
        assert log.append(b"x" * 5000) >= 0 and log.segments()[0].size == 8192
    with CommitLog(a, read_only=True) as ro:
        assert _store_wide(ro.recorded_settings()) == first
    assert first["retain_unconsumed"] is True and first["max_used_ratio_by_dir"] == {a: 0.5}
    rmqlog._native._flush_logging()
    assert "changes the store" not in caplog.text


def test_a_writer_alone_that_names_another_value_changes_it_and_warns(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="rmqlog")
    d = str(tmp_path / "s")
    CommitLog(d, **STORE).close()
    # Named, even as the default: the open's value wins, and says what it replaced.
    with CommitLog(d, retain_unconsumed=False, retention_hours=None) as log:
        got = log.recorded_settings()
    assert (got["retain_unconsumed"], got["retention_hours"]) == (False, None)
    assert got["segment_size"] == 8192 and got["strategy"] == "most_free"  # not named: kept
    rmqlog._native._flush_logging()
    warned = [r.getMessage() for r in caplog.records if "changes the store" in r.getMessage()]
    assert len(warned) == 2, warned
    assert any("retain_unconsumed from True to False" in w for w in warned), warned
    assert any("retention_hours from 12.5 to None" in w for w in warned), warned


def test_with_other_writers_open_a_change_is_refused_and_no_change_joins(tmp_path):
    d = str(tmp_path / "s")
    with CommitLog(d, exclusive=False, **STORE) as first:
        with pytest.raises(ConfigurationError) as e:
            CommitLog(d, exclusive=False, retain_unconsumed=False, segment_size=4096)
        msg = str(e.value)
        assert "retain_unconsumed is True there, False here" in msg, msg
        assert "segment_size is 8192 there, 4096 here" in msg, msg
        with CommitLog(d, exclusive=False) as second:  # names nothing: the store's settings
            assert second.stats()["strategy"] == "most_free"
            second.append(b"y")
        first.append(b"z")
    with CommitLog(d, read_only=True) as ro:
        assert _store_wide(ro.recorded_settings())["retain_unconsumed"] is True


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
    CommitLog([a, b], max_used_ratio={a: 0.5}, force_clean_ratio=0.999).close()
    with CommitLog(a, read_only=True) as ro:
        got = ro.recorded_settings()
    assert got["max_used_ratio"] is None and got["max_used_ratio_by_dir"] == {a: 0.5}
    assert got["force_clean_ratio"] == 0.999 and got["force_clean_ratio_by_dir"] == {}


def test_the_command_lines_writer_keeps_the_recorded_settings(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    with CommitLog(
        dirs,
        segment_size=8192,
        strategy="most_free",
        flush="sync",
        retention_hours=5.0,
        retain_unconsumed=True,
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


def test_the_same_settings_spelled_otherwise_are_no_change(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="rmqlog")
    a, b = tmp_path / "s" / "a", tmp_path / "s" / "b"
    CommitLog(
        [str(a), str(b)], max_used_ratio={str(a): 0.8, str(b): 0.9}, delete_hours=(2, 3)
    ).close()
    # The same map in another order, the same hours in another order and repeated.
    ratios = {str(b): 0.9, str(a): 0.8}
    CommitLog([str(b), str(a)], max_used_ratio=ratios, delete_hours=(3, 2, 3)).close()
    # Moved: the ratios recorded for a and b are the moved directories'.
    (tmp_path / "s").rename(tmp_path / "t")
    a2, b2 = tmp_path / "t" / "a", tmp_path / "t" / "b"
    with CommitLog([str(a2), str(b2)]) as log:
        got = log.recorded_settings()
    assert got["max_used_ratio_by_dir"] == {str(a2): 0.8, str(b2): 0.9}
    assert got["delete_hours"] == (2, 3)
    rmqlog._native._flush_logging()
    assert "changes the store" not in caplog.text, caplog.text
