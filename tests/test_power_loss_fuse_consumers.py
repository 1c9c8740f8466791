"""Named consumers across a power loss: no committed position may outlive the records below it.

A consumer's ``commit()`` writes its position durably (docs/producers-consumers.md). If the
records below that position are not durable yet, a power loss keeps the position and drops the
records: the position then lies past the recovered end of the log, and the consumer skips every
record appended afterwards, or fails every poll with ``InvalidOffsetError`` where the position
falls inside a new record. So ``commit()`` first makes the log durable up to the committed
offset, in every open (a read-only one syncs the segment files itself), and a consumer opened on
a store whose committed position lies past the end resumes at the end, with a warning.

``test_power_cut_keeps_no_position_past_the_log`` runs it under a real power loss on faultfs in
lazy mode (``tests/faultfs.py``: what was written but not synced lives in the FUSE daemon's
memory only, and the cut drops it), in every flush mode. A producer process appends without end
in the test's flush mode (``"async"`` with an interval of an hour, so that no background sync
hides a commit that does not sync; ``flush()`` once, after its first ``BASE`` records) and
commits a name of its own (``w``, exclusive) in its writer's open; a consumer process commits
the names ``k`` (exclusive) and ``s`` (shared) in a read-only open. Both report each position
``commit()`` returned, then stop committing; the producer appends on, so the cut falls while
records are published but not synced (in ``"async"`` and ``"none"`` the cut must take some: the
test checks it did). After the cut and a remount the parent reopens the store and checks, for
every name: ``consumers()`` lists it at the position its last commit returned, at or below the
recovered end; opened, it resumes there; after ``NEW`` more appends it polls every record from
there (a record boundary), none skipped, and no poll raises ``InvalidOffsetError``. In
``"sync"`` every append is durable before it returns, so there it checks that nothing
acknowledged is lost and the same of the names.

The other two tests need no FUSE: a child process does what the issue reported, in two stores,
and dies without closing the logs; the parent simulates the power loss the way the project's
Rust tests do (the bytes past ``flushed_offset`` zeroed in the segment files, as they never
reached the disk; ``rmqlog.ctl`` and ``rmqlog.tail`` removed, as a reboot makes them count for
nothing). The first test zeroes past what was synced; the second past the records that were
durable before any commit, as on a store an older rmqlog wrote (or restored from an older copy):
the positions lie past the end, and each name must resume at the end, with a warning, and poll
every new record.

This file is also the child process of the tests: ``python test_power_loss_fuse_consumers.py
producer DIRS FLUSH``, ``... consumer DIRS`` and ``... issue FLUSH DIR...``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import rmqlog
from rmqlog import CommitLog, InvalidOffsetError

FLUSHES = ["sync", "async", "none"]
SEG = 64 * 1024  # small: the producer rolls into a new segment every few dozen milliseconds
STORE = dict(segment_size=SEG, clean_interval_ms=0)
BASE = 100  # records appended and flushed before any consumer runs
BATCH = 10  # records per append_batch of the producer
COMMITS = 3  # commits per name before its process stops committing
AFTER = 5  # producer batches after every name stopped committing, before the cut
NEW = 50  # records appended after the cut
START_TIMEOUT = 30.0
# (name, exclusive): w commits in the producer's writer open, k and s in a read-only open.
NAMES = [("w", True), ("k", True), ("s", False)]


def rec(i: int) -> bytes:
    """The body of the producer's record ``i``: 40 to 330 bytes, recognisable."""
    head = b"rec-%08d;" % i
    size = 40 + (i * 7919) % 291
    return (head * (size // len(head) + 1))[:size]


def produce(dirs: str, flush: str) -> None:
    """The producer: ``BASE`` records flushed (``base END``), then batches without end (``a END``
    after each returned). Every 5th batch, until ``COMMITS`` commits, its own exclusive name
    ``w`` polls what is there and commits (``c w POSITION``; then ``idle w``). It never calls
    ``flush()`` again, and its async interval is an hour: only commits sync the records."""
    log = CommitLog(dirs, flush=flush, flush_interval_ms=3_600_000, **STORE)
    out = sys.stdout
    log.append_batch([rec(i) for i in range(BASE)])
    log.flush()
    out.write(f"base {log.max_offset}\n")
    out.flush()
    w = log.consumer("w", start="earliest", exclusive=True)
    seq, commits = BASE, 0
    while True:
        log.append_batch([rec(i) for i in range(seq, seq + BATCH)])
        seq += BATCH
        out.write(f"a {log.max_offset}\n")
        if commits < COMMITS and (seq // BATCH) % 5 == 0:
            while w.poll(1000, timeout=0):
                pass
            out.write(f"c w {w.commit()}\n")
            commits += 1
            if commits == COMMITS:
                out.write("idle w\n")
        out.flush()
        time.sleep(0.005)


def consume(dirs: str) -> None:
    """The consumer: started with the producer, it reads from stdin the end of the producer's
    flushed records, then opens the store read-only; the names ``k`` (exclusive) and ``s``
    (shared) each poll what is there and commit (``c NAME POSITION``), in turn, until each made
    ``COMMITS`` commits and committed past that end (records the producer never synced); then
    ``idle``."""
    base_end = int(sys.stdin.readline())
    log = CommitLog(dirs, read_only=True)
    consumers = {
        "k": log.consumer("k", start="earliest", exclusive=True),
        "s": log.consumer("s", start="earliest"),
    }
    out = sys.stdout
    done = {name: (0, 0) for name in consumers}  # commits made, last position
    while any(n < COMMITS or pos <= base_end for n, pos in done.values()):
        for name, c in consumers.items():
            if not c.poll(1000, timeout=5):
                continue
            while c.poll(1000, timeout=0):
                pass
            pos = c.commit()
            done[name] = (done[name][0] + 1, pos)
            out.write(f"c {name} {pos}\n")
            out.flush()
        time.sleep(0.01)
    out.write("idle\n")
    out.flush()
    time.sleep(3600)


class Child:
    """A child process of this file and a thread reading its lines. Only lines read before the
    cut count: each was written after what it reports returned, so before the cut."""

    def __init__(self, what: str, cut: threading.Event, *args: str) -> None:
        self.what = what
        self.cut = cut
        self.lines: list[list[str]] = []
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, what, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.lock:
                if self.cut.is_set():
                    break
                self.lines.append(line.split())

    def seen(self) -> list[list[str]]:
        with self.lock:
            return list(self.lines)

    def tell(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        self.reader.join(timeout=30)
        for f in (self.proc.stdin, self.proc.stdout):
            assert f is not None
            f.close()


def wait_until(cond, what: str, children: list[Child]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while not cond():
        for ch in children:
            if ch.proc.poll() is not None:
                pytest.fail(f"the {ch.what} died (exit {ch.proc.returncode}) waiting for {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.005)


def last_commits(*children: Child) -> dict[str, int]:
    """Every name's last position ``commit()`` returned (``c NAME POSITION`` lines)."""
    out: dict[str, int] = {}
    for ch in children:
        for parts in ch.seen():
            if parts[0] == "c":
                out[parts[1]] = int(parts[2])
    return out


def drain(log: CommitLog, name: str, exclusive: bool, end: int) -> tuple[int, list, list[str]]:
    """Opens ``name`` and polls until nothing is left: ``(committed, [(offset, body)],
    problems)``; an ``InvalidOffsetError`` is a problem, not an exception."""
    problems = []
    polled: list[tuple[int, bytes]] = []
    with log.consumer(name, exclusive=exclusive) as c:
        committed = c.committed
        if c.position != committed:
            problems.append(f"{name}: opened at position {c.position}, committed {committed}")
        if committed > end:
            problems.append(f"{name}: resumes at {committed}, past the recovered end {end}")
        try:
            while got := c.poll(1000, timeout=0):
                polled += [(off, bytes(view)) for off, view in got]
        except InvalidOffsetError as e:
            problems.append(f"{name}: a poll raised InvalidOffsetError: {e}")
    return committed, polled, problems


def check_after_the_cut(log: CommitLog, names, end: int, expected: dict[str, int] | None) -> None:
    """Every name of ``names`` (``(name, exclusive)``) is listed by ``consumers()`` at or below
    the recovered ``end``, at ``expected[name]`` (the position its last commit returned), and
    opened resumes there; ``expected`` None: each name resumes at ``end``. After ``NEW``
    appends, each polls every record from there, none skipped, and no poll raises
    ``InvalidOffsetError``. Collects every problem found, then fails naming them all."""
    problems = []
    listed = {c["name"]: c["position"] for c in log.consumers()}
    for name, _ in names:
        pos = listed.get(name)
        should = end if expected is None else expected[name]
        if pos is None:
            problems.append(f"{name}: not listed by consumers(): {listed}")
        elif pos > end:
            problems.append(f"{name}: listed at {pos}, past the recovered end {end}")
        elif pos != should:
            problems.append(f"{name}: listed at {pos}, not at {should}")
    new_bodies = [b"after the cut %03d" % i for i in range(NEW)]
    new = dict(zip(log.append_batch(new_bodies), new_bodies, strict=True))
    assert min(new) == end
    for name, exclusive in names:
        committed, polled, found = drain(log, name, exclusive, end)
        problems += found
        should = end if expected is None else expected[name]
        if committed != should:
            problems.append(f"{name}: resumes at {committed}, not at {should}")
        got = dict(polled)
        missing = [off for off in new if got.get(off) != new[off]]
        if missing:
            problems.append(
                f"{name}: {len(missing)} of the {NEW} records appended after the cut were not "
                f"polled (from {missing[0]}); it resumed at {committed}, the log ended at {end}"
            )
        if committed <= end and not found:
            # Every record from where it resumed, once, in order for an exclusive name (a
            # shared one gets a dead open's claims again out of order).
            there = [off for off, _ in log.scan(start=committed)]
            offs = [off for off, _ in polled]
            if (offs if exclusive else sorted(offs)) != there:
                problems.append(
                    f"{name}: polled {len(offs)} records from {committed}, the log holds "
                    f"{len(there)} there (first polled: {offs[:3]}, first there: {there[:3]})"
                )
    assert not problems, "after the power cut:\n" + "\n".join(problems)


@pytest.mark.parametrize("flush", FLUSHES)
def test_power_cut_keeps_no_position_past_the_log(faultfs, flush):
    """See the module's docstring. The consumer process starts committing once the producer's
    ``w`` stopped, so that the last commits of ``k`` and ``s`` lie past anything ``w``'s could
    have synced: their records are durable only if the read-only open's commits synced them."""
    faultfs.lazy()
    dirs = os.pathsep.join(str(faultfs.path / d) for d in ("d0", "d1"))
    cut = threading.Event()
    producer = Child("producer", cut, dirs, flush)
    consumer = Child("consumer", cut, dirs)  # it imports rmqlog while the producer starts
    children = [producer, consumer]
    try:
        wait_until(lambda: ["idle", "w"] in producer.seen(), "the producer's commits", children)
        base_end = next(int(p[1]) for p in producer.seen() if p[0] == "base")
        consumer.tell(str(base_end))
        wait_until(lambda: ["idle"] in consumer.seen(), "the consumer's commits", children)
        acked = sum(p[0] == "a" for p in producer.seen())
        wait_until(
            lambda: sum(p[0] == "a" for p in producer.seen()) >= acked + AFTER,
            f"{AFTER} more batches",
            children,
        )
    finally:
        cut.set()  # lines a reader takes from now on do not count
        faultfs.power_cut(*(ch.proc for ch in children))
        for ch in children:
            ch.close()
    acked_end = max(int(p[1]) for p in producer.seen() if p[0] == "a")
    commits = last_commits(*children)
    assert sorted(commits) == ["k", "s", "w"], commits
    assert base_end < commits["w"] < min(commits["k"], commits["s"]), (commits, base_end)

    log = faultfs.log(dirs, **STORE)
    end = log.max_offset
    assert end >= base_end, f"the flushed base (to {base_end}) is lost: the log ends at {end}"
    if flush == "sync":
        assert end >= acked_end, f"acknowledged records lost in sync mode: {end} < {acked_end}"
    else:
        # Nothing synced the last batches: the cut must have taken them, or it proved nothing.
        assert end < acked_end, f"the cut took no record ({flush}): the log ends at {end}"
    check_after_the_cut(log, NAMES, end, commits)
    assert log.verify() == []


# ---------------------------------------------------------------------------------------------
# The issue's reproduction, with a simulated power loss (no FUSE)

FAST_SEG = 16 * 4096
FAST_NAMES = [("k", True), ("s", False), ("r", True)]  # r: committed in a read-only open


def issue(flush: str, d: str) -> dict:
    """What the child of the tests below does in the store ``d``: 10 records flushed, then for
    each of the names ``k`` (exclusive) and ``s`` (shared) in the writer's open and ``r``
    (exclusive) in a read-only open, in this order, 30 records more, polled up to the end and
    committed (each commit's records lie past what the one before it synced); 10 records more,
    never committed. Returns the end of the first 10 records, each name's committed position and
    the flushed_offset of the two opens, and leaves both open (the child dies with them open)."""
    log = CommitLog(d, segment_size=FAST_SEG, flush=flush, flush_interval_ms=600_000)
    log.append_batch([b"old-%03d" % i for i in range(10)])
    log.flush()
    report: dict = {"old_end": log.max_offset, "commits": {}}
    ro = CommitLog(d, read_only=True)
    n = 0
    for name, exclusive in FAST_NAMES:
        log.append_batch([b"new-%03d" % i for i in range(n, n + 30)])
        n += 30
        target = log.max_offset
        c = (ro if name == "r" else log).consumer(name, start="earliest", exclusive=exclusive)
        deadline = time.monotonic() + 10
        while c.position < target and time.monotonic() < deadline:
            c.poll(1000, timeout=1)
        assert c.position == target, (name, c.position, target)
        report["commits"][name] = c.commit()
    log.append_batch([b"new-%03d" % i for i in range(n, n + 10)])
    report["flushed"] = max(log.flushed_offset, ro.flushed_offset)
    OPEN.extend((log, ro))
    return report


OPEN: list[CommitLog] = []  # the child's logs: never closed


def meta_flushed(d: Path) -> int:
    """The flushed_offset ``rmqlog.meta`` records (one JSON line, then its CRC)."""
    return json.loads((d / "rmqlog.meta").read_text().splitlines()[0])["flushed_offset"]


def lose_power(d: Path, durable: int) -> None:
    """What a power loss leaves when every byte below ``durable`` is all that reached the disk:
    the segments' bytes past it are zeros (each segment file is preallocated), and the control
    page and the recovery point of the old boot count for nothing (removed)."""
    for f in d.iterdir():
        if f.name.isdigit():
            start = int(f.name)
            with open(f, "r+b") as seg:
                size = seg.seek(0, os.SEEK_END)
                if start + size > durable:
                    at = max(durable - start, 0)
                    seg.seek(at)
                    seg.write(bytes(size - at))
    for name in ("rmqlog.ctl", "rmqlog.tail"):
        (d / name).unlink(missing_ok=True)


@pytest.fixture(scope="module", params=FLUSHES)
def issue_stores(request, tmp_path_factory) -> list[tuple[Path, dict]]:
    """Two stores that went through :func:`issue` in one child process (one start-up for both),
    in the flush mode of the parameter, and ``(directory, report)`` of each; the child died
    without closing them (``os._exit``: no close, no checkpoint, no sync). Each test below takes
    one of them."""
    base = tmp_path_factory.mktemp(f"issue-{request.param}")
    stores = [base / "a", base / "b"]
    out = subprocess.run(
        [sys.executable, __file__, "issue", request.param, *map(str, stores)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    reports = [json.loads(line) for line in out.stdout.splitlines()]
    for report in reports:
        assert sorted(report["commits"]) == sorted(n for n, _ in FAST_NAMES), report
        assert min(report["commits"].values()) > report["old_end"], report
    return list(zip(stores, reports, strict=True))


def test_commit_then_power_loss_loses_no_record_after_it(issue_stores):
    """The issue's case: the power goes after the commits; the disk holds what was synced."""
    d, report = issue_stores[0]
    lose_power(d, max(report["flushed"], meta_flushed(d)))
    with CommitLog(d, segment_size=FAST_SEG) as log:
        end = log.max_offset
        assert end >= report["old_end"]
        check_after_the_cut(log, FAST_NAMES, end, report["commits"])


def test_a_position_past_the_end_resumes_at_the_end(issue_stores, caplog):
    """The records below every committed position are lost anyway (a store an older rmqlog
    wrote, or one restored from an older copy): each name resumes at the log's end, says so in
    a warning, and polls every record appended after."""
    caplog.set_level(logging.WARNING, logger="rmqlog")
    d, report = issue_stores[1]
    old_end = report["old_end"]
    assert meta_flushed(d) <= old_end, "the metadata says more was durable: no power loss"
    lose_power(d, old_end)
    with CommitLog(d, segment_size=FAST_SEG) as log:
        end = log.max_offset
        assert end == old_end < min(report["commits"].values())
        check_after_the_cut(log, FAST_NAMES, end, None)
    rmqlog._native._flush_logging()
    said = [
        r.getMessage()
        for r in caplog.records
        if r.name == "rmqlog" and r.levelno == logging.WARNING and "past the log" in r.getMessage()
    ]
    for name, _ in FAST_NAMES:
        assert any(f'"{name}"' in m and f"resumes at {end}" in m for m in said), (name, said)


if __name__ == "__main__":
    if sys.argv[1] == "producer":
        produce(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "consumer":
        consume(sys.argv[2])
    elif sys.argv[1] == "issue":
        for store in sys.argv[3:]:
            print(json.dumps(issue(sys.argv[2], store)), flush=True)
        os._exit(0)  # no close(): no checkpoint, no sync
