"""The PySpark readers (rmqlog.spark) on a store written by SEVERAL producer processes at once, as
shared writers (``CommitLog(..., exclusive=False)``, docs/producers-consumers.md): the batch
source, the streaming source and ``body_udf`` (docs/spark.md), with real processes.

Every producer is a process of its own that appends records whose body names it and its sequence
number (``body(n, i)``, recomputed by the checks), single appends and, every tenth, a batch of
three. The checks: the records read are a dense run of offsets from the start of the log, every
body is one a producer wrote, each producer's records are its first ``k`` in order, and a batch
is whole and contiguous (``check_log``).

Spark runs on the ``spark`` fixture of conftest.py (local[2]), which skips where the other Spark
tests skip. This file is also the producer: ``python test_spark_shared.py DIRS N PHASES PACE_MS
FLUSH [STOP]`` (see ``produce``).
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from collections import Counter
from itertools import pairwise

import pytest

from rmqlog import CommitLog

SEG = 64 * 1024  # small segments: producers roll into new ones while they race
HEADER = 32  # a record's header (docs/format.md)
PRODUCERS = 3
PARENT = 9  # the records the test process appends itself
LATE = 3  # a producer that comes after the others
START_TIMEOUT = 60.0
CATCH_UP_TIMEOUT = 120.0


def body(n: int, i: int) -> bytes:
    """Record ``i`` of producer ``n``: ``p<n>-<i>-`` then 0..159 bytes derived from both."""
    fill = bytes((n * 31 + i * 7 + k) % 256 for k in range((i * 37 + n * 11) % 160))
    return b"p%d-%06d-" % (n, i) + fill


def parse(data: bytes) -> tuple[int, int]:
    """(producer, sequence number) of a body, which must be exactly the one it names."""
    name, seq, _ = data.split(b"-", 2)
    assert name[:1] == b"p", data[:40]
    n, i = int(name[1:]), int(seq)
    assert data == body(n, i), f"the body of producer {n}'s record {i} is not the one written"
    return n, i


# ---------------------------------------------------------------------------------------------
# the producer process


def _append(log: CommitLog, n: int, i: int) -> int:
    """Appends producer ``n``'s record ``i`` (every tenth, records i..i+2 as one batch); returns
    the next sequence number."""
    if i % 10 == 9:
        log.append_batch([body(n, j) for j in range(i, i + 3)])
        return i + 3
    log.append(body(n, i))
    return i + 1


def produce(
    paths: str, n: int, phases: list[int], pace_ms: float, flush: str, stop: str | None
) -> None:
    """A shared writer of the store in ``paths``, in this ``flush`` mode. Prints ``open`` once
    it has joined, then for each phase appends at least its count of records (a batch is never
    cut) and prints ``at <records so far> <time.time() after the last append>``; before each
    phase but the first it waits for a line on stdin. With ``stop``, goes on appending until
    that file exists. Then prints ``done <records>`` and closes."""
    pace = pace_ms / 1000
    dirs = paths.split(os.pathsep)
    with CommitLog(dirs, segment_size=SEG, exclusive=False, flush=flush) as log:
        print("open", flush=True)
        i = 0
        for k, count in enumerate(phases):
            if k:
                sys.stdin.readline()
            target = i + count
            while i < target:
                i = _append(log, n, i)
                if pace:
                    time.sleep(pace)
            print(f"at {i} {time.time():.6f}", flush=True)
        while stop and not os.path.exists(stop):
            i = _append(log, n, i)
            time.sleep(pace)
        print(f"done {i}", flush=True)


class Producer:
    """A producer process (``produce``), its stdout lines read by a thread."""

    def __init__(
        self, paths: str, n: int, phases: list[int], pace_ms: float, flush: str, stop: str
    ) -> None:
        self.n = n
        args = [paths, str(n), ",".join(map(str, phases)), str(pace_ms), flush, stop]
        self.proc = subprocess.Popen(
            [sys.executable, __file__, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[list[str] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.split())
        self.lines.put(None)

    def expect(self, word: str, timeout: float = START_TIMEOUT) -> list[str]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"producer {self.n}: no {word!r} line within {timeout} s")
        assert line and line[0] == word, f"producer {self.n}: expected {word!r}, got {line}"
        return line[1:]

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def finish(self) -> int:
        """Waits for the producer to end (past its ``open`` and ``at`` lines not yet read); the
        number of records it appended."""
        while True:
            try:
                line = self.lines.get(timeout=CATCH_UP_TIMEOUT)
            except queue.Empty:
                pytest.fail(f"producer {self.n}: not done within {CATCH_UP_TIMEOUT} s")
            assert line and line[0] in ("open", "at", "done"), f"producer {self.n}: got {line}"
            if line[0] == "done":
                break
        count = int(line[1])
        assert self.proc.wait(timeout=START_TIMEOUT) == 0
        return count

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def producers():
    """``start(paths, n, phases, pace_ms=0, flush="async", stop=None)``: a ``Producer``; all
    killed at the end."""
    started: list[Producer] = []

    def start(paths, n, phases, pace_ms=0.0, flush="async", stop=None) -> Producer:
        p = Producer(paths, n, phases, pace_ms, flush, stop or "")
        started.append(p)
        return p

    yield start
    for p in started:
        p.kill()


# ---------------------------------------------------------------------------------------------
# checks


def check_log(rows: list[tuple[int, bytes]], end: int | None = None) -> dict[int, int]:
    """``rows`` (offset, body), in offset order, are a dense run of records from offset 0 (each
    starts where the previous ended, or at the next segment when it did not fit there), ending
    at ``end`` when given; every body is one a producer wrote; each producer's records are its
    first ``k`` in order; a batch (records i..i+2 with i % 10 == 9) is whole and contiguous.
    Returns ``{producer: k}``."""
    at = 0
    for off, data in rows:
        if off != at:
            nxt = at - at % SEG + SEG
            assert off == nxt and at + HEADER + len(data) > nxt, (
                f"a gap or an overlap at {off}: the previous record ended at {at}"
            )
        at = off + HEADER + len(data)
    if end is not None:
        assert at == end, f"the records end at {at}, the log at {end}"
    ids = [parse(data) for _, data in rows]
    seen: Counter[int] = Counter()
    for q, (n, i) in enumerate(ids):
        assert i == seen[n], f"producer {n}'s record {i} at {rows[q][0]}: expected {seen[n]}"
        seen[n] += 1
        if n != PARENT and i % 10 == 9:
            assert ids[q + 1 : q + 3] == [(n, i + 1), (n, i + 2)], (
                f"producer {n}'s batch at {rows[q][0]} is not whole and contiguous"
            )
    return dict(seen)


def scan(dirs: list[str]) -> tuple[list[tuple[int, bytes]], int]:
    """The store's records and end, as a read-only CommitLog of this process sees them."""
    with CommitLog(dirs, read_only=True) as log:
        return [(off, bytes(data)) for off, data in log.scan()], log.max_offset


