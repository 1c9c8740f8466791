"""``record_format=`` from Python: a new store writes the format asked for (checked on disk), an
existing store keeps its own whatever an open asks, every read path and ``verify`` take both,
and ``record_format``, ``stats()`` and ``rmqlog stat`` say which."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rmqlog import DEFAULTS, CommitLog

MAGIC = {1: bytes.fromhex("01514d52"), 2: bytes.fromhex("02514d52")}


def magics(log):
    """The magic of every record, read from the segment files."""
    out = []
    for off, _ in log.scan():
        seg = next(s for s in log.segments() if s.start_offset <= off < s.start_offset + s.size)
        with open(seg.path, "rb") as f:
            f.seek(off - seg.start_offset + 4)
            out.append(f.read(4))
    return out


def test_new_stores_write_format_2_by_default(tmp_path):
    assert DEFAULTS["record_format"] == 2
    with CommitLog(str(tmp_path / "s")) as log:
        log.append(b"a")
        assert log.record_format == 2
        assert magics(log) == [MAGIC[2]]


@pytest.mark.parametrize("fmt", [1, 2])
def test_the_format_asked_for_and_kept(tmp_path, fmt):
    path = str(tmp_path / "s")
    bodies = [b"%d" % i * (i % 30) for i in range(300)]
    with CommitLog(path, record_format=fmt, segment_size=4096) as log:
        offsets = log.append_batch(bodies)
        assert log.record_format == fmt and log.stats()["record_format"] == fmt
    with CommitLog(path, record_format=3 - fmt, segment_size=4096) as log:
        assert log.record_format == fmt, "an existing store keeps its format"
        offsets += log.append_batch([b"after"])
        assert magics(log) == [MAGIC[fmt]] * 301
        assert [bytes(b) for _, b in log.scan()] == [*bodies, b"after"]
        assert bytes(log.read(offsets[150])) == bodies[150]
        got = [b for batch in log.scan_batches(body="binary", threads=2) for b in batch["body"]]
        assert [b.as_py() for b in got] == [*bodies, b"after"]
        assert log.verify() == []
    with CommitLog(path, read_only=True) as log:
        assert log.record_format == fmt
    cli = [sys.executable, "-m", "rmqlog", "stat"]
    out = subprocess.run([*cli, path], capture_output=True, text=True, check=True).stdout
    assert f"record format: {fmt}" in out
    out = subprocess.run([*cli, "--json", path], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["record_format"] == fmt


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (0, ValueError, r"record_format must be 1 .* or 2 .*, got 0"),
        (3, ValueError, r"record_format must be 1 .* or 2 .*, got 3"),
        (-1, ValueError, r"record_format must be 1 .* or 2 .*, got -1"),
        (10**30, ValueError, r"record_format must be 1 .* or 2 .*, got 10{30}"),
        ("2", TypeError, "record_format must be an int, got str"),
        (True, TypeError, "record_format must be an int, got bool"),
    ],
)
def test_bad_formats_are_refused_before_touching_the_disk(tmp_path, value, error, match):
    path = tmp_path / "s"
    with pytest.raises(error, match=match):
        CommitLog(str(path), record_format=value)
    assert not path.exists()
