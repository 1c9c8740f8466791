"""``scan_batches(threads=N)`` from Python: the batches of one thread whatever ``N`` (and through
the Arrow C stream and ``to_arrow``), errors after the same rows, and no worker thread left once
a scan is dropped unfinished or its log closed."""

from __future__ import annotations

import contextlib
import gc
import os
import time

import pyarrow as pa
import pytest

import rmqlog
from rmqlog import CommitLog, CorruptionError

SEG = 64 << 10


@pytest.fixture
def log(tmp_path):
    log = CommitLog(str(tmp_path / "log"), segment_size=SEG, flush="none")
    for i in range(0, 3000, 100):
        log.append_batch([b"%d" % n * (1 + n % 50) for n in range(i, i + 100)])
    yield log
    log.close()


def scan_threads() -> int:
    """This process's threads named rmqlog-scan-*."""
    n = 0
    for t in os.listdir("/proc/self/task"):
        with contextlib.suppress(FileNotFoundError), open(f"/proc/self/task/{t}/comm") as f:
            n += f.read().startswith("rmqlog-scan")
    return n


def scan_threads_are(want: int) -> int:
    """scan_threads() once it is ``want`` (a joined thread's task may linger in /proc for a
    moment; a thread names itself once it runs), or after 5 s."""
    deadline = time.monotonic() + 5
    while (n := scan_threads()) != want and time.monotonic() < deadline:
        time.sleep(0.001)
    return n


def batches(scan):
    return [b.to_pydict() for b in scan]


@pytest.mark.parametrize("threads", [2, 3, None])
@pytest.mark.parametrize("max_records", [1, 77, 65536])
def test_the_batches_of_one_thread(log, threads, max_records):
    one = batches(log.scan_batches(max_records=max_records, threads=1, body="binary"))
    assert sum(len(b["offset"]) for b in one) == 3000
    got = batches(log.scan_batches(max_records=max_records, threads=threads, body="binary"))
    assert got == one


def test_a_range_and_the_stream_and_to_arrow(log):
    offsets = [o for o, _ in log.scan()]
    start, end = offsets[100], offsets[2500] + 1
    one = log.scan_batches(start, end, threads=1, max_records=50)
    many = log.scan_batches(start, end, threads=3, max_records=50)
    assert "threads=3" in repr(many)
    stream = pa.RecordBatchReader.from_stream(many).read_all()
    assert stream.to_pydict() == pa.Table.from_batches(list(one)).to_pydict()
    assert stream["offset"].to_pylist() == offsets[100:2501]
    table = rmqlog.to_arrow(log, start, end, threads=2)
    assert table["offset"].to_pylist() == offsets[100:2501]


def test_damage_ends_the_scan_after_the_same_rows(tmp_path):
    path = str(tmp_path / "log")
    log = CommitLog(path, segment_size=SEG, flush="none")
    offsets = log.append_batch([b"r%05d" % i * 20 for i in range(2000)])
    victim = offsets[1500]
    seg = next(s for s in log.segments() if s.start_offset <= victim < s.start_offset + s.size)
    log.close()
    with open(seg.path, "r+b") as f:
        f.seek(victim - seg.start_offset + 40)  # a body byte: only the CRC check sees it
        f.write(b"\xff")
    log = CommitLog(path, read_only=True)
    try:
        for threads in (1, 2, 3):
            rows = []
            scan = log.scan_batches(columns=["offset"], max_records=64, threads=threads)
            with pytest.raises(CorruptionError, match=str(victim)):
                for b in scan:
                    rows += b["offset"].to_pylist()
            assert rows == offsets[:1500]
            assert scan.position == victim
    finally:
        log.close()


def test_no_worker_outlives_an_unfinished_scan(log):
    for threads in (1, 2, 4):
        scan = log.scan_batches(max_records=10, threads=threads)
        next(scan)
        assert scan_threads_are(threads) == threads
        del scan
        gc.collect()
        assert scan_threads_are(0) == 0, "a worker outlived its scan"


def test_close_ends_a_scan_whose_workers_built_ahead(log):
    scan = log.scan_batches(max_records=10, threads=2)
    assert next(scan).num_rows == 10
    time.sleep(0.05)
    log.close()
    with pytest.raises(rmqlog.ClosedError):
        next(scan)
    assert scan_threads_are(0) == 0


CHILD = """
import os, sys
from rmqlog import ClosedError, CommitLog
log = CommitLog(sys.argv[1])
scans = [log.scan_batches(threads=t, max_records=100) for t in (1, 4)]
for s in scans:
    next(s)
pid = os.fork()
if pid == 0:
    for s in scans:
        try:
            next(s)
            print("child: a batch", flush=True)
        except ClosedError:
            print("child: closed", flush=True)
    del scans
    sys.exit(0)  # a normal exit: atexit hooks run
_, status = os.waitpid(pid, 0)
print("child status", status, flush=True)
print("parent rows", sum(b.num_rows for s in scans for b in s), flush=True)
log.close()
"""


def test_a_forked_child_gets_closed_and_exits_quietly(tmp_path):
    """A scan started before fork is closed in the child (its workers are the parent's: never
    joined there), and the child's exit stops no thread it does not have."""
    import subprocess
    import sys

    path = str(tmp_path / "log")
    with CommitLog(path) as log:
        log.append_batch([b"f" * 100] * 2000)
    run = subprocess.run(
        [sys.executable, "-c", CHILD, path], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        "child: closed",
        "child: closed",
        "child status 0",
        "parent rows 3800",
    ], run.stdout
    assert "panic" not in run.stderr.lower(), run.stderr