def rows_of(df) -> list[tuple[int, bytes]]:
    """(offset, body) of every row, in offset order; the segment column is checked on the way."""
    rows = df.select("offset", "body", "segment").collect()
    assert all(r.segment == r.offset - r.offset % SEG for r in rows)
    return sorted((r.offset, bytes(r.body)) for r in rows)


def store_paths(tmp_path) -> tuple[list[str], str]:
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    return dirs, os.pathsep.join(dirs)


# ---------------------------------------------------------------------------------------------
# the batch source


READY = 100  # records each producer appends before the read


def test_batch_read_while_three_producer_processes_append(spark, tmp_path, producers):
    """Three producer processes create the store together and append at their pace until told
    to stop. A read planned meanwhile is a consistent prefix of the log (and stays the same when
    run again); a read after they stopped has every record exactly once."""
    dirs, paths = store_paths(tmp_path)
    stop = tmp_path / "stop"
    # About 60 records a second each (a batch of three every tenth append): a few thousand in
    # all, however long Spark takes to plan and run the read.
    procs = [producers(paths, n, [READY], pace_ms=20, stop=str(stop)) for n in range(PRODUCERS)]
    for p in procs:
        p.expect("open")
        p.expect("at")
    try:
        df = spark.read.format("rmqlog").load(paths)
        during = rows_of(df)
        again = df.count()  # a DataFrame keeps its plan: the same range, however long the log
        assert all(p.running for p in procs), "a producer stopped: the read was not concurrent"
    finally:
        stop.touch()
    written = {p.n: p.finish() for p in procs}

    final = rows_of(spark.read.format("rmqlog").load(paths))
    records, end = scan(dirs)
    assert final == records  # every record once, each with its body
    assert check_log(final, end) == written
    switches = sum(a[1][:3] != b[1][:3] for a, b in pairwise(final))
    assert switches >= 30, "the producers did not append at the same time"

    # The read taken while they appended: a prefix of the log, each producer's first records.
    assert again == len(during)
    got = check_log(during)
    assert during == final[: len(during)]
    assert all(READY <= got[n] < written[n] for n in range(PRODUCERS)), (got, written)


