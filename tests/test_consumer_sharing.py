"""Named consumers shared by real processes (``exclusive=False``, the default), and the
promises around them that only other processes, a SIGKILL, a small disk or a power cut can test.

- Opens of one name in several processes split its records: each poll claims the next ones for
  its open; a commit marks the open's claims done; the name's committed position is the lowest
  record nobody has committed. A process killed between a poll and its commit has its claims
  delivered again at once (its lock is gone), and only those: nothing is processed twice by two
  processes that both committed it, nothing below a commit is delivered again, nothing is lost.
- A claim not committed within ``redelivery_timeout`` goes to another open although its
  process lives.
- ``exclusive=True`` holds a name alone, across processes.
- ``retain_unconsumed=True``: retention waits for the slowest consumer (one that is open, or
  committed within ``consumer_idle_hours``), a disk limit (``force_clean_ratio``) does not, and
  the consumer then learns of the loss at its next poll (``DataLossError`` naming the range, or a
  warning with ``on_loss="skip"``).
- Positions are durable: after a power cut (faultfs, lazy mode) a reopened name is at the last
  commit that returned (or the one in flight), never earlier; they survive the loss of one
  directory's positions file and of a whole directory (``accept_lost``).

The children are ``tests/_consumer_child.py``. The million-record test prints its seed;
``RMQLOG_TEST_SEED=N`` repeats a run.
"""

from __future__ import annotations

import array
import fcntl
import json
import logging
import math
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import _faultfs
import _mounts
import pytest
from _consumer_child import COMMIT, body
from _procs import finish, sigkill, wait_for

import rmqlog
from rmqlog import CommitLog, CommitLogError, ConsumerBusyError, DataLossError

CHILD = Path(__file__).with_name("_consumer_child.py")

KIB = 1024
MIB = 1024 * KIB
SEGMENT = 64 * KIB
POSITIONS = "rmqlog.consumers"


# ---------------------------------------------------------------------------------------------
# helpers


def two_dirs(base: Path) -> list[str]:
    return [str(base / "d0"), str(base / "d1")]


def fill(log: CommitLog, n: int, start: int = 0) -> list[int]:
    """Appends records ``start`` .. ``start + n - 1`` (``_consumer_child.body``); their offsets."""
    return log.append_batch([body(i) for i in range(start, start + n)])


def offsets(records) -> list[int]:
    return [off for off, _ in records]


def listed(log: CommitLog, name: str) -> dict:
    [entry] = [c for c in log.consumers() if c["name"] == name]
    return entry


