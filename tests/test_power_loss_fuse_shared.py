"""Power loss on faultfs (lazy mode, see ``tests/test_power_loss_fuse.py``) with several producer
PROCESSES appending to one store as shared writers (``exclusive=False``).

Each round starts ``PRODUCERS`` processes that open the same store on the mount with
``exclusive=False`` and append records whose bodies name the producer, the round and the
producer's sequence number, followed by check bytes computed from them. Each producer reports
every acknowledged append (``a SEQ OFFSET SIZE``, written after ``append`` returned) and, in
async mode, every ``flushed_offset`` a ``flush()`` returned (``f OFFSET``) through a pipe. Once
every producer has been acknowledged, the parent lets them append a little longer, cuts the power
(every write not yet synced is dropped), SIGKILLs them all, mounts again and reopens the store
exclusively, as recovery does. docs/producers-consumers.md and docs/recovery.md promise:

- ``flush="sync"``: every record whose ``append`` returned is durable, whoever appended it;
- ``flush="async"``: ``flush()`` in any shared writer syncs everything published so far, so
  every acknowledged record of *every* producer below the largest ``flushed_offset`` any
  ``flush()`` returned survives, and the recovered log reaches at least that far;
- in every mode the survivors are a dense prefix of the log: an acknowledged record below the
  recovered end is there, with its body, at its offset; every record is one a producer wrote
  (its body recomputes), none twice, and each producer's records of a round are its first ``k``
  in order; ``verify()`` is clean.

``flush="none"`` with no ``flush()`` checks the prefix properties only: whether its cuts take
records depends on writeback timing (tests/test_power_loss_fuse.py's control shows the cut drops
unsynced writes). Several cuts in a row: the survivors of an earlier cut must survive later ones.

Two deterministic tests of the async promise follow: one shared writer's ``flush()`` must make
durable the records another wrote into a segment the first one only knows as sealed; and, with
an exclusive writer, the records a killed writer left unsynced in segments recovery hands the
next writer as sealed.

This file is also the child process of all of them: ``python test_power_loss_fuse_shared.py DIRS
FLUSH P ROUND`` is a producer, ``python test_power_loss_fuse_shared.py two-opens DIR`` the two
writers of the first deterministic test, ``... killed-writer DIR`` and ``... recovering-writer
DIR`` the two writers of the second.
"""

from __future__ import annotations

import hashlib
import os
import random
import struct
import subprocess
import sys
import threading
import time

import pytest

from rmqlog import CommitLog, CommitLogError, CorruptionError

SEG = 64 * 1024  # small: the producers roll into a new segment every few milliseconds
PRODUCERS = 3
RUN = 0.3  # seconds of appending by all producers before a cut (plus a random extra)
CAP = 100_000  # records per producer and round at most (never reached in RUN)
FLUSH_GAP = 80  # async: a producer calls flush() after 1 to this many appends (at random)
ROUNDS = {"sync": 3, "async": 3, "none": 2}
START_TIMEOUT = 30.0
MIN_ACKS = 20  # acknowledgements each producer has before the run's clock starts

MAGIC = b"PLSW"
HEAD = struct.Struct("<4sHHII")  # magic, producer, round, sequence number, size