# ---------------------------------------------------------------------------------------------
# the streaming source

WAIT_MS = 20_000  # a trigger that finds nothing new waits this long, unless an append wakes it
# No background sync in any writer: its publication of the flushed end would wake the waiting
# trigger too (within flush_interval_ms), and hide an append that does not.
FLUSH = "none"


def test_stream_follows_three_producer_processes(spark, tmp_path, producers):
    """The test process opens the store first (a shared writer, doing the background work) and
    appends; a stream (wait_ms set, foreachBatch, a checkpoint) reads it while three producer
    processes join and append in two phases; the first phase reaches the sink while they wait,
    open. After them, the append of another process (that stays open) wakes the idle stream's
    waiting trigger at once. The sink holds every record exactly once, in log order."""
    dirs, paths = store_paths(tmp_path)
    first = CommitLog(dirs, segment_size=SEG, exclusive=False, flush=FLUSH)
    batches: dict[int, list[tuple[int, bytes]]] = {}  # the sink, idempotent by batch id
    deliveries: list[tuple[int, list[tuple[int, bytes]], float]] = []  # (id, rows, time)

    def collect(df, batch_id):
        arrived = time.time()
        rows = sorted((r.offset, bytes(r.body)) for r in df.select("offset", "body").collect())
        deliveries.append((batch_id, rows, arrived))
        batches[batch_id] = rows

    def delivered() -> list[tuple[int, bytes]]:
        return [row for _, rows in sorted(batches.items()) for row in rows]

    def per_producer(rows=None) -> Counter[int]:
        return Counter(parse(data)[0] for _, data in (delivered() if rows is None else rows))

    try:
        first.append_batch([body(PARENT, i) for i in range(20)])
        query = (
            spark.readStream.format("rmqlog")
            .option("wait_ms", str(WAIT_MS))
            .load(paths)
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )

        def wait_until(done, what: str) -> None:
            deadline = time.monotonic() + CATCH_UP_TIMEOUT
            while not done():
                assert query.exception() is None, query.exception()
                assert time.monotonic() < deadline, f"the stream did not deliver {what}"
                time.sleep(0.05)

        try:
            wait_until(lambda: len(delivered()) >= 20, "the first records")
            procs = [producers(paths, n, [400, 600], 1, FLUSH) for n in range(PRODUCERS)]
            half = {}
            for p in procs:
                p.expect("open")
                half[p.n] = int(p.expect("at")[0])
            # Records of processes that joined after the stream started, while they are open.
            wait_until(lambda: per_producer() == {PARENT: 20, **half}, "the first phase")
            for p in procs:
                p.go()
            written = {p.n: p.finish() for p in procs}
            total = 20 + sum(written.values())
            wait_until(lambda: len(delivered()) >= total, "the second phase")

            # The stream is idle, its trigger waiting for the next append (up to WAIT_MS). A
            # record of this process is delivered; the next trigger then waits for one of a
            # process that joined later, which must wake it, not the end of the wait (the late
            # producer closes only once its record was delivered: a close wakes waiters too).
            late = producers(paths, LATE, [0, 1, 0], flush=FLUSH)
            late.expect("open")
            late.expect("at")
            first.append(body(PARENT, 20))
            wait_until(lambda: len(delivered()) >= total + 1, "this process's record")
            time.sleep(2)  # the next trigger is waiting by now
            late.go()
            appended_at = float(late.expect("at")[1])
            wait_until(lambda: len(delivered()) >= total + 2, "the late producer's record")
            # When the batch holding the late record reached foreachBatch (time.time()).
            arrived = min(at for _, rows, at in deliveries if LATE in per_producer(rows))
            latency = arrived - appended_at
            late.go()
            assert late.finish() == 1
            assert latency < WAIT_MS / 1000 / 2, (
                f"the append of another process took {latency:.1f} s to reach the stream: its "
                f"trigger was not woken, it waited out wait_ms={WAIT_MS}"
            )
        finally:
            query.stop()
        records, end = scan(dirs)
    finally:
        first.close()

    # A batch delivered again has the same rows; all together, every record once, in log order.
    by_id: dict[int, list[tuple[int, bytes]]] = {}
    for batch_id, rows, _ in deliveries:
        assert by_id.setdefault(batch_id, rows) == rows
    seen = delivered()
    assert len({off for off, _ in seen}) == len(seen), "a record was delivered twice"
    assert seen == records
    assert check_log(seen, end) == {PARENT: 21, **written, LATE: 1}
    assert len(batches) >= 4


