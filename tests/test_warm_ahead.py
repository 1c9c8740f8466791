"""The ``rmqlog-warm`` thread (``warm_ahead``): only a writer runs it, ``close`` stops it, and a
writer killed while pages ahead of its records are warm recovers every acknowledged record."""

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rmqlog import CommitLog

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="thread names via /proc")

THREADS = """
import os, sys, time
from rmqlog import CommitLog

def count():
    tasks = os.listdir("/proc/self/task")
    names = []
    for t in tasks:
        try:
            names.append(open(f"/proc/self/task/{t}/comm").read().strip())
        except FileNotFoundError:  # a thread that just ended
            pass
    return names.count("rmqlog-warm")

def warmers(expected):
    # A new thread names itself once it runs: on a loaded machine, a moment after the open.
    deadline = time.monotonic() + 5
    while (n := count()) != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    return n

path = sys.argv[1]
seen = {}
log = CommitLog(path, segment_size=1 << 20)
seen["writer"] = warmers(1)
log.append(b"x")
reader = CommitLog(path, read_only=True)
seen["writer and reader"] = warmers(1)
reader.close()
log.close()
seen["closed"] = warmers(0)
for name, kw in [("read_only", {"read_only": True}), ("warm_ahead=0", {"warm_ahead": 0}),
                 ("sync", {"flush": "sync"})]:
    log = CommitLog(path, **kw)
    seen[name] = warmers(0)
    log.close()
print(seen)
"""


def test_only_a_writer_that_does_not_sync_each_append_runs_the_warmer(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", THREADS, str(tmp_path / "log")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert eval(out) == {
        "writer": 1,
        "writer and reader": 1,
        "closed": 0,
        "read_only": 0,
        "warm_ahead=0": 0,
        "sync": 0,
    }


def test_a_bad_warm_ahead_names_the_option(tmp_path: Path) -> None:
    with pytest.raises((ValueError, OverflowError, TypeError), match="warm_ahead"):
        CommitLog(tmp_path / "log", warm_ahead=-1)


WRITER = """
import sys, time
from rmqlog import CommitLog

log = CommitLog(sys.argv[1], segment_size=1 << 20, warm_ahead=4 << 20, flush="none")
i = 0
while True:
    for _ in range(50):
        off = log.append(i.to_bytes(8, "little") * 100)
        print(off, i, flush=True)
        i += 1
    time.sleep(0.02)  # idle: the warmer writes zeros ahead of the records
"""


def test_a_writer_killed_with_pages_warm_ahead_keeps_every_acknowledged_record(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "log")
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WRITER), path], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    acked = []
    for line in proc.stdout:
        off, i = map(int, line.split())
        acked.append((off, i))
        if len(acked) >= 3000:  # about three segments
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    log = CommitLog(path, segment_size=1 << 20)
    assert len(log.segments()) >= 3
    for off, i in acked:
        assert bytes(log.read(off)) == i.to_bytes(8, "little") * 100
    assert log.verify() == []
    end = log.max_offset
    assert end >= acked[-1][0] + 32 + 800
    more = log.append(b"after the crash")
    assert bytes(log.read(more)) == b"after the crash"
    log.close()
