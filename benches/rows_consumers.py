"""Rows consumer_poll_100, consumer_poll_vs_persistqueue_ack, consumer_commit_sync,
consumer_nack_redeliver, consumer_filter_1in10_vs_all: a named consumer (``log.consumer(name)``)
draining a log and committing its position, against a scan of the same records, against
persist-queue's SQLiteAckQueue get + ack of the same records at equal durability, and its durable
``commit()`` against the pwrite + fdatasync it is made of; how soon a record handed back with
``nack()`` in one process reaches a poll waiting for it in another (a latency against its bound,
1 ms at p99); and a consumer whose filter (``headers=``, evaluated in Rust) accepts 1 record in
10, against an unfiltered one receiving every record.

The consumers are opened with ``exclusive=True``: the single-consumer API (one open holds the
name and reads from its own position). A shared open (``exclusive=False``, the default) takes the
name's byte lock and reads and rewrites its claims table at every poll and commit; the
persist-queue row reports that mode beside it (``shared_*``, no target).

Every repetition opens a new consumer (a new name, created at "earliest"), so each one drains the
whole log; opening it is outside the clock, as opening a log is in the other rows. The records are
appended (and flushed) before the clock, as the queue's records are put before it. Every timed run
of either side starts after an ``os.sync()`` (outside the clock): these rows time syncs, and the
writeback of the previous repetition's teardown (a removed store) would otherwise land in the
next one's.
"""

from __future__ import annotations

import gc
import mmap
import os
import shutil
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from itertools import count
from time import perf_counter

from harness import (
    BODY_100,
    SEGMENT,
    Row,
    Sizes,
    Workdir,
    alternate,
    distribution,
    rates,
    say,
    skipped,
    timed,
    times,
)
from pylog import HEADER_LEN

NAMES = (
    "consumer_poll_100",
    "consumer_poll_vs_persistqueue_ack",
    "consumer_commit_sync",
    "consumer_nack_redeliver",
    "consumer_filter_1in10_vs_all",
)
# consumer_filter_1in10_vs_all: one record in this many carries the header the filter accepts.
FILTER_EVERY = 10
# Records per poll() on both sides (poll's default).
FILTER_POLL = 500
# Quick mode's records and repetitions for that row: records_100's 20,000 drain in about a
# millisecond filtered, which a scheduler's tick on this shared machine swamps (ratios from 0.7
# to 5.9 over five passes); 200,000 in three alternating repetitions cost about a second.
FILTER_QUICK_RECORDS = 200_000
FILTER_QUICK_REPS = 3
# Records per poll_batches()/scan_batches() batch in consumer_poll_100: the default of both (and
# 64 MiB of bodies, their max_bytes default, is more than 65,536 x 100 B).
BATCH = 65_536
# Records per poll() and per commit (ours), per durable ack point (persist-queue).
EVERY = 100


def _missing() -> str | None:
    """Why no consumer row can run, or None."""
    from rmqlog import CommitLog

    if not hasattr(CommitLog, "consumer"):
        return "this rmqlog has no named consumers (CommitLog.consumer)"
    return None


def _fill(log, n: int, batch: int) -> None:
    """Appends ``n`` records of 100 B in batches and syncs them: durable before the clock."""
    for i in range(0, n, batch):
        log.append_batch([BODY_100] * min(batch, n - i))
    log.flush()
    assert log.max_offset == n * (HEADER_LEN + 100), log.max_offset


def _timed_quiet(fn: Callable[[], object]) -> float:
    """``timed(fn)`` after an ``os.sync()`` outside the clock: the writeback left by what ran
    before (the setup, the previous repetition's removed store or queue) is done first, so that
    the syncs timed wait for their own writes only (both sides of every row)."""
    os.sync()
    return timed(fn)


