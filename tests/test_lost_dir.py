"""A directory lost for good: opening fails closed naming what is gone, unless accept_lost."""

import shutil
from pathlib import Path

import pytest

from rmqlog import CommitLog, ConfigurationError, CorruptionError


def build(tmp_path, n=300):
    dirs = [str(tmp_path / f"d{i}") for i in range(3)]
    with CommitLog(dirs, segment_size=8192, flush="sync") as log:
        offs = log.append_batch([b"%06d" % i * 50 for i in range(n)])
        segs = [(s.start_offset, s.size, str(Path(s.path).parent)) for s in log.segments()]
    return dirs, offs, segs


def test_lost_directory_fails_closed_then_opens_with_holes(tmp_path):
    dirs, offs, segs = build(tmp_path)
    shutil.rmtree(dirs[1])  # the disk died
    # A directory gone is a setup question, not damage: the error names it and both ways on.
    with pytest.raises(ConfigurationError) as err:
        CommitLog([dirs[0], dirs[2]], segment_size=8192)
    msg = str(err.value)
    assert not isinstance(err.value, CorruptionError)
    assert dirs[1] in msg and "accept_lost" in msg and "the log needs offsets [" in msg, msg

    lost = {start for start, _, d in segs if d == dirs[1]}
    with CommitLog([dirs[0], dirs[2]], segment_size=8192, accept_lost=[dirs[1]]) as log:
        holes = log.holes()
        assert {h[0] for h in holes} >= lost - {segs[-1][0]}
        assert all(h[2] == dirs[1] for h in holes)
        scanned = dict(log.scan())
        for i, off in enumerate(offs):
            start = max(s for s, _, _ in segs if s <= off)
            if start in lost:
                assert off not in scanned
                with pytest.raises(CorruptionError, match="lost directory"):
                    log.read(off)
            else:
                assert bytes(scanned[off]) == b"%06d" % i * 50
        # Appends go on, to the live directories.
        new = log.append(b"after the loss")
        assert bytes(log.read(new)) == b"after the loss"
        assert all(Path(s.path).parent != Path(dirs[1]) for s in log.segments()[-1:])
        assert log.verify() == []
    # A read-only open accepting the loss reads the same.
    with CommitLog(dirs[0], read_only=True, accept_lost=[dirs[1]]) as ro:
        assert bytes(ro.read(new)) == b"after the loss"
