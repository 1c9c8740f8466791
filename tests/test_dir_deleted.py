"""A directory deleted from under a running writer: appends go on elsewhere, the directory goes
offline, and reopening fails closed until the loss is accepted."""

import shutil

import pytest

from rmqlog import CommitLog, ConfigurationError


def test_directory_deleted_under_a_running_writer(tmp_path):
    dirs = [str(tmp_path / f"d{i}") for i in range(3)]
    events = []
    log = CommitLog(
        dirs,
        segment_size=8192,
        flush="sync",
        on_dir_event=lambda *ev: events.append(ev),
    )
    before = log.append_batch([b"%05d" % i * 100 for i in range(60)])
    shutil.rmtree(dirs[1])
    after = [log.append(b"%05d" % i * 100) for i in range(60, 200)]
    states = {d.path: d.state for d in log.dirs()}
    assert states[dirs[1]] == "offline"
    assert states[dirs[0]] == states[dirs[2]] == "writable"
    created_after = [s for s in log.segments() if s.start_offset > before[-1]]
    assert len(created_after) >= 3  # several of them on d1's turn of the round robin
    assert all(not s.path.startswith(dirs[1]) for s in created_after)
    for i, off in enumerate(after, start=60):
        assert bytes(log.read(off)) == b"%05d" % i * 100
    log.close()
    assert any(ev[0] == dirs[1] and ev[2] == "offline" for ev in events)

    with pytest.raises(ConfigurationError, match="accept_lost"):
        CommitLog(dirs[0::2], segment_size=8192)
    with CommitLog(dirs[0::2], segment_size=8192, accept_lost=[dirs[1]]) as again:
        assert again.holes(), "the lost directory's offsets are holes"
        assert again.verify() == []
        for i, off in enumerate(after, start=60):
            assert bytes(again.read(off)) == b"%05d" % i * 100