def _poll_row(s: Sizes, wd: Workdir) -> Row:
    from rmqlog import CommitLog

    n = s.records_100
    d = wd.new()
    log = CommitLog(os.path.join(d, "log"), segment_size=SEGMENT)
    _fill(log, n, s.batch)
    end = log.max_offset
    # Outside the clock: one scan maps the segment in for both sides, and both sides' batches have
    # the same columns (offset, timestamp, body as binary_view over the map).
    schema = next(iter(log.scan_batches(max_records=BATCH))).schema
    for _ in log.scan_batches(max_records=BATCH):
        pass
    probe = log.consumer("probe", start="earliest", exclusive=True)
    (first,) = probe.poll_batches(1, timeout=0)
    assert first.schema == schema, (first.schema, schema)
    probe.close()
    log.drop_consumer("probe")
    names = count()
    commit_s: list[float] = []

    def ours() -> float:
        name = f"poll-{next(names)}"
        # The single-consumer API (exclusive=True); a new name drains from the first record.
        c = log.consumer(name, start="earliest", exclusive=True)
        got = []

        def go() -> None:
            k = 0
            in_commit = 0.0  # the commits' share of the time, kept as an extra
            poll_batches, commit = c.poll_batches, c.commit
            while k < n:
                (b,) = poll_batches(BATCH, timeout=0)
                k += b.num_rows
                t0 = perf_counter()
                commit()  # durable: its slot written and fdatasync'd before it returns
                in_commit += perf_counter() - t0
            got.append(k)
            commit_s.append(in_commit)

        t = _timed_quiet(go)
        assert got == [n] and c.position == end and c.committed == end, (got, c)
        c.close()
        log.drop_consumer(name)
        return t

    def base() -> float:
        got = []

        def go() -> None:
            k = 0
            for b in log.scan_batches(max_records=BATCH):
                k += b.num_rows
            got.append(k)

        t = _timed_quiet(go)
        assert got == [n], got
        return t

    batches = -(-n // BATCH)
    say(f"consumer poll_batches ({n} records of 100 B, batches of {BATCH}, a commit per batch)")
    try:
        to, tb = alternate(s.reps, ours, base)
    finally:
        log.close()
        shutil.rmtree(d)
    return rates(
        NAMES[0],
        n / to,
        n / tb,
        f"log.consumer(name, exclusive=True).poll_batches({BATCH:,}) until drained, a durable "
        f"commit() after each batch ({batches} batches and commits), a new name per repetition",
        f"log.scan_batches(max_records={BATCH:,}) of the same {n:,} records (no position kept)",
        items=n,
        batch=BATCH,
        commits=batches,
        ours_commit_s=statistics.median(commit_s),
    )


def _ack_row(s: Sizes, wd: Workdir, persistqueue) -> Row:
    from rmqlog import CommitLog

    n = s.acks
    assert n % EVERY == 0, n
    commit_s: dict[bool, list[float]] = {True: [], False: []}

    def ours(exclusive: bool) -> Callable[[], float]:
        # Durability: commit() after every 100 records writes the consumer's 256-byte slot into
        # rmqlog.consumers in each directory of the store (one here) and fdatasyncs it before it
        # returns. After a crash (process or power) the consumer resumes at its last commit: at
        # most the 99 records polled since are delivered again (at least once).
        def run() -> float:
            d = wd.new()
            log = CommitLog(os.path.join(d, "log"), segment_size=SEGMENT)
            _fill(log, n, s.batch)
            c = log.consumer("ack", start="earliest", exclusive=exclusive)
            got = []

            def go() -> None:
                k = 0
                in_commit = 0.0
                poll, commit = c.poll, c.commit
                while k < n:
                    records = poll(EVERY, timeout=0)
                    assert records, k
                    k += len(records)
                    t0 = perf_counter()
                    commit()
                    in_commit += perf_counter() - t0
                got.append(k)
                commit_s[exclusive].append(in_commit)

            t = _timed_quiet(go)
            assert got == [n] and c.committed == log.max_offset, (got, c.committed)
            c.close()
            log.close()
            shutil.rmtree(d)
            return t

        return run

    def pq() -> float:
        # What persist-queue 1.1's SQLiteAckQueue does (its source): it forces auto_commit=True
        # (auto_commit=False is refused with a warning, "disable auto commit is not supported in
        # ack queue", and reset; task_done() then does nothing), so every get (status -> unack)
        # and every ack (status -> acked) is a transaction of its own, committed by the call;
        # there is no batched ack and no ack-flush method. nack/ack_failed are the other ends of
        # a get (not used here); shrink_disk_usage is a VACUUM (not called). Acked rows stay in
        # the table until clear_acked_data(), and a get scans past them (its SELECT filters on
        # status, which has no index): without clearing, gets slow down with every ack.
        #
        # Its connection is WAL (it sets journal_mode=WAL) at SQLite's default synchronous=FULL
        # (it does not set it): an fsync of the WAL at every commit, two per record. For the
        # durability ours has (one durable point per 100 records) the queue's one connection
        # (multithreading=False: gets and acks share it) runs at synchronous=NORMAL (a commit
        # reaches the WAL without a sync: it survives a process crash, as our slot's pwrite
        # does; checkpoints still sync), and every 100th record the queue's own
        # clear_acked_data(keep_latest=0) (deleting the acked rows) commits at synchronous=FULL:
        # that fsync of the WAL makes it and the 100 acks before it durable. After a power loss
        # the queue resumes at the last such point (auto_resume puts unacked gets back). NORMAL,
        # not OFF: OFF would also skip the syncs of the checkpoints, which then could lose acks.
        # Measured here: the same with next_in_order gets (no clearing) was slower, and a larger
        # wal_autocheckpoint no faster; the default (1,000 pages) stays.
        d = wd.new()
        q = persistqueue.SQLiteAckQueue(os.path.join(d, "q"), multithreading=False)
        con = q._putter  # its one connection (no public way to set a pragma)
        assert q.auto_commit and con is q._getter
        assert con.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL, the default
        con.execute("PRAGMA synchronous=NORMAL")
        for _ in range(n):
            q.put(BODY_100)
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the puts durable, the WAL empty
        got = []

        def go() -> None:
            get, ack, execute = q.get, q.ack, con.execute
            k = 0
            for _ in range(n // EVERY):
                for _ in range(EVERY):
                    ack(get(block=False))
                execute("PRAGMA synchronous=FULL")
                q.clear_acked_data(keep_latest=0)
                execute("PRAGMA synchronous=NORMAL")
                k += EVERY
            got.append(k)

        t = _timed_quiet(go)
        assert got == [n] and q.qsize() == 0, (got, q.qsize())
        assert q.unack_count() == 0 and q.acked_count() == 0
        assert con.execute(f"SELECT count(*) FROM {q._table_name}").fetchone()[0] == 0
        q.close()
        shutil.rmtree(d)
        return t

    say(f"consumer poll + commit per {EVERY} against persist-queue get + ack ({n} records)")
    to, tb, tsh = alternate(s.pq_reps, ours(True), pq, ours(False))
    say(f"  shared consumer (exclusive=False): {n / tsh:,.0f}/s, ratio {tb / tsh:.3g}")
    return rates(
        NAMES[1],
        n / to,
        n / tb,
        f"log.consumer(name, exclusive=True): poll({EVERY}) then a durable commit(), 100 B "
        "records, 1 consumer (shared_*: the same with exclusive=False)",
        "persistqueue.SQLiteAckQueue(path, multithreading=False): get() + ack() per record "
        f"(each its own commit, WAL, synchronous=NORMAL), and per {EVERY} records "
        "clear_acked_data(keep_latest=0) committed at synchronous=FULL (an fsync of the WAL)",
        items=n,
        every=EVERY,
        ours_commit_s=statistics.median(commit_s[True]),
        shared_per_s=n / tsh,
        shared_ratio=tb / tsh,
        shared_commit_s=statistics.median(commit_s[False]),
    )


_POSITION = struct.Struct("<QQ")  # 16 bytes: a sequence number, a position


def _commit_row(s: Sizes, wd: Workdir) -> Row:
    from rmqlog import CommitLog

    k = s.commits

    def ours() -> float:
        d = wd.new()
        log = CommitLog(os.path.join(d, "log"), segment_size=SEGMENT)
        log.append(BODY_100)
        log.flush()
        c = log.consumer("commit", start="earliest", exclusive=True)
        c.poll(1, timeout=0)
        commit = c.commit

        def go() -> None:
            # An exclusive commit writes its slot (the next sequence number, the position) and
            # syncs it at every call, moved or not.
            for _ in range(k):
                commit()

        t = _timed_quiet(go)
        assert c.committed == log.max_offset, c.committed
        c.close()
        log.close()
        shutil.rmtree(d)
        return t

    def base() -> float:
        d = wd.new()  # beside the stores: the same filesystem
        path = os.path.join(d, "position")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, bytes(4096), 0)  # zero-filled and synced, with its directory
            os.fsync(fd)
            dfd = os.open(d, os.O_RDONLY)
            os.fsync(dfd)
            os.close(dfd)

            def go() -> None:
                pwrite, fdatasync, pack = os.pwrite, os.fdatasync, _POSITION.pack
                for i in range(k):
                    pwrite(fd, pack(i, 132), 0)
                    fdatasync(fd)

            t = _timed_quiet(go)
        finally:
            os.close(fd)
        shutil.rmtree(d)
        return t

    say(f"consumer commit ({k} durable commits)")
    to, tb = alternate(s.reps, ours, base)
    return rates(
        NAMES[2],
        k / to,
        k / tb,
        "Consumer.commit() of an exclusive consumer, per call: its 256-byte slot pwritten into "
        "rmqlog.consumers and fdatasync'd (one directory)",
        "os.pwrite of 16 bytes at offset 0 of a zero-filled, synced file + os.fdatasync, per "
        "call, on the store's filesystem",
        items=k,
    )


# consumer_nack_redeliver: round trips of one record between two processes (hops: a nack in one,
# the poll waiting in the other returning), the pause a side holds the record before handing it
# back (so that the other side's poll is waiting by then), and the bound of the p99 (the target).
NACK_HOPS = 2_000
NACK_HOPS_QUICK = 200
NACK_HOLD_NS = 1_000_000
NACK_BOUND_S = 1e-3
NACK_NAME = "pingpong"
# The other side: this module run in a second process (the benches directory on its path).
NACK_CHILD = (
    "import sys; sys.path.insert(0, sys.argv[1]); import rows_consumers as r; r._nack_child()"
)


def _now() -> int:
    """CLOCK_MONOTONIC in nanoseconds: one clock for every process of the machine."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def _nack_hops(c, me: int, n: int, at: memoryview, rd: int, wr: int) -> None:
    """The ping-pong of consumer_nack_redeliver, as side ``me`` (0: the bench's process, which
    holds the record at the start; 1: the other). Hop ``i`` is the ``nack()`` of side ``i % 2``
    and the ``poll()`` of the other side, waiting for it; ``at[4i:4i+4]`` get the nack's call and
    return and the poll's call and return (CLOCK_MONOTONIC). A side whose poll returned writes a
    byte to the other, which reads it before its next poll (its poll could otherwise take back
    the record it just handed back), and holds the record NACK_HOLD_NS before its nack: the other
    side's poll is in its wait by then (``not_waiting`` counts the hops where it was not)."""
    now, nack, poll = _now, c.nack, c.poll
    got_at = now()
    for i in range(n):
        if i % 2 == me:
            until = got_at + NACK_HOLD_NS
            while (left := until - now()) > 0:
                time.sleep(left / 1e9 if left > 200_000 else 0)
            at[4 * i] = now()
            nack()  # every record this open holds: the one record
            at[4 * i + 1] = now()
        else:
            if i > 0 and not os.read(rd, 1):
                raise RuntimeError(f"hop {i}: the other side ended")
            at[4 * i + 2] = now()
            records = poll(1, timeout=10, with_deliveries=True)
            at[4 * i + 3] = got_at = now()
            os.write(wr, b".")
            # The record was delivered once before the first hop, and once more at each.
            if [k for _o, _b, k in records] != [i + 2]:
                got = [(o, k) for o, _b, k in records]
                raise RuntimeError(
                    f"hop {i}: polled {got} (offset, deliveries), not delivery {i + 2}"
                )


def _nack_child() -> None:
    """Side 1 of consumer_nack_redeliver (argv: benches dir, store, times file, hops, the read
    and write ends of its pipes): a read-only open of the store, the name shared."""
    from rmqlog import CommitLog

    path, shm, n, rd, wr = sys.argv[2], sys.argv[3], *map(int, sys.argv[4:7])
    fd = os.open(shm, os.O_RDWR)
    times_map = mmap.mmap(fd, 32 * n)
    os.close(fd)
    at = memoryview(times_map).cast("q")
    with CommitLog(path, read_only=True) as log:
        c = log.consumer(NACK_NAME)
        print("ready", flush=True)
        gc.collect()
        gc.disable()
        _nack_hops(c, 1, n, at, rd, wr)
        c.close()
    at.release()
    times_map.close()
    print("done", flush=True)


def _nack_row(s: Sizes, wd: Workdir) -> Row:
    from rmqlog import CommitLog

    n = NACK_HOPS_QUICK if s.quick else NACK_HOPS
    d = wd.new()
    path = os.path.join(d, "store")
    shm = os.path.join(d, "times")
    with open(shm, "wb") as f:
        f.truncate(32 * n)
    fd = os.open(shm, os.O_RDWR)
    times_map = mmap.mmap(fd, 32 * n)
    os.close(fd)
    at = memoryview(times_map).cast("q")
    say(f"consumer nack -> a waiting poll in another process ({n} hops of one record)")
    with CommitLog(path, segment_size=SEGMENT) as log:
        log.append(BODY_100)
        log.flush()
        c = log.consumer(NACK_NAME, start="earliest")  # shared: the default
        first = c.poll(1, timeout=0, with_deliveries=True)
        assert [k for _o, _b, k in first] == [1], first  # its first delivery
        child_rd, main_wr = os.pipe()
        main_rd, child_wr = os.pipe()
        argv = [sys.executable, "-c", NACK_CHILD, os.path.dirname(os.path.abspath(__file__))]
        argv += [path, shm, str(n), str(child_rd), str(child_wr)]
        child = subprocess.Popen(
            argv, stdout=subprocess.PIPE, text=True, pass_fds=(child_rd, child_wr)
        )
        os.close(child_rd)  # the child's ends: a read here sees its exit
        os.close(child_wr)
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
            time.sleep(0.2)  # into its first poll
            gc.collect()
            gc.disable()
            t0 = perf_counter()
            try:
                _nack_hops(c, 0, n, at, main_rd, main_wr)
            finally:
                gc.enable()
            wall = perf_counter() - t0
            out, _ = child.communicate(timeout=60)
            assert child.returncode == 0 and out.strip() == "done", (child.returncode, out)
        finally:
            child.kill()
            child.wait()
            os.close(main_rd)
            os.close(main_wr)
        c.close()
    hops = [tuple(at[4 * i : 4 * i + 4]) for i in range(n)]
    at.release()
    times_map.close()
    shutil.rmtree(d)
    latency = [ret - call for call, _, _, ret in hops]
    dist = {
        **distribution(latency, ""),
        # Each direction: this process's nack to the other's poll, and back.
        **{k: v for k, v in distribution(latency[0::2], "to_other_").items() if "p9" in k},
        **{k: v for k, v in distribution(latency[1::2], "back_").items() if "p9" in k},
        # Where the time goes: the nack call, then from its return to the poll's return.
        **distribution([back - call for call, back, _, _ in hops], "nack_"),
        **distribution([ret - back for _, back, _, ret in hops], "after_nack_"),
        "samples": n,
        "not_waiting": sum(polled > call for call, _, polled, _ in hops),
        "hops_per_s": n / wall,
    }
    say(f"  nack -> poll latency (us): {dist}")
    p99 = dist["p99_us"]
    return times(
        NAMES[3],
        p99 / 1e6,
        NACK_BOUND_S,
        f"p99 of nack() (one record, a shared name) in one process to poll(timeout=10) returning "
        f"it in another process that was waiting for it: {n} hops, the record ping-ponged",
        f"the target bound, {NACK_BOUND_S * 1e3:g} ms",
        latency_us=p99,
        **dist,
    )


def run(s: Sizes, wd: Workdir) -> list[Row]:
    why = _missing()
    if why is not None:
        return [skipped(n, why) for n in NAMES]
    rows = []
    try:
        import pyarrow  # noqa: F401
    except ImportError as e:
        reason = f"pyarrow is not installed ({e}); pip install 'rmqlog[arrow]'"
        rows.append(skipped(NAMES[0], reason))
    else:
        rows.append(_poll_row(s, wd))
    try:
        import persistqueue
    except ImportError as e:
        reason = f"persist-queue is not installed ({e}); pip install 'rmqlog[bench]'"
        rows.append(skipped(NAMES[1], reason))
    else:
        rows.append(_ack_row(s, wd, persistqueue))
    rows.append(_commit_row(s, wd))
    from rmqlog import Consumer

    if hasattr(Consumer, "nack"):
        rows.append(_nack_row(s, wd))
    else:
        rows.append(skipped(NAMES[3], "this rmqlog has no Consumer.nack"))
    if hasattr(Consumer, "_has_more_now"):
        rows.append(_filter_row(s, wd))
    else:
        rows.append(skipped(NAMES[4], "this rmqlog has no consumer filters"))
    return rows


def _filter_row(s: Sizes, wd: Workdir) -> Row:
    """A consumer filtered in Rust (``headers={"tag": "hit"}``) receiving 1 record in 10, against
    an unfiltered consumer receiving all of them (the records a Python filter would have to look
    at), both draining the same log. Each side's time is per record the filtered one receives:
    the ratio is the unfiltered drain's time over the filtered one's."""
    from rmqlog import CommitLog

    n = FILTER_QUICK_RECORDS if s.quick else s.records_100
    reps = max(s.reps, FILTER_QUICK_REPS) if s.quick else s.reps
    hits = n // FILTER_EVERY
    d = wd.new()
    log = CommitLog(os.path.join(d, "log"), segment_size=SEGMENT)
    # Every record carries one header of the same size: "tag": b"hit" (1 in 10) or b"not".
    tags = [[("tag", b"hit" if i % FILTER_EVERY == 0 else b"not")] for i in range(s.batch)]
    for i in range(0, n, s.batch):
        k = min(s.batch, n - i)
        log.append_batch([BODY_100] * k, headers=tags[:k])
    log.flush()
    end = log.max_offset
    for _ in log.scan_batches():  # the segment mapped in, outside the clock, for both sides
        pass
    names = count()

    def drain(**filt) -> float:
        name = f"filter-{next(names)}"
        c = log.consumer(name, start="earliest", exclusive=True, **filt)
        got = []

        def go() -> None:
            k = 0
            poll = c.poll
            while c.position < end:
                k += len(poll(FILTER_POLL, timeout=0))
            got.append(k)

        t = _timed_quiet(go)
        assert got == [hits if filt else n], (got, filt)
        c.commit()
        c.close()
        log.drop_consumer(name)
        return t

    say(f"consumer filtered 1 in {FILTER_EVERY} ({n} records of 100 B, poll({FILTER_POLL}))")
    try:
        to, tb = alternate(reps, lambda: drain(headers={"tag": "hit"}), drain)
    finally:
        log.close()
        shutil.rmtree(d)
    return rates(
        NAMES[4],
        hits / to,
        hits / tb,
        f'log.consumer(name, exclusive=True, headers={{"tag": "hit"}}).poll({FILTER_POLL}) '
        f'until drained: receives the {hits:,} records of {n:,} whose header tag is b"hit" '
        f'(1 in {FILTER_EVERY}; the others b"not"), filtered in Rust; per record received',
        f"log.consumer(name, exclusive=True).poll({FILTER_POLL}) until drained, unfiltered: "
        f"receives all {n:,} records (what a filter in Python would look at); per record the "
        "filtered consumer receives",
        items=hits,
        records=n,
    )
