"""Rows against the Python stores a user would otherwise pick, at equal durability:
persist-queue's SQLiteQueue with and without a sync per put, and sqlite3 itself."""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable
from itertools import repeat

from harness import BODY_100, SEGMENT, Row, Sizes, Workdir, alternate, rates, say, skipped, timed

NAMES = (
    "py_vs_persistqueue_sync_100",
    "py_vs_persistqueue_sync_100_1t",
    "py_vs_persistqueue_nosync_100",
    "py_vs_sqlite_append_100",
)


def _threaded(put: Callable[[bytes], object], n: int, threads: int) -> Callable[[], None]:
    """``n`` puts of 100 B split over ``threads`` producer threads, all started, then joined
    (one thread: the calling one)."""

    def one(k: int) -> None:
        for _ in range(k):
            put(BODY_100)

    if threads == 1:
        return lambda: one(n)

    def go() -> None:
        share = [n // threads + (i < n % threads) for i in range(threads)]
        ts = [threading.Thread(target=one, args=(k,)) for k in share]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    return go


def _persistqueue_rows(s: Sizes, wd: Workdir, persistqueue) -> list[Row]:
    from rmqlog import CommitLog

    def ours(flush: str, n: int, threads: int) -> Callable[[], float]:
        def run() -> float:
            d = wd.new()
            log = CommitLog(os.path.join(d, "log"), segment_size=SEGMENT, flush=flush)
            log.append(BODY_100)  # creates the first segment: outside the clock
            t = timed(_threaded(log.append, n, threads))
            assert log.max_offset == (n + 1) * (32 + len(BODY_100)), log.max_offset
            log.close()
            shutil.rmtree(d)
            return t / n

        return run

    def pq_sync(n: int, threads: int) -> Callable[[], float]:
        # The defaults: auto_commit=True, a commit per put; SQLite's default synchronous=FULL in
        # the WAL mode persist-queue sets, so every commit fsyncs the WAL. Producer threads need
        # multithreading=True (a connection usable from every thread; puts take its lock).
        def run() -> float:
            d = wd.new()
            q = persistqueue.SQLiteQueue(os.path.join(d, "q"), multithreading=threads > 1)
            t = timed(_threaded(q.put, n, threads))
            assert q.qsize() == n, q.qsize()
            q.close()
            shutil.rmtree(d)
            return t / n

        return run

    def pq_nosync(n: int) -> Callable[[], float]:
        # SQLiteQueue commits (and so fsyncs) every put whatever auto_commit says (auto_commit
        # only defers the acknowledgement of gets), so the put without a sync of its own is the
        # file Queue's, with its defaults: a flush and an info-file rename per put, an fsync when
        # a chunk of 100 puts is full.
        def run() -> float:
            d = wd.new()
            q = persistqueue.Queue(os.path.join(d, "q"))
            t = timed(_threaded(q.put, n, 1))
            assert q.qsize() == n, q.qsize()
            del q
            shutil.rmtree(d)
            return t / n

        return run

    rows = []
    n = s.pq_sync_puts
    for threads, name in ((4, NAMES[0]), (1, NAMES[1])):
        say(f"persist-queue, a sync per put ({n} puts per repetition, {threads} threads)")
        to, tb = alternate(s.pq_reps, ours("sync", n, threads), pq_sync(n, threads))
        rows.append(
            rates(
                name,
                1 / to,
                1 / tb,
                f"CommitLog(flush='sync').append(100 B) from {threads} producer thread(s) "
                "(concurrent appends group-commit)",
                f"persistqueue.SQLiteQueue(path) defaults (a commit per put, WAL, "
                f"synchronous=FULL: an fsync per commit), put(100 B) from {threads} thread(s)",
                items=n,
                threads=threads,
            )
        )
    n_ours, n_pq = s.records_100, s.pq_nosync_puts
    say(f"persist-queue, no sync per put ({n_pq} puts per repetition; ours {n_ours} appends)")
    to, tb = alternate(s.pq_reps, ours("async", n_ours, 1), pq_nosync(n_pq))
    rows.append(
        rates(
            NAMES[2],
            1 / to,
            1 / tb,
            "CommitLog.append(100 B), flush='async' (default: a background sync every 500 ms)",
            "persistqueue.Queue(path) defaults (file chunks: a flush and an info-file rename per "
            "put, an fsync every 100 puts), put(100 B)",
            items=n_ours,
            baseline_items=n_pq,
        )
    )
    return rows


def _sqlite_row(s: Sizes, wd: Workdir) -> Row:
    from rmqlog import CommitLog

    n = s.sqlite_records
    bodies = [bytes(BODY_100) for _ in range(n)]

    def ours() -> float:
        d = wd.new()
        log = CommitLog(os.path.join(d, "log"), segment_size=SEGMENT)
        got: list[int] = []
        t = timed(lambda: got.extend(log.append_batch(bodies)))
        assert len(got) == n, len(got)
        log.close()
        shutil.rmtree(d)
        return t

    def base() -> float:
        d = wd.new()
        con = sqlite3.connect(os.path.join(d, "log.db"))
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")
        con.execute("CREATE TABLE log (id INTEGER PRIMARY KEY, ts INTEGER NOT NULL, body BLOB)")
        con.commit()

        def go() -> None:
            ts = time.time_ns() // 1_000_000
            with con:  # one transaction
                con.executemany("INSERT INTO log (ts, body) VALUES (?, ?)", zip(repeat(ts), bodies))

        t = timed(go)
        assert con.execute("SELECT count(*) FROM log").fetchone()[0] == n
        con.close()
        shutil.rmtree(d)
        return t

    say(f"sqlite3 ({n} records of 100 B in one call)")
    to, tb = alternate(s.reps, ours, base)
    return rates(
        NAMES[3],
        n / to,
        n / tb,
        f"CommitLog.append_batch(list of {n:,} bytes of 100 B), flush='async'",
        "sqlite3 executemany INSERT (ts, body) into a WAL table (synchronous=NORMAL, no sync per "
        "commit), one transaction",
        items=n,
    )


def run(s: Sizes, wd: Workdir) -> list[Row]:
    rows = []
    try:
        import persistqueue
    except ImportError as e:
        reason = f"persist-queue is not installed ({e}); pip install 'rmqlog[bench]'"
        rows += [skipped(n, reason) for n in NAMES[:3]]
    else:
        rows += _persistqueue_rows(s, wd, persistqueue)
    rows.append(_sqlite_row(s, wd))
    return rows