# ---------------------------------------------------------------------------------------------
# the body UDF


def test_body_udf_resolves_bodies_of_every_producer_process(spark_session, tmp_path, producers):
    """body_udf over a metadata-only read (offsets only) gives each record's body, whichever
    process wrote it, on a store that stays open (never closed clean); and the records of a
    producer that came after the lookups had opened the log (Spark reuses its Python workers:
    their cached log refreshes to find the new segments)."""
    from rmqlog.spark import body_udf

    dirs, paths = store_paths(tmp_path)
    lookup = body_udf(paths)

    def looked_up() -> list[tuple[int, bytes | None]]:
        meta = spark_session.read.format("rmqlog").schema("offset long").load(paths)
        rows = meta.select("offset", lookup("offset").alias("body")).collect()
        return sorted((r.offset, None if r.body is None else bytes(r.body)) for r in rows)

    with CommitLog(dirs, segment_size=SEG, exclusive=False) as first:
        first.append_batch([body(PARENT, i) for i in range(5)])
        procs = [producers(paths, n, [700]) for n in range(PRODUCERS)]
        written = {p.n: p.finish() for p in procs}
        records, end = scan(dirs)
        got = looked_up()
        assert got == records
        assert check_log(got, end) == {PARENT: 5, **written}

        late = producers(paths, LATE, [800])  # a segment or more, made after the lookups
        written[LATE] = late.finish()
        records, end = scan(dirs)
        got = looked_up()
        assert got == records
        assert check_log(got, end) == {PARENT: 5, **written}


if __name__ == "__main__":
    produce(
        sys.argv[1],
        int(sys.argv[2]),
        [int(x) for x in sys.argv[3].split(",") if x],
        float(sys.argv[4]),
        sys.argv[5],
        sys.argv[6] if len(sys.argv) > 6 and sys.argv[6] else None,
    )