def record(p: int, rnd: int, seq: int, size: int) -> bytes:
    """The body of producer ``p``'s record ``seq`` in round ``rnd``: a header naming them, then
    check bytes derived from the header (recomputable by the checker)."""
    head = HEAD.pack(MAGIC, p, rnd, seq, size)
    digest = hashlib.blake2b(head, digest_size=32).digest()
    rest = size - len(head)
    return head + (digest * (rest // len(digest) + 1))[:rest]


def size_of(p: int, seq: int) -> int:
    """1 in 31 records is large (the direct path of an append); the others 40 to 3015 bytes."""
    n = seq * PRODUCERS + p
    return 20_000 if n % 31 == 0 else HEAD.size + 24 + (n * 7919) % 2976


def parse(b: bytes) -> tuple[int, int, int, int] | None:
    """``(producer, round, seq, size)`` of a body :func:`record` made, else None."""
    if len(b) < HEAD.size:
        return None
    magic, p, rnd, seq, size = HEAD.unpack_from(b)
    if magic != MAGIC or size != len(b) or b != record(p, rnd, seq, size):
        return None
    return p, rnd, seq, size


# The store-wide options every shared writer must give alike; flush modes are per process.
STORE = dict(segment_size=SEG, clean_interval_ms=0)


def produce(dirs: str, flush: str, p: int, rnd: int) -> None:
    """A producer process: appends until killed, reporting each acknowledgement on stdout."""
    log = CommitLog(dirs, exclusive=False, flush=flush, flush_interval_ms=100, **STORE)
    out = sys.stdout
    rng = random.Random(f"{p} {rnd}")
    gap = rng.randint(1, FLUSH_GAP)
    for seq in range(CAP):
        size = size_of(p, seq)
        out.write(f"a {seq} {log.append(record(p, rnd, seq, size))} {size}\n")
        out.flush()
        gap -= 1
        if flush == "async" and gap == 0:
            out.write(f"f {log.flush()}\n")
            out.flush()
            gap = rng.randint(1, FLUSH_GAP)
    out.write("done\n")
    out.flush()
    time.sleep(3600)


def read_back(log: CommitLog, off: int) -> bytes | None:
    """The body at ``off``, or None where no valid record starts there."""
    try:
        return bytes(log.read(off))
    except CommitLogError:
        return None


class Producer:
    """One producer process and a thread reading its reports. Only lines read before the cut
    count: each was written after its append (or flush) returned, so before the cut."""

    def __init__(self, dirs: str, flush: str, p: int, rnd: int, cut: threading.Event) -> None:
        self.p = p
        self.cut = cut
        self.lines: list[str] = []
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, dirs, flush, str(p), str(rnd)],
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
                self.lines.append(line)

    def acks(self) -> int:
        with self.lock:
            return sum(1 for line in self.lines if line.startswith("a "))

    def reports(self) -> tuple[list[tuple[int, int, int]], int, bool]:
        """``[(seq, offset, size)]`` acknowledged, the largest flushed_offset, and whether the
        producer reached CAP (it then no longer appended at the cut)."""
        acked, flushed, done = [], 0, False
        for line in self.lines:
            parts = line.split()
            if parts[0] == "a":
                acked.append((int(parts[1]), int(parts[2]), int(parts[3])))
            elif parts[0] == "f":
                flushed = max(flushed, int(parts[1]))
            elif parts[0] == "done":
                done = True
        return acked, flushed, done


def run_round(faultfs, dirs: str, flush: str, rnd: int):
    """Starts the producers, waits until each was acknowledged more than MIN_ACKS times, lets
    them append, cuts the power while they do, kills them all and mounts again. Returns their
    reports."""
    cut = threading.Event()
    producers = [Producer(dirs, flush, p, rnd, cut) for p in range(PRODUCERS)]
    try:
        deadline = time.monotonic() + START_TIMEOUT
        # Each producer appends a while before the clock of the run starts: on a loaded machine
        # one may take its first acknowledgements late, and a round needs more than MIN_ACKS.
        while any(pr.acks() <= MIN_ACKS for pr in producers):
            for pr in producers:
                if pr.proc.poll() is not None:
                    pytest.fail(f"round {rnd}: producer {pr.p} died (exit {pr.proc.returncode})")
            if time.monotonic() > deadline:
                pytest.fail(f"round {rnd}: the producers were not all acknowledged in time")
            time.sleep(0.005)
        # The cut falls anywhere between two flushes of any producer, not just after a slow one.
        time.sleep(RUN + random.Random(f"{flush} {rnd}").uniform(0, 0.2))
    finally:
        cut.set()  # lines a reader takes from now on do not count
        faultfs.power_cut(*(pr.proc for pr in producers))
        for pr in producers:
            pr.reader.join(timeout=30)
            assert pr.proc.stdout is not None
            pr.proc.stdout.close()
    return [pr.reports() for pr in producers]


@pytest.mark.parametrize("flush", ["sync", "async", "none"])
def test_power_cut_keeps_what_shared_producers_were_told(faultfs, flush):
    faultfs.lazy()
    dirs = os.pathsep.join(str(faultfs.path / d) for d in ("d0", "d1"))
    kept: dict[int, bytes] = {}  # offset -> body of every record known to have survived
    lost_total = 0
    for rnd in range(ROUNDS[flush]):
        reports = run_round(faultfs, dirs, flush, rnd)
        flushed = max(f for _, f, _ in reports)  # flush() in any producer covers everyone's
        for p, (acked, _, done) in enumerate(reports):
            assert len(acked) > MIN_ACKS, f"round {rnd}: producer {p} barely ran ({len(acked)})"
            assert not done, f"round {rnd}: producer {p} reached CAP before the cut"
            assert [seq for seq, _, _ in acked] == list(range(len(acked)))
        if flush == "async":
            assert flushed > 0, f"round {rnd}: no flush() returned before the cut"

        log = faultfs.log(dirs, **STORE)  # exclusive, as recovery opens (flush="async")
        end = log.max_offset

        # What the producers were told, first and one record at a time (a scan stops at the
        # first damage): an acknowledged record below the recovered end is there in every mode;
        # in sync mode every acknowledged record, in async every one below the largest
        # flushed_offset any producer's flush() returned.
        lost = []  # (producer, seq, offset, why it had to survive)
        for p, (acked, _, _) in enumerate(reports):
            for seq, off, size in acked:
                survived = read_back(log, off) == record(p, rnd, seq, size)
                lost_total += not survived
                if survived:
                    continue
                if flush == "sync":
                    lost.append((p, seq, off, "append returned (sync)"))
                elif flush == "async" and off < flushed:
                    lost.append((p, seq, off, f"below the flushed_offset {flushed}"))
                elif off < end:
                    lost.append((p, seq, off, f"below the recovered end {end}"))
        assert not lost, (
            f"round {rnd}: {len(lost)} acknowledged records lost (producer, seq, offset, why it "
            f"had to survive), recovered end {end}: {lost[:5]}"
        )
        if flush == "async":
            assert end >= flushed, (
                f"round {rnd}: the log ends at {end}, below the flushed_offset {flushed} a "
                "flush() returned"
            )

        # Dense from min_offset: each record starts where the one before it ends.
        try:
            present = {off: bytes(view) for off, view in log.scan()}
        except CorruptionError as e:
            pytest.fail(
                f"round {rnd}: the recovered log (end {end}, largest flushed_offset reported "
                f"{flushed}) does not scan: {e}",
                pytrace=False,
            )
        offsets = sorted(present)
        assert not offsets or offsets[0] == log.min_offset, f"round {rnd}: scan skips the head"
        pos = log.min_offset
        for off in offsets:
            assert off == pos, f"round {rnd}: the scan jumps from {pos} to {off}"
            pos = log.read_record(off).next_offset
        assert pos == end, f"round {rnd}: the last record ends at {pos}, max_offset is {end}"
        assert log.verify() == [], f"round {rnd}: verify() is not clean"

        # Survivors of earlier cuts survive this one.
        for off, b in kept.items():
            assert present.get(off) == b, f"round {rnd}: a survivor of an earlier cut at {off}"

        # Every record is one a producer wrote, once; each producer's records of this round are
        # its first k, in offset order (it appended them one after another).
        seen: dict[tuple[int, int, int], int] = {}
        mine: dict[int, list[int]] = {p: [] for p in range(PRODUCERS)}
        for off in offsets:
            who = parse(present[off])
            assert who is not None, f"round {rnd}: the record at {off} is none a producer wrote"
            p, r, seq, _ = who
            assert p < PRODUCERS and r <= rnd, f"round {rnd}: record at {off} names {who}"
            assert (p, r, seq) not in seen, (
                f"round {rnd}: record {(p, r, seq)} at {off} and at {seen[(p, r, seq)]}"
            )
            seen[(p, r, seq)] = off
            if r == rnd:
                mine[p].append(seq)
            else:
                assert off in kept, f"round {rnd}: a record of round {r} at {off} came back"
        for p, seqs in mine.items():
            assert seqs == list(range(len(seqs))), (
                f"round {rnd}: producer {p}'s records are not its first {len(seqs)}: {seqs[:20]}"
            )
        kept = present
        log.close()
    if flush == "none" and lost_total == 0:
        # Nothing asked for a sync, yet everything survived: possible (a sync of the store's own
        # metadata, writeback under load) but worth seeing; the cut's control that must lose
        # records is tests/test_power_loss_fuse.py's.
        print(f"flush='none': the cuts took no acknowledged record ({ROUNDS['none']} rounds)")


def two_opens(d: str) -> None:
    """The process of the test below: two shared opens of the store ``d``, reporting on stdout
    every record (``w OFFSET SEQ``) and what ``b.flush()`` returned (``f OFFSET``)."""
    opts = dict(exclusive=False, flush="async", flush_interval_ms=3_600_000, **STORE)
    a = CommitLog(d, **opts)
    out = sys.stdout
    seq = 0
    for stop in (SEG // 2, SEG + SEG // 8):  # the middle of segment 0, then into segment 1
        while a.max_offset < stop:
            out.write(f"w {a.append(record(0, 0, seq, 1000))} {seq}\n")
            seq += 1
        if stop < SEG:
            assert a.flush() == a.max_offset  # synced through a's own map of segment 0
    b = CommitLog(d, **opts)
    out.write(f"f {b.flush()}\nready\n")
    out.flush()
    time.sleep(3600)


def test_flush_in_one_shared_writer_makes_a_segment_another_sealed_durable(faultfs):
    """The deterministic form of what the test above finds at random. Writer ``a`` flushes in
    the middle of segment 0, appends on into its tail and rolls into segment 1; writer ``b``
    joins (its view holds segment 0 as a sealed segment it never wrote) and calls ``flush()``,
    which docs/producers-consumers.md says syncs everything published. Every record below the
    flushed_offset ``b.flush()`` returned must survive the power cut that follows. Two opens in
    one process are shared writers as two processes are; ``a``'s background sync is kept out of
    it by a long interval (as when the process doing the background work is slow or busy)."""
    faultfs.lazy()
    d = str(faultfs.path / "s")
    proc = subprocess.Popen(
        [sys.executable, __file__, "two-opens", d], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    lines = []
    try:
        for line in proc.stdout:
            if line == "ready\n":
                break
            lines.append(line.split())
        else:
            pytest.fail(f"the writers' process died (exit {proc.wait()})")
    finally:
        faultfs.power_cut(proc)
        proc.stdout.close()
    flushed = next(int(f[1]) for f in lines if f[0] == "f")
    written = [(int(w[1]), int(w[2])) for w in lines if w[0] == "w"]
    assert written[-1][0] < flushed
    log = faultfs.log(d, **STORE)
    lost = [off for off, seq in written if read_back(log, off) != record(0, 0, seq, 1000)]
    assert not lost, (
        f"{len(lost)} records below the flushed_offset {flushed} b.flush() returned are lost "
        f"(offsets {lost[0]}..{lost[-1]}; the log now ends at {log.max_offset})"
    )


# Exclusive writers of the test below: background syncs kept out by a long interval.
EXCLUSIVE = dict(flush="async", flush_interval_ms=3_600_000, **STORE)


def killed_writer(d: str) -> None:
    """The first process of the test below: opens the store ``d`` exclusively and appends into
    its third segment, reporting every record (``w OFFSET SEQ SIZE``), then waits to be killed.
    Nothing syncs the records: no ``flush()``, and a roll syncs nothing."""
    log = CommitLog(d, **EXCLUSIVE)
    out = sys.stdout
    seq = 0
    while log.max_offset < 2 * SEG + SEG // 4:
        size = size_of(0, seq)  # some of 20_000 bytes: written by pwritev, not into the map
        out.write(f"w {log.append(record(0, 0, seq, size))} {seq} {size}\n")
        seq += 1
    out.write(f"end {log.max_offset}\nready\n")
    out.flush()
    time.sleep(3600)


def recovering_writer(d: str) -> None:
    """The second process of the test below: opens the store ``d`` exclusively (recovery finds
    the killed writer's records), reports what ``flush()`` returned (``f OFFSET``) and the
    recovered end (``end OFFSET``), then waits for the power cut."""
    log = CommitLog(d, **EXCLUSIVE)
    sys.stdout.write(f"f {log.flush()}\nend {log.max_offset}\nready\n")
    sys.stdout.flush()
    time.sleep(3600)


def until_ready(proc: subprocess.Popen[str], name: str) -> list[list[str]]:
    """The lines ``proc`` wrote before ``ready``, split; fails the test if it died first."""
    assert proc.stdout is not None
    lines: list[list[str]] = []
    for line in proc.stdout:
        if line == "ready\n":
            return lines
        lines.append(line.split())
    pytest.fail(f"the {name} died (exit {proc.wait()})")


def test_flush_after_recovery_makes_a_killed_writers_sealed_segments_durable(faultfs):
    """Exclusive mode, the default. A writer appends into a third segment and is SIGKILLed with
    nothing synced: its records sit in the page cache, or in faultfs's memory, unsynced. The
    next writer opens the store, and recovery finds them all; its view holds the first two
    segments as sealed segments it never wrote (mapped read-only), only the last one as its own.
    ``flush()`` must sync them all the same (here the open did: only ``flush="none"`` leaves
    what recovery kept unsynced, docs/recovery.md): every record below the flushed_offset
    ``flush()`` returned survives the power cut that follows, with its body, and the store
    verifies clean."""
    faultfs.lazy()
    d = str(faultfs.path / "x")
    child = [sys.executable, __file__]
    first = subprocess.Popen([*child, "killed-writer", d], stdout=subprocess.PIPE, text=True)
    try:
        lines = until_ready(first, "killed writer")
    finally:
        first.kill()  # a crash, not a power cut: what it wrote is still there, unsynced
        first.wait(timeout=30)
        assert first.stdout is not None
        first.stdout.close()
    written = [(int(w[1]), int(w[2]), int(w[3])) for w in lines if w[0] == "w"]
    end = next(int(e[1]) for e in lines if e[0] == "end")
    assert written[-1][0] >= 2 * SEG, "the killed writer did not roll twice"
    pending = faultfs.stats()["pending"]
    sealed = [f"/x/{start:020d}" for start in (0, SEG)]  # as recovery will hand them over
    assert all(pending.get(seg) for seg in sealed), f"nothing unsynced to lose: {pending}"

    second = subprocess.Popen([*child, "recovering-writer", d], stdout=subprocess.PIPE, text=True)
    try:
        lines = until_ready(second, "recovering writer")
    finally:
        faultfs.power_cut(second)
        assert second.stdout is not None
        second.stdout.close()
    flushed = next(int(f[1]) for f in lines if f[0] == "f")
    recovered = next(int(e[1]) for e in lines if e[0] == "end")
    assert recovered == end, f"recovery found the log ending at {recovered}, not {end}"
    assert flushed == end, f"flush() returned {flushed}, the log ends at {end}"

    try:
        log = faultfs.log(d, **STORE)
    except CommitLogError as e:
        pytest.fail(f"the store flushed to {flushed} does not reopen after the cut: {e}")
    lost = [off for off, seq, size in written if read_back(log, off) != record(0, 0, seq, size)]
    assert not lost, (
        f"{len(lost)} of {len(written)} records below the flushed_offset {flushed} flush() "
        f"returned are lost (offsets {lost[0]}..{lost[-1]}; the log now ends at {log.max_offset})"
    )
    assert log.max_offset >= flushed
    assert log.verify() == [], "verify() is not clean"


if __name__ == "__main__":
    if sys.argv[1] == "two-opens":
        two_opens(sys.argv[2])
    elif sys.argv[1] == "killed-writer":
        killed_writer(sys.argv[2])
    elif sys.argv[1] == "recovering-writer":
        recovering_writer(sys.argv[2])
    else:
        produce(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