def spawn(mode: str, **args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(CHILD), mode, json.dumps(args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def line_of(proc: subprocess.Popen, prefix: str = "") -> str:
    """The child's next line, which must start with ``prefix``."""
    line = proc.stdout.readline()
    if not line.startswith(prefix) or not line.endswith("\n"):
        proc.kill()
        raise AssertionError(
            f"expected {prefix!r} from the child, got {line!r}: {proc.stderr.read()}"
        )
    return line.strip()


class Driver:
    """A child process opening consumers of the store as the test tells it (``driver`` mode of
    ``_consumer_child.py``): ``call(op, name, **args)`` returns its reply."""

    def __init__(self, dirs, **log_kwargs) -> None:
        self.proc = spawn("driver", dirs=dirs, log={"read_only": True, **log_kwargs})

    def call(self, op: str, name: str | None = None, **args) -> dict:
        self.send(op, name, **args)
        return self.reply()

    def send(self, op: str, name: str | None = None, **args) -> None:
        """Sends a command without waiting for its reply (``reply()`` reads it)."""
        self.proc.stdin.write(json.dumps({"op": op, "name": name, **args}) + "\n")
        self.proc.stdin.flush()

    def reply(self) -> dict:
        return json.loads(line_of(self.proc))

    def ok(self, op: str, name: str | None = None, **args) -> dict:
        reply = self.call(op, name, **args)
        assert reply["ok"], reply
        return reply

    def refused(self, op: str, name: str | None = None, **args) -> dict:
        reply = self.call(op, name, **args)
        assert not reply["ok"], f"{op} {name} {args} was not refused: {reply}"
        return reply

    def polled(self, name: str, n: int = 500, timeout: float = 0) -> list[int]:
        return self.ok("poll", name, max=n, timeout=timeout)["offsets"]

    def kill(self) -> None:
        sigkill(self.proc)

    def close(self) -> None:
        finish(self.proc)


@pytest.fixture
def drivers():
    """``drivers(dirs, **log_kwargs)`` starts a :class:`Driver`; all are killed at teardown."""
    made: list[Driver] = []

    def make(dirs, **log_kwargs) -> Driver:
        d = Driver(dirs, **log_kwargs)
        made.append(d)
        return d

    yield make
    for d in made:
        d.close()


# ---------------------------------------------------------------------------------------------
# 1. Four processes share a million records; one is SIGKILLed


RECORDS = 1_000_000
SHARERS = 4
BIG_SEGMENT = 8 * MIB


class Processed:
    """What one ``share`` child wrote to its record file: the offsets of each poll, in order,
    and the position each commit returned (a mark written once the commit returned)."""

    def __init__(self, path: Path) -> None:
        raw = array.array("Q")
        data = path.read_bytes() if path.exists() else b""
        raw.frombytes(data[: len(data) // 8 * 8])  # a killed write may be cut at a page
        last = max((i for i in range(len(raw) - 1, -1, -1) if raw[i] & COMMIT), default=-1)
        self.commits = [v & ~COMMIT for v in raw if v & COMMIT]
        self.offsets = [v for v in raw if not v & COMMIT]
        # Processed before the last commit that returned: done, as far as this process knows.
        self.covered = [v for v in raw[: last + 1] if not v & COMMIT]
        # Processed after it: the records of a commit that never returned (or never started).
        self.uncovered = list(raw[last + 1 :])


def test_four_processes_share_a_million_records_and_a_sigkill_repeats_only_its_uncommitted(
    tmp_path,
):
    seed = int(os.environ.get("RMQLOG_TEST_SEED") or random.randrange(2**32))
    print(f"seed {seed} (RMQLOG_TEST_SEED={seed} repeats this run)")
    rng = random.Random(seed)
    dirs = two_dirs(tmp_path)
    log = CommitLog(dirs, segment_size=BIG_SEGMENT, clean_interval_ms=0)
    every: list[int] = []
    for start in range(0, RECORDS, 100_000):
        every += fill(log, 100_000, start)
    end = log.max_offset

    def sharer(k: int) -> subprocess.Popen:
        return spawn(
            "share",
            dirs=dirs,
            name="work",
            out=str(tmp_path / f"processed-{k}"),
            end=end,
            seed=rng.randrange(2**32),
            lo=100,
            hi=500,
        )

    procs = [sharer(k) for k in range(SHARERS)]
    try:
        for p in procs:
            line_of(p, "ready")
        for p in procs:  # all start together
            p.stdin.write("go\n")
            p.stdin.flush()
        victim = rng.randrange(SHARERS)
        threshold = rng.randrange(5_000, 60_000)  # records the victim processed, at least
        out = tmp_path / f"processed-{victim}"
        while not out.exists() or out.stat().st_size < threshold * 8:
            assert procs[victim].poll() is None, f"seed {seed}: the victim ended before the kill"
            time.sleep(0.0005)
        time.sleep(rng.random() * 0.003)  # anywhere: between its poll, its write, its commit
        sigkill(procs[victim])
        procs.append(sharer(SHARERS))  # a replacement (it may take the victim's member slot)
        line_of(procs[-1], "ready")
        procs[-1].stdin.write("go\n")
        procs[-1].stdin.flush()
        refused = {}
        for k, p in enumerate(procs):
            if k == victim:
                continue
            stdout, stderr = p.communicate(timeout=120)
            assert p.returncode == 0 and stdout.startswith("done "), (seed, k, stderr)
            refused[k] = int(stdout.split()[1])
    finally:
        finish(*procs)

    runs = [Processed(tmp_path / f"processed-{k}") for k in range(len(procs))]
    dead = runs[victim]
    live = [r for k, r in enumerate(runs) if k != victim]
    assert dead.offsets, f"seed {seed}: the victim processed nothing before the kill"
    for k, r in enumerate(runs):
        # commit() returns the name's committed position: it never goes back, never past the end.
        assert r.commits == sorted(r.commits), (seed, k)
        assert all(c <= end for c in r.commits), (seed, k)
    for r in live:  # each ended once a commit returned the end ("done")
        assert r.uncovered == [], seed
    # Every record was processed at least once, and nothing else was.
    counts = Counter(o for r in runs for o in r.offsets)
    assert len(counts) == len(every), (
        f"seed {seed}: {len(every) - len(counts.keys() & set(every))} records never processed"
    )
    assert counts.keys() == set(every), seed
    # Processed twice: only what the victim had been given after its last commit that returned.
    twice = {o for o, n in counts.items() if n > 1}
    unexplained = twice - set(dead.uncovered)
    assert not unexplained, (
        f"seed {seed}: {len(unexplained)} records processed more than once that the killed "
        f"process had not left uncommitted, from {min(unexplained)}"
    )
    assert max(counts.values()) <= 2, seed
    # Never by two processes that both committed it.
    committed_by: dict[int, int] = {}
    for k, r in enumerate(runs):
        for o in r.covered:
            assert committed_by.setdefault(o, k) == k, (
                f"seed {seed}: record {o} was processed and committed by processes "
                f"{committed_by[o]} and {k}"
            )
    # The victim's last claim went to another process whole, or not at all (its commit was made
    # just before the kill): one commit marks one claim.
    again = [o in twice for o in dead.uncovered]
    assert all(again) or not any(again), (seed, len(dead.uncovered), again.count(True))
    print(
        f"victim {victim} processed {len(dead.offsets)}, {len(dead.uncovered)} uncommitted, "
        f"{len(twice)} processed twice"
    )

    assert listed(log, "work")["position"] == end == log.max_offset
    log.close()
    with CommitLog(dirs, read_only=True) as again_log, again_log.consumer("work") as c:
        assert (c.position, c.committed) == (end, end)
        assert c.poll(timeout=0) == []
    # Each open committed every poll before the next: never more than one uncommitted poll of
    # its own, five at most in the name, far from the limit of 120.
    assert sum(refused.values()) == 0, (
        f"seed {seed}: polls refused with 'polls not committed' (retried) per process: {refused}"
    )


def test_polls_committed_behind_an_uncommitted_one_do_not_count_toward_the_limit(tmp_path):
    """The limit is 120 uncommitted polls per name. One open keeps a poll uncommitted (a slow
    process, or a dead one whose claim nobody has taken yet); the other opens' polls, each
    committed, wait behind it for the name's position to move, but they are committed: they
    must not make the next poll fail."""
    with CommitLog(str(tmp_path / "d"), segment_size=SEGMENT, clean_interval_ms=0) as log:
        offs = fill(log, 400)
        slow, busy = log.consumer("n"), log.consumer("n")
        assert offsets(slow.poll(1)) == offs[:1]
        done = []
        for _ in range(200):
            done += offsets(busy.poll(1))
            assert busy.commit() == 0  # the name waits for the slow one's record
        assert done == offs[1:201]
        assert slow.commit() == offs[201]  # then moves over everything committed behind it
        # The limit itself: one open's 121st uncommitted poll is refused.
        for _ in range(120):
            assert len(busy.poll(1)) == 1
        with pytest.raises(CommitLogError, match="120 polls not committed"):
            busy.poll(1)
        assert busy.commit() == offs[321]


# ---------------------------------------------------------------------------------------------
# 2. Killed between a poll and its commit


def test_a_consumer_killed_between_poll_and_commit_has_its_claims_redelivered_at_once(
    tmp_path, drivers
):
    """The other open's poll, already waiting, gets the dead process's records within a second
    (the redelivery timeout is 30 s: the death is seen through its lock), first part first when
    the claim is larger than ``max_records``; nothing below the dead one's commit comes again."""
    dirs = two_dirs(tmp_path)
    log = CommitLog(dirs, segment_size=SEGMENT, clean_interval_ms=0)
    offs = fill(log, 200)
    end = log.max_offset
    a = drivers(dirs)
    assert a.ok("open", "jobs", redelivery_timeout=30.0)["position"] == 0
    assert a.polled("jobs", 50) == offs[:50]
    assert a.ok("commit", "jobs")["committed"] == offs[50]
    assert a.polled("jobs", 30) == offs[50:80]  # claimed; never committed

    b = log.consumer("jobs", redelivery_timeout=30.0)
    assert offsets(b.poll(500, timeout=0)) == offs[80:]  # a live process's claims stay its own
    assert b.poll(10, timeout=0) == []
    got: dict = {}

    def waiting_poll():
        got["offsets"] = offsets(b.poll(10, timeout=20))
        got["at"] = time.monotonic()

    t = threading.Thread(target=waiting_poll)
    t.start()
    time.sleep(0.3)
    assert t.is_alive(), f"the poll returned {got} while the claimer lived"
    killed = time.monotonic()
    a.kill()
    t.join(25)
    assert not t.is_alive()
    assert got["offsets"] == offs[50:60]  # the first part of the dead claim
    assert got["at"] - killed < 2.0, f"redelivered {got['at'] - killed:.2f} s after the death"
    assert offsets(b.poll(10, timeout=0)) == offs[60:70]
    assert offsets(b.poll(100, timeout=0)) == offs[70:80]  # the rest of it, and no more
    assert b.poll(10, timeout=0) == []
    assert b.commit() == end  # everything done: the dead one's 50, then b's
    assert listed(log, "jobs")["position"] == end

    # Nothing below the commit comes again: not to a new open in another process, and not to
    # one after every open closed.
    c = drivers(dirs)
    assert c.ok("open", "jobs")["committed"] == end
    assert c.polled("jobs") == []
    more = fill(log, 5, start=200)
    assert c.polled("jobs", timeout=5) == more
    b.close()
    c.kill()
    log.close()
    with CommitLog(dirs, segment_size=SEGMENT) as again, again.consumer("jobs") as d:
        assert d.committed == end
        assert offsets(d.poll(100, timeout=0)) == more  # c's claim (c was killed), again


# ---------------------------------------------------------------------------------------------
# 3. The redelivery timeout


def test_records_an_open_keeps_past_redelivery_timeout_go_to_another_open(tmp_path, drivers):
    """An open that polled and sleeps (alive) for longer than ``redelivery_timeout``: another
    open's waiting poll gets its records once the timeout passed, not before; the sleeper's late
    commit then commits nothing of them (they are the other open's now)."""
    dirs = two_dirs(tmp_path)
    log = CommitLog(dirs, segment_size=SEGMENT, clean_interval_ms=0)
    offs = fill(log, 60)
    sleeper = drivers(dirs)
    sleeper.ok("open", "jobs", redelivery_timeout=0.5)
    reply = sleeper.ok("poll", "jobs", max=20)
    claimed_at = reply["at"]
    assert reply["offsets"] == offs[:20]

    b = log.consumer("jobs", redelivery_timeout=0.5)
    assert offsets(b.poll(500, timeout=0)) == offs[20:]
    assert b.commit() == 0  # b's records are done, the sleeper's are not: the name stays at 0
    got = offsets(b.poll(100, timeout=10))  # waits for the timeout: nothing else is left
    waited = time.time() - claimed_at
    assert got == offs[:20]
    assert 0.45 <= waited < 3.0, waited  # wall clock, whole milliseconds
    assert sleeper.proc.poll() is None  # it lives: the timeout, not a death, moved them

    # The sleeper wakes and commits: its claim is b's now, so the name does not move, and the
    # sleeper learns that its work on them is repeated, and by whom.
    lost = sleeper.refused("commit", "jobs")
    assert lost["error"] == "ClaimLostError", lost
    assert lost["lost"] == [[offs[0], offs[20], os.getpid()]] and lost["committed"] == 0
    assert listed(log, "jobs")["position"] == 0
    assert b.commit() == log.max_offset
    assert sleeper.polled("jobs") == []  # nothing below the commit comes again
    b.close()
    log.close()


# ---------------------------------------------------------------------------------------------
# 4. Exclusive and shared opens across processes


def test_exclusive_and_shared_opens_of_a_name_refuse_each_other_across_processes(tmp_path, drivers):
    dirs = two_dirs(tmp_path)
    log = CommitLog(dirs, segment_size=SEGMENT, clean_interval_ms=0)
    offs = fill(log, 30)
    s1, s2, other = drivers(dirs), drivers(dirs), drivers(dirs)
    # Two processes share the name, each with records of its own.
    s1.ok("open", "orders")
    s2.ok("open", "orders")
    assert s1.polled("orders", 5) == offs[:5]
    assert s2.polled("orders", 5) == offs[5:10]
    # Held shared: an exclusive open is refused in every process.
    refusal = other.refused("open", "orders", exclusive=True)
    assert refusal["error"] == "ConsumerBusyError" and '"orders"' in refusal["message"]
    with pytest.raises(ConsumerBusyError, match='"orders"'):
        log.consumer("orders", exclusive=True)
    assert "exclusive=True" in s1.refused("seek", "orders", to="earliest")["message"]
    s1.ok("commit", "orders")
    s1.ok("close", "orders")
    assert other.refused("open", "orders", exclusive=True)["error"] == "ConsumerBusyError"
    # The last shared open dies: the name is free for an exclusive one, at the committed
    # position (s1's five; s2 never committed: its records come again).
    s2.kill()
    assert other.ok("open", "orders", exclusive=True)["position"] == offs[5]
    assert other.polled("orders", 12) == offs[5:17]  # an exclusive open reads from the commit
    assert other.ok("commit", "orders")["committed"] == offs[17]
    # Held alone: every other open is refused, shared or exclusive, in any process.
    third = drivers(dirs)
    for exclusive in (False, True):
        assert third.refused("open", "orders", exclusive=exclusive)["error"] == "ConsumerBusyError"
        with pytest.raises(ConsumerBusyError):
            log.consumer("orders", exclusive=exclusive)
    assert other.ok("seek", "orders", to=offs[3])["position"] == offs[3]  # alone: seek works
    other.kill()
    with log.consumer("orders") as shared:  # free again, at the dead one's commit
        assert (shared.position, shared.committed) == (offs[17], offs[17])
        assert third.ok("open", "orders")["committed"] == offs[17]  # and shared again
    log.close()


# ---------------------------------------------------------------------------------------------
# 5. Retention waits for a slow consumer


RSEG = 8 * KIB


def segment_starts(log: CommitLog) -> list[int]:
    return [s.start_offset for s in log.segments()]


def test_retention_waits_for_an_uncommitted_consumer_and_deletes_up_to_its_commit(
    tmp_path, drivers
):
    dirs = two_dirs(tmp_path)
    log = CommitLog(
        dirs,
        segment_size=RSEG,
        retain_unconsumed=True,
        retention_bytes=RSEG,
        max_deletes_per_pass=1000,
        clean_interval_ms=0,
    )
    offs = log.append_batch([b"%05d" % i * 20 for i in range(600)])  # 132 B each: 15 segments
    assert len(log.segments()) >= 8
    slow = drivers(dirs)  # another process holds the name and never commits
    slow.ok("open", "slow")
    assert slow.polled("slow", 100) == offs[:100]
    assert log.clean() == 0 and log.min_offset == 0
    stats = log.stats()
    assert (stats["head_held_by"], stats["head_held_at"]) == ("slow", 0)
    entry = listed(log, "slow")
    assert entry["open"] and entry["holds_retention"] and entry["position"] == 0

    committed = slow.ok("commit", "slow")["committed"]
    assert committed == offs[100]
    before = segment_starts(log)
    deleted = log.clean()
    keep = max(s for s in before if s <= committed)  # the segment holding its next record
    assert log.min_offset == keep and deleted == before.index(keep) > 0
    assert log.stats()["head_held_at"] == committed
    assert log.clean() == 0  # nothing more while it holds

    # Closed but committed within consumer_idle_hours (24 h): it still holds.
    slow.ok("close", "slow")
    entry = listed(log, "slow")
    assert not entry["open"] and entry["holds_retention"]
    assert log.clean() == 0 and log.stats()["head_held_by"] == "slow"

    # Dropped: it no longer holds, and retention_bytes applies alone.
    log.drop_consumer("slow")
    assert log.clean() > 0
    assert log.min_offset > committed
    assert log.stats()["head_held_by"] is None and log.stats()["head_held_at"] is None
    assert log.max_offset - log.segments()[1].start_offset < RSEG  # the size kept, no more
    log.close()


@pytest.mark.parametrize("gone", ["closed", "killed"])
def test_an_idle_consumer_stops_holding_retention_once_no_open_holds_it(tmp_path, drivers, gone):
    dirs = two_dirs(tmp_path)
    log = CommitLog(
        dirs,
        segment_size=RSEG,
        retain_unconsumed=True,
        consumer_idle_hours=1e-6,  # 3.6 ms
        retention_bytes=RSEG,
        max_deletes_per_pass=1000,
        clean_interval_ms=0,
    )
    offs = log.append_batch([b"%05d" % i * 20 for i in range(600)])
    idle = drivers(dirs)
    idle.ok("open", "idle")
    assert idle.polled("idle", 5) == offs[:5]  # never committed
    time.sleep(0.05)  # idle far longer than consumer_idle_hours
    assert log.clean() == 0  # open: it holds, idle or not
    assert log.stats()["head_held_by"] == "idle"
    if gone == "closed":
        idle.ok("close", "idle")
    else:
        idle.kill()
    assert wait_for(lambda: not listed(log, "idle")["holds_retention"]), log.consumers()
    assert log.clean() > 0
    assert log.min_offset > 0 and log.stats()["head_held_by"] is None
    # Its records went: its next open learns it at its first poll.
    again = drivers(dirs)
    again.ok("open", "idle")
    reply = again.refused("poll", "idle")
    assert reply["error"] == "DataLossError"
    assert f"[0, {log.min_offset})" in reply["message"], reply
    log.close()


# ---------------------------------------------------------------------------------------------
# 6. A disk limit deletes what a consumer holds


def rmqlog_warnings(caplog, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "rmqlog" and r.levelno == logging.WARNING and text in r.getMessage()
    ]


@pytest.mark.parametrize("exclusive", [False, True], ids=["shared", "exclusive"])
def test_force_clean_ratio_deletes_what_an_uncommitted_consumer_holds_and_it_learns(
    mnt, caplog, exclusive
):
    caplog.set_level(logging.WARNING, logger="rmqlog")
    seg = 64 * KIB
    disk = mnt.tmpfs("disk", 2 * MIB)
    log = mnt.log(
        [disk],
        segment_size=seg,
        force_clean_ratio=0.5,
        retain_unconsumed=True,
        max_deletes_per_pass=100,
        clean_interval_ms=0,
        warm_ahead=0,
    )
    raiser = log.consumer("raiser", exclusive=exclusive)
    skipper = log.consumer("skipper", on_loss="skip", exclusive=exclusive)
    written: list[int] = []
    while _mounts.used_ratio(disk) < 0.4:
        written += log.append_batch([b"%06d" % (len(written) + j) * 150 for j in range(20)])
    first = offsets(raiser.poll(3, timeout=0))  # polled, never committed
    assert first == written[:3]
    assert log.clean() == 0  # under the ratio: the consumers hold everything
    assert log.stats()["head_held_by"] in ("raiser", "skipper")

    # Another program's file takes the disk over force_clean_ratio.
    s = os.statvfs(disk)
    total, used = s.f_blocks * s.f_frsize, (s.f_blocks - s.f_bfree) * s.f_frsize
    _mounts.fill(disk, math.ceil((0.58 * total - used) / 4096) * 4096)
    assert _mounts.used_ratio(disk) >= 0.5
    deleted = log.clean()
    low = log.min_offset
    assert deleted > 0 and low > written[3], (deleted, low)
    assert _mounts.used_ratio(disk) < 0.5
    assert listed(log, "raiser")["position"] == 0 < low  # deleted although nobody committed

    with pytest.raises(DataLossError) as e:
        raiser.poll(10, timeout=0)
    message = str(e.value)
    lost = re.search(r"\[(\d+), (\d+)\)", message)
    assert lost and '"raiser"' in message, message
    # The range ends where the log now starts, and covers every record not yet delivered.
    assert int(lost[2]) == low and int(lost[1]) <= written[3], message

    kept = [o for o in written if o >= low]
    assert offsets(skipper.poll(5, timeout=0)) == kept[:5]  # goes on from min_offset
    rmqlog._native._flush_logging()
    assert wait_for(lambda: rmqlog_warnings(caplog, f", {low})")), caplog.text
    assert '"skipper"' in rmqlog_warnings(caplog, f", {low})")[0]
    raiser.close()
    skipper.close()


# ---------------------------------------------------------------------------------------------
# 7. Positions survive a power cut


PSEG = 256 * KIB


@pytest.fixture
def lockable_faultfs(faultfs_available, tmp_path):
    """The ``faultfs`` mount; checks that a process can take an OFD byte lock there (what a
    consumer's open does: the kernel keeps fcntl locks itself on a FUSE mount whose daemon
    implements no ``lock`` operation)."""
    fs = _faultfs.FaultFS(tmp_path / "faultfs")
    fs.start()
    try:
        fd = os.open(fs.path / "lock-probe", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            ofd_setlk = getattr(fcntl, "F_OFD_SETLK", 37)
            fcntl.fcntl(fd, ofd_setlk, struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 1 << 40, 1, 0))
        finally:
            os.close(fd)
            os.unlink(fs.path / "lock-probe")
        yield fs
    finally:
        fs.close()


class Stepper:
    """A ``steps`` child: polls and commits once per ``step()``; its commits as they returned."""

    def __init__(self, dirs, name: str, exclusive: bool, seed: int) -> None:
        self.proc = spawn("steps", dirs=dirs, name=name, exclusive=exclusive, seed=seed)
        self.start = int(line_of(self.proc, "start").split()[1])

    def go(self) -> None:
        self.proc.stdin.write("step\n")
        self.proc.stdin.flush()

    def polled(self) -> int:
        return int(line_of(self.proc, "polled").split()[1])

    def committed(self) -> int:
        return int(line_of(self.proc, "committed").split()[1])


@pytest.mark.parametrize("mode", ["exclusive", "shared", "shared-by-two"])
def test_a_committed_position_survives_a_power_cut(lockable_faultfs, mode):
    """Children poll and commit in turn (one step at a time, so what was in flight is known); the
    power goes either while all wait between steps (the name must be at the last commit that
    returned) or a moment after a poll returned (at that commit, or at the one in flight)."""
    faultfs = lockable_faultfs
    faultfs.lazy()
    dirs = two_dirs(faultfs.path)
    exclusive = mode == "exclusive"
    log = faultfs.log(dirs, segment_size=PSEG, clean_interval_ms=0)
    fill(log, 5000)
    end = log.max_offset
    log.flush()
    rng = random.Random(f"power {mode}")
    last = 0  # the name's position as the store last showed it
    for cut in ("between", "in flight", "between", "in flight"):
        n = 2 if mode == "shared-by-two" else 1
        kids = [Stepper(dirs, "pc", exclusive, rng.randrange(2**32)) for _ in range(n)]
        try:
            assert all(k.start == last for k in kids), ([k.start for k in kids], last)
            returned = last
            for _ in range(rng.randint(5, 25)):
                kid = rng.choice(kids)
                kid.go()
                kid.polled()
                returned = kid.committed()
            allowed = {returned}
            if cut == "in flight":
                kid = rng.choice(kids)
                kid.go()
                allowed.add(kid.polled())  # the commit that follows may or may not be made
                time.sleep(rng.random() * 0.01)
        finally:
            faultfs.power_cut(*(k.proc for k in kids))
            finish(*(k.proc for k in kids))
        log = faultfs.log(dirs, segment_size=PSEG, clean_interval_ms=0)
        assert log.max_offset == end, "the records were synced before the first cut"
        position = listed(log, "pc")["position"]
        assert position in allowed, (cut, position, allowed, last)
        with log.consumer("pc", exclusive=exclusive) as c:
            assert (c.position, c.committed) == (position, position)
            assert offsets(c.poll(1, timeout=0)) == [position]  # every record after it comes
        last = position
    assert last > 0


# ---------------------------------------------------------------------------------------------
# 8. Positions survive the loss of one directory


def commit_from_two_processes(dirs, drivers, n: int, **log_kwargs) -> int:
    """Two processes share the name ``keep`` and commit ``n`` records between them; the name's
    committed position."""
    a, b = drivers(dirs, **log_kwargs), drivers(dirs, **log_kwargs)
    a.ok("open", "keep")
    b.ok("open", "keep")
    while True:
        got_a = a.polled("keep", 7)
        got_b = b.polled("keep", 5)
        done = max(a.ok("commit", "keep")["committed"], b.ok("commit", "keep")["committed"])
        n -= len(got_a) + len(got_b)
        if n <= 0 or not (got_a or got_b):
            a.ok("close", "keep")
            b.ok("close", "keep")
            return done


@pytest.mark.parametrize("lost", [0, 1])
def test_a_position_survives_the_loss_of_one_directorys_positions_file(tmp_path, drivers, lost):
    dirs = two_dirs(tmp_path)
    log = CommitLog(dirs, segment_size=RSEG, clean_interval_ms=0)
    offs = fill(log, 400)
    position = commit_from_two_processes(dirs, drivers, 150)
    assert position in offs and position >= offs[150]
    log.close()
    os.remove(os.path.join(dirs[lost], POSITIONS))
    with CommitLog(dirs, segment_size=RSEG, clean_interval_ms=0) as again:
        assert listed(again, "keep")["position"] == position
        with again.consumer("keep") as c:
            assert c.committed == position
            assert offsets(c.poll(1, timeout=0)) == [position]


@pytest.mark.parametrize("lost", [0, 1])
def test_a_position_survives_the_loss_of_a_whole_directory(tmp_path, drivers, lost):
    """A directory gone for good (``accept_lost``), then replaced by an empty one: the position
    is the other directory's, and the next commit writes it to the new one too."""
    dirs = two_dirs(tmp_path)
    log = CommitLog(dirs, segment_size=RSEG, clean_interval_ms=0)
    offs = fill(log, 1000)  # 7 segments, in both directories
    position = commit_from_two_processes(dirs, drivers, 150)
    assert position in offs
    log.close()
    shutil.rmtree(dirs[lost])
    kept = dirs[1 - lost]
    with CommitLog([kept], segment_size=RSEG, clean_interval_ms=0, accept_lost=[dirs[lost]]) as log:
        assert log.holes(), "the lost directory held segments"
        assert listed(log, "keep")["position"] == position
        left = [o for o, _ in log.scan()]
        with log.consumer("keep") as c:
            assert c.committed == position
            assert offsets(c.poll(1, timeout=0)) == [min(o for o in left if o >= position)]
    # A new, empty disk where the lost one was.
    os.mkdir(dirs[lost])
    log = CommitLog(dirs, segment_size=RSEG, clean_interval_ms=0)
    assert listed(log, "keep")["position"] == position
    later = commit_from_two_processes(dirs, drivers, 20)
    assert later > position
    assert os.path.getsize(os.path.join(dirs[lost], POSITIONS)) > 0
    log.close()
    os.remove(os.path.join(kept, POSITIONS))  # now the new directory alone knows it
    with CommitLog(dirs, segment_size=RSEG, clean_interval_ms=0) as log:
        assert listed(log, "keep")["position"] == later
