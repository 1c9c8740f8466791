"""Rows mp_append_100_4proc, mp_append_batch_100_4proc, mp_vs_sqlite_4proc, mp_sync_append_4proc:
four producer processes appending to one store (``exclusive=False``), as aggregate throughput,
against one process appending the same records (rmqlog, exclusive) and against sqlite3 in WAL mode
written by four processes. The sync row compares ``flush="sync"`` appends: what four processes
gain over one when their syncs are shared (group commit across processes).

Every side runs in fresh worker processes started before the clock: each opens its store, says
"ready", and waits for a start byte on stdin; the clock runs from the start bytes to the last
worker's "done" (its records appended; as in the py_append rows, closing is outside the clock).
Process start-up and imports are outside the clock on both sides.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

from harness import SEGMENT, Row, Sizes, Workdir, alternate, say, throughput

NAMES = (
    "mp_append_100_4proc",
    "mp_append_batch_100_4proc",
    "mp_vs_sqlite_4proc",
    "mp_sync_append_4proc",
)
# flush="sync" appends per process in mp_sync_append_4proc (the one-process side appends them all).
SYNC_EACH = 1_000
PROCS = 4

RMQLOG_WORKER = """
import sys
from rmqlog import CommitLog
path, n, batch, exclusive = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
flush = sys.argv[5]
body = bytes(range(100))
log = CommitLog(path, segment_size={segment}, exclusive=exclusive, flush=flush)
print("ready", flush=True)
sys.stdin.read(1)
if batch:
    bodies = [body] * batch
    append_batch = log.append_batch
    for _ in range(n // batch):
        append_batch(bodies)
else:
    append = log.append
    for _ in range(n):
        append(body)
print("done", flush=True)
log.close()  # outside the clock, as in the py_append rows
"""

SQLITE_WORKER = """
import sqlite3, sys
path, n = sys.argv[1], int(sys.argv[2])
body = bytes(range(100))
db = sqlite3.connect(path, timeout=60, isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA synchronous=NORMAL")
print("ready", flush=True)
sys.stdin.read(1)
insert = "INSERT INTO log (body) VALUES (?)"
for start in range(0, n, 1000):
    db.execute("BEGIN IMMEDIATE")
    db.executemany(insert, ((body,) for _ in range(min(1000, n - start))))
    db.execute("COMMIT")
print("done", flush=True)
db.close()
"""


def _race(argvs: list[list[str]]) -> float:
    """Starts one worker per argv, waits for all to be ready, then times them from the start
    bytes to the last one done."""
    procs = [
        subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for argv in argvs
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        t0 = time.perf_counter()
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("g")
            p.stdin.flush()
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline().strip()
            assert line == "done", f"a worker failed: {line!r}"
        t = time.perf_counter() - t0
        for p in procs:
            assert p.wait(timeout=60) == 0
        return t
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def run(s: Sizes, wd: Workdir) -> list[Row]:
    total = s.records_100
    each = total // PROCS
    worker = textwrap.dedent(RMQLOG_WORKER.format(segment=SEGMENT))

    def rmqlog_side(
        procs: int, batch: int, flush: str = "async", records: int = total
    ) -> Callable[[], float]:
        def go() -> float:
            d = wd.new()
            path = os.path.join(d, "log")
            exclusive = "1" if procs == 1 else "0"
            n = records // procs
            argv = [sys.executable, "-c", worker, path, str(n), str(batch), exclusive, flush]
            if procs > 1:
                # The store exists before the workers race to join it.
                from rmqlog import CommitLog

                CommitLog(path, segment_size=SEGMENT).close()
            t = _race([argv] * procs)
            shutil.rmtree(d)
            return t

        return go

    def sqlite_side() -> float:
        import sqlite3

        d = wd.new()
        path = os.path.join(d, "log.db")
        db = sqlite3.connect(path)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE log (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
        db.close()
        argv = [sys.executable, "-c", textwrap.dedent(SQLITE_WORKER), path, str(each)]
        t = _race([argv] * PROCS)
        shutil.rmtree(d)
        return t

    rows = []
    say("appends from 4 processes (100 B, single)")
    t4, t1 = alternate(s.reps, rmqlog_side(PROCS, 0), rmqlog_side(1, 0))
    rows.append(
        throughput(
            "mp_append_100_4proc",
            total,
            t4,
            t1,
            f"{PROCS} processes x {each:,} append(100 B), exclusive=False, flush='async'",
            f"one process, {total:,} append(100 B), exclusive, flush='async'",
        )
    )
    say("appends from 4 processes (100 B, batches)")
    t4, t1 = alternate(s.reps, rmqlog_side(PROCS, s.batch), rmqlog_side(1, s.batch))
    rows.append(
        throughput(
            "mp_append_batch_100_4proc",
            total,
            t4,
            t1,
            f"{PROCS} processes, append_batch of {s.batch} x 100 B, exclusive=False",
            "one process, the same batches, exclusive",
            batch=s.batch,
        )
    )
    say("appends from 4 processes against sqlite3 WAL")
    t4, tq = alternate(s.reps, rmqlog_side(PROCS, 0), sqlite_side)
    rows.append(
        throughput(
            "mp_vs_sqlite_4proc",
            total,
            t4,
            tq,
            f"{PROCS} processes x {each:,} append(100 B), exclusive=False, flush='async'",
            f"sqlite3 WAL, synchronous=NORMAL, {PROCS} processes x {each:,} inserts, "
            "BEGIN IMMEDIATE per 1,000",
        )
    )
    say("durable appends from 4 processes (100 B, flush='sync')")
    synced = SYNC_EACH * PROCS
    t4, t1 = alternate(
        s.reps,
        rmqlog_side(PROCS, 0, "sync", synced),
        rmqlog_side(1, 0, "sync", synced),
    )
    rows.append(
        throughput(
            "mp_sync_append_4proc",
            synced,
            t4,
            t1,
            f"{PROCS} processes x {SYNC_EACH:,} append(100 B), exclusive=False, flush='sync'",
            f"one process, {synced:,} append(100 B), exclusive, flush='sync', one thread",
        )
    )
    return rows
