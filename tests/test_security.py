"""File permissions, and a read-only open that never writes."""

import hashlib
import os
import stat
from pathlib import Path

import pytest

from rmqlog import CommitLog


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """Every file under root: (mtime_ns, sha256)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[str(p)] = (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def test_files_are_created_0640_by_default(tmp_path):
    old = os.umask(0o022)
    try:
        with CommitLog(tmp_path / "s", segment_size=4096) as log:
            log.append_batch([b"x" * 1000] * 10)
        with CommitLog(tmp_path / "t", segment_size=4096, file_mode=0o600) as log:
            log.append(b"y")
    finally:
        os.umask(old)
    for p in (tmp_path / "s").iterdir():
        if p.name != "rmqlog.lock":
            assert stat.S_IMODE(p.stat().st_mode) == 0o640, p
    assert stat.S_IMODE((tmp_path / "t" / f"{0:020d}").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "t" / "rmqlog.meta").stat().st_mode) == 0o600


@pytest.mark.parametrize("mode", [0o1777, 0o7000, 0o400, -1])
def test_bad_file_modes_are_refused_before_touching_the_disk(tmp_path, mode):
    with pytest.raises(ValueError, match="file_mode"):
        CommitLog(tmp_path / "s", file_mode=mode)
    assert not (tmp_path / "s").exists()


def test_read_only_open_never_writes(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    with CommitLog(dirs, segment_size=4096, flush="none") as log:
        offs = log.append_batch([b"%d" % i * 100 for i in range(100)])
    # A crashed writer: no clean metadata, so a reader must find the end by scanning.
    for d in dirs:
        (d / "rmqlog.meta").unlink()
    before = snapshot(tmp_path)
    with CommitLog(dirs, read_only=True) as ro:
        ro.refresh()
        assert [o for o, _ in ro.scan()] == offs
        assert ro.verify() == []
        ro.offset_for_timestamp(0)
    assert snapshot(tmp_path) == before
