"""A randomized chaos test of shared writers (``exclusive=False``) with real producer processes
SIGKILLed at random and a follower process waiting for their records
(docs/producers-consumers.md).

Three or four producer processes append at random (single records, batches of 1 to 200, empty and
large bodies, every flush mode, ``flush()`` now and then) to a store of 1 MiB segments, with or
without retention deleting its head meanwhile; each acknowledges every record once its call
returned (tests/_proc_chaos.py). The parent SIGKILLs producers at random (one, the one doing the
store's background work, or all at once), lets one close now and then, and starts a new
incarnation in each one's place. A follower process follows the store from offset 0 with
``scan(follow=True)``, validating every record as it comes. At the end every producer stops
(closing, or killed: the seed picks), the parent opens the store exclusively, appends a stop
record the follower ends at, and checks:

- the follower saw no invalid record and no error, and exactly the records of the store above
  its head;
- nothing was deleted that retention did not allow: without retention the head stays at 0 (the
  segment files are watched during the run too); with ``retention_bytes`` the log keeps at least
  that much;
- every acknowledged record reads back with its body at its offset (below the head, where
  retention allowed its deletion: the follower saw it, or it was deleted before the follower got
  there);
- nothing that was never acknowledged appears, but the one call each killed producer may have
  been in; batches are whole and contiguous; ``verify()`` is clean;
- no producer, no follower and no handover of the background work stalled for 10 s (these fail
  at once; the rest is reported at the end, every kind of problem with its count).

``RMQLOG_PROC_CHAOS_SECS`` (default 15) sets the length, ``RMQLOG_PROC_CHAOS_SEED`` replays a run's
choices (the seed is printed; kill timing depends on the machine, so a replay is not exact).
"""

from __future__ import annotations

import contextlib
import heapq
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import _proc_chaos as pc

from rmqlog import HEADER_LEN, CommitLog

SECS = float(os.environ.get("RMQLOG_PROC_CHAOS_SECS", "15"))
STUCK = 10.0  # seconds without progress that count as a stall
SEGMENT = 1 << 20
CHILD = str(Path(__file__).with_name("_proc_chaos.py"))
EMPTY = pc.digest(b"")
MAX_SHOWN = 20  # problems shown in a failure


class ChaosFailure(AssertionError):
    pass


class Problems:
    """What failed at the end, by kind: how many of each and the first few."""

    def __init__(self) -> None:
        self.kinds: dict[str, list] = {}  # kind -> [count, first examples]

    def add(self, kind: str, example: str) -> None:
        entry = self.kinds.setdefault(kind, [0, []])
        entry[0] += 1
        if len(entry[1]) < MAX_SHOWN:
            entry[1].append(example)

    def __bool__(self) -> bool:
        return bool(self.kinds)

    def __str__(self) -> str:
        out = []
        for kind, (count, examples) in self.kinds.items():
            out.append(f"- {kind}: {count}")
            out.extend(f"    {e}" for e in examples)
        return "\n".join(out)


@dataclass
class Incarnation:
    inc: int
    slot: int
    flush: str
    proc: subprocess.Popen
    acks: Path
    err: Path
    stop: Path
    started: float
    last_progress: float
    size: int = 0
    opened: bool = False
    closed: bool = False
    killed: bool = False
    retiring: float | None = None  # when it was asked to close
    max_acked: int = -1  # the largest acknowledged offset so far (offsets grow in a process)


@dataclass
class Counts:
    incarnations: int = 0
    kills: int = 0
    owner_kills: int = 0
    all_kills: int = 0
    retires: int = 0
    killed_closing: int = 0
    owner_handovers: int = 0
    kinds: dict[str, int] = field(default_factory=dict)  # calls by kind (tests/_proc_chaos.py)
    records_acked: int = 0
    flushes: int = 0


def proc_locks_owner(dirs: list[Path]) -> int | None:
    """The pid holding the exclusive flock on ``rmqlog.owner`` (the background work), if any."""
    inodes = set()
    for d in dirs:
        with contextlib.suppress(OSError):
            inodes.add(os.stat(d / "rmqlog.owner").st_ino)
    with open("/proc/locks") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[1] == "FLOCK" and parts[3] == "WRITE":
                if int(parts[5].rsplit(":", 1)[1]) in inodes:
                    return int(parts[4])
    return None


def describe_process(pid: int) -> str:
    """What a stalled process is doing: its state and where each thread waits."""
    out = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        with contextlib.suppress(OSError):
            stat = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
            wchan = (task / "wchan").read_text()
            syscall = (task / "syscall").read_text().split()[:1]
            name = (task / "comm").read_text().strip()
            out.append(f"  tid {task.name} {name}: state {stat} wchan {wchan} syscall {syscall}")
    return "\n".join(out) or "  (gone)"


def tail(path: Path, n: int = 4000) -> str:
    with contextlib.suppress(OSError):
        data = path.read_bytes()
        return data[-n:].decode(errors="replace")
    return ""


class Chaos:
    def __init__(self, root: Path, seed: int, secs: float) -> None:
        self.root = root
        self.seed = seed
        self.secs = secs
        self.rng = random.Random(seed)
        self.dirs = [root / "d0", root / "d1"]
        self.work = root / "work"
        self.work.mkdir()
        self.slots = self.rng.choice([3, 4])
        self.retention = self.rng.choice([None, 24 << 20, 64 << 20])
        self.end_mode = self.rng.choice(["close", "kill"])
        self.store = {
            "segment_size": SEGMENT,
            "retention_bytes": self.retention,
            "clean_interval_ms": 200,
        }
        self.incs: list[Incarnation] = []
        self.live: dict[int, Incarnation] = {}  # slot -> its incarnation
        self.pending: dict[int, float] = {}  # slot -> when to start its next incarnation
        self.counts = Counts()
        self.follower: subprocess.Popen | None = None
        self.fol_pos = 0
        self.fol_records = 0
        self.fol_since = time.monotonic()  # since when it has been at fol_pos
        self.fol_problems = 0  # lines of its problems file seen
        self.owner: int | None = None
        self.owner_missing_since: float | None = None
        self.stop_all = self.work / "stop-all"
        self.stopping = False
        self.t0 = time.monotonic()
        self.bad_head: tuple[float, str] | None = None  # when files went that had to stay

    # --- processes ---------------------------------------------------------------------------

    def spawn(self, slot: int) -> None:
        inc = len(self.incs)
        flush = ("async", "sync", "none")[(slot + inc) % 3]
        args = {
            "slot": slot,
            "inc": inc,
            "seed": self.rng.getrandbits(64),
            "dirs": [str(d) for d in self.dirs],
            "store": self.store,
            "flush": flush,
            "flush_interval_ms": self.rng.choice([20, 100, 500]),
            "arrow": self.rng.random() < 0.4,
            "acks": str(self.work / f"acks.{inc}"),
            "stop_all": str(self.stop_all),
            "stop_me": str(self.work / f"stop.{inc}"),
        }
        err = self.work / f"stderr.{inc}"
        Path(args["acks"]).touch()  # it may be killed before it opens the file
        with open(err, "wb") as e:
            proc = subprocess.Popen(
                [sys.executable, CHILD, "producer", json.dumps(args)],
                stdin=subprocess.DEVNULL,
                stdout=e,
                stderr=e,
            )
        now = time.monotonic()
        i = Incarnation(
            inc, slot, flush, proc, Path(args["acks"]), err, Path(args["stop_me"]), now, now
        )
        self.incs.append(i)
        self.live[slot] = i
        self.counts.incarnations += 1

    def kill(self, i: Incarnation) -> None:
        i.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(i.proc.pid, signal.SIGKILL)
        i.proc.wait()
        self.counts.kills += 1
        del self.live[i.slot]
        delay = 0.0 if self.rng.random() < 0.8 else self.rng.uniform(0.0, 0.5)
        self.pending[i.slot] = time.monotonic() + delay

    def kill_everything(self) -> None:
        for i in self.incs:
            if i.proc.poll() is None:
                i.proc.kill()
                i.proc.wait()
        if self.follower is not None and self.follower.poll() is None:
            self.follower.kill()
            self.follower.wait()

    # --- failing -----------------------------------------------------------------------------

    def fail(self, what: str) -> None:
        __tracebackhide__ = True
        lines = [
            f"{what}",
            f"RMQLOG_PROC_CHAOS_SEED={self.seed} RMQLOG_PROC_CHAOS_SECS={self.secs:g} "
            f"(slots {self.slots}, retention_bytes {self.retention}, end {self.end_mode}); "
            f"files in {self.root}",
            f"counts: {self.counts}",
        ]
        for i in self.live.values():
            if i.proc.poll() is None:
                lines.append(f"inc {i.inc} (slot {i.slot}, pid {i.proc.pid}, {i.flush}):")
                lines.append(describe_process(i.proc.pid))
        if self.follower is not None and self.follower.poll() is None:
            lines.append(f"follower (pid {self.follower.pid}):")
            lines.append(describe_process(self.follower.pid))
        found = tail(self.work / "problems", 1 << 20).splitlines()
        if found:
            lines.append(f"the follower's problems ({len(found)}):")
            lines.extend(f"  {line}" for line in found[:MAX_SHOWN])
        raise ChaosFailure("\n".join(lines))

    # --- watching ----------------------------------------------------------------------------

    def read_acks(self, i: Incarnation, now: float) -> None:
        try:
            size = os.stat(i.acks).st_size
        except FileNotFoundError:
            size = 0
        if size == i.size:
            return
        with open(i.acks, "rb") as f:
            f.seek(i.size)
            chunk = f.read(size - i.size)
        end = chunk.rfind(b"\n") + 1  # a line being written is read with the next look
        if end == 0:
            return
        i.size += end
        i.last_progress = now
        lines = chunk[:end].splitlines()
        if lines[0] == b"O" or b"\nO\n" in chunk[:end]:
            i.opened = True
        for line in reversed(lines):
            if line[:1].isdigit():
                i.max_acked = max(i.max_acked, int(line.split(b" ", 1)[0]))
                break

    def check(self) -> None:
        """Everything that must hold at every moment: no child died of itself, none stalled."""
        now = time.monotonic()
        for slot, i in list(self.live.items()):
            self.read_acks(i, now)
            rc = i.proc.poll()
            if rc is not None:
                if i.retiring is not None and rc == 0:
                    del self.live[slot]
                    self.pending[slot] = now
                    continue
                self.fail(f"producer inc {i.inc} exited with {rc}:\n{tail(i.err)}")
            if not i.opened and now - i.started > STUCK:
                self.fail(f"producer inc {i.inc} did not open the store in {STUCK} s")
            if now - i.last_progress > STUCK:
                what = "close" if i.retiring is not None else "append"
                self.fail(
                    f"producer inc {i.inc} stuck: no {what} returned for "
                    f"{now - i.last_progress:.1f} s\n{tail(i.err)}"
                )
        for slot, when in list(self.pending.items()):
            if when <= now and not self.stopping:
                del self.pending[slot]
                self.spawn(slot)
        self.check_owner(now)
        self.check_follower(now)
        self.check_files(now)

    def check_files(self, now: float) -> None:
        """The segment files: without retention none is ever deleted; with it, once any was, the
        files span at least ``retention_bytes`` (the log keeps that much; 2 segments of slack
        for a listing of the directories one after the other)."""
        if self.bad_head is not None:
            return
        starts = []
        for d in self.dirs:
            with contextlib.suppress(OSError):
                starts += [int(n) for n in os.listdir(d) if len(n) == 20 and n.isdigit()]
        if not starts or min(starts) == 0:
            return
        first, end = min(starts), max(starts) + SEGMENT
        if self.retention is None:
            why = f"segment 0 deleted (the files hold [{first}, {end}))"
        elif end - first < self.retention - 2 * SEGMENT:
            why = (
                f"the files hold only [{first}, {end}), {end - first} bytes, "
                f"less than retention_bytes {self.retention}"
            )
        else:
            return
        self.bad_head = (now - self.t0, why)
        print(f"shared chaos: at {now - self.t0:.1f} s {why}", flush=True)

    def check_owner(self, now: float) -> None:
        owner = proc_locks_owner(self.dirs)
        if owner != self.owner and owner is not None and self.owner is not None:
            self.counts.owner_handovers += 1
        if owner is not None:
            self.owner = owner
            self.owner_missing_since = None
            return
        open_long = [i for i in self.live.values() if i.opened and now - i.started > 2.0]
        if not open_long:
            self.owner_missing_since = None
        elif self.owner_missing_since is None:
            self.owner_missing_since = now
        elif now - self.owner_missing_since > STUCK:
            self.fail(
                f"no process has done the background work (rmqlog.owner) for "
                f"{now - self.owner_missing_since:.1f} s, with producers open"
            )

    def check_follower(self, now: float) -> None:
        f = self.follower
        assert f is not None
        rc = f.poll()
        if rc is not None and not (rc == 0 and (self.work / "report.json").exists()):
            self.fail(f"the follower exited with {rc}:\n{tail(self.work / 'follower.err')}")
        problems = (self.work / "problems").read_text().splitlines()
        for line in problems[self.fol_problems : MAX_SHOWN]:
            print(f"shared chaos: the follower at {now - self.t0:.1f} s: {line}", flush=True)
        self.fol_problems = len(problems)
        data = b""
        with contextlib.suppress(OSError):
            data = (self.work / "progress").read_bytes()
        if len(data) == pc.PROGRESS.size:
            pos, self.fol_records, _ = pc.PROGRESS.unpack(data)
            if pos != self.fol_pos:
                self.fol_pos = pos
                self.fol_since = now
        behind = max((i.max_acked for i in self.incs), default=-1) >= self.fol_pos
        if not behind:
            self.fol_since = now
        elif now - self.fol_since > STUCK:
            self.fail(
                f"the follower is stuck at {self.fol_pos} for {now - self.fol_since:.1f} s "
                f"while records past it were acknowledged"
            )

    def sleep(self, secs: float) -> None:
        deadline = time.monotonic() + secs
        while True:
            self.check()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.1))

    # --- the run -----------------------------------------------------------------------------

    def run(self) -> None:
        print(
            f"shared chaos: {self.secs:g} s, RMQLOG_PROC_CHAOS_SEED={self.seed} "
            f"(slots {self.slots}, retention_bytes {self.retention}, end {self.end_mode})",
            flush=True,
        )
        t0 = self.t0 = time.monotonic()
        CommitLog([str(d) for d in self.dirs], **self.store).close()  # created exclusively
        (self.work / "problems").touch()
        fargs = {
            "dirs": [str(d) for d in self.dirs],
            "segment_size": SEGMENT,
            "idle": 120.0,
            **{k: str(self.work / k) for k in ("problems", "seen", "progress")},
            "report": str(self.work / "report.json"),
        }
        with open(self.work / "follower.err", "wb") as e:
            self.follower = subprocess.Popen(
                [sys.executable, CHILD, "follower", json.dumps(fargs)],
                stdin=subprocess.DEVNULL,
                stdout=e,
                stderr=e,
            )
        for slot in range(self.slots):
            self.spawn(slot)
        deadline = t0 + self.secs
        while time.monotonic() < deadline:
            self.sleep(self.rng.uniform(0.02, 0.5))
            self.act()
        self.stop()
        self.final()
        print(f"shared chaos: done in {time.monotonic() - t0:.1f} s", flush=True)

    def act(self) -> None:
        r = self.rng.random()
        live = [i for i in self.live.values() if i.retiring is None]
        if not live:
            return
        if r < 0.40:
            self.kill(self.rng.choice(live))
        elif r < 0.48:
            owner = proc_locks_owner(self.dirs)
            mine = [i for i in live if i.proc.pid == owner]
            # Without a known owner, the producer started first (the likely owner).
            self.kill(mine[0] if mine else min(live, key=lambda i: i.started))
            self.counts.owner_kills += 1
        elif r < 0.52:
            for i in live:
                self.kill(i)
            self.counts.all_kills += 1
        elif r < 0.57:
            i = self.rng.choice(live)
            i.stop.touch()
            i.retiring = time.monotonic()
            self.counts.retires += 1
            if self.rng.random() < 0.3:  # and killed while it closes
                time.sleep(self.rng.uniform(0.0, 0.05))
                if i.proc.poll() is None:
                    self.kill(i)
                    self.counts.killed_closing += 1

    def stop(self) -> None:
        self.stopping = True
        self.pending.clear()
        if self.end_mode == "kill":
            for i in list(self.live.values()):
                if i.proc.poll() is None:
                    self.kill(i)
            self.pending.clear()
            return
        self.stop_all.touch()
        for i in self.live.values():
            i.retiring = i.retiring or time.monotonic()
        while self.live:
            self.check()
            time.sleep(0.05)

    # --- the end -----------------------------------------------------------------------------

    def final(self) -> None:
        problems = Problems()
        with CommitLog(
            [str(d) for d in self.dirs], segment_size=SEGMENT, clean_interval_ms=0
        ) as log:
            end = log.max_offset
            stop_at = log.append(pc.STOP)
            report_path = self.work / "report.json"
            deadline = time.monotonic() + 60
            while not report_path.exists():
                if time.monotonic() > deadline:
                    self.fail(f"the follower did not reach the stop record at {stop_at} in 60 s")
                self.check_follower(time.monotonic())
                time.sleep(0.05)
            self.follower.wait(timeout=30)
            report = json.loads(report_path.read_text())
            for line in (self.work / "problems").read_text().splitlines():
                problems.add(*line.split("\t", 1))
            if report["stop_at"] != stop_at:
                problems.add(pc.BAD, f"the follower stopped at {report['stop_at']}, not {stop_at}")
            verified = log.verify()
            if verified:
                problems.add("verify() is not clean", f"{verified[:MAX_SHOWN]}")
            low = log.min_offset
            keep_from = self.check_head(low, end, report, problems)
            scan = self.check_scan(log, low, stop_at, problems)
            acks = self.check_acks(log, low, keep_from, report, problems)
            segments = len(log.segments())
        empties = {o for o, d in self.follower_seen() if d == EMPTY} | scan["empties"]
        unacked_empties = len(empties - acks["empties"])
        killed = sum(1 for i in self.incs if i.killed)
        if unacked_empties > killed:
            problems.add(
                "unacknowledged records",
                f"{unacked_empties} empty records nobody acknowledged, "
                f"more than the {killed} producers killed (each may leave one)",
            )
        last_op = {int(k): v for k, v in report["last_op"].items()}
        for inc, op in scan["last_op"].items():
            last_op[inc] = max(op, last_op.get(inc, -1))
        for i in self.incs:
            acked = acks["max_op"].get(i.inc, -1)
            seen = last_op.get(i.inc, -1)
            allowed = acked if i.closed else acked + 1  # the call a killed producer was in
            if seen > allowed:
                problems.add(
                    "unacknowledged records",
                    f"inc {i.inc} ({'closed' if i.closed else 'killed'}) has op {seen} in the "
                    f"log, but acknowledged ops only up to {acked}",
                )
        logs = "".join(tail(i.err, 1 << 30) for i in self.incs)
        c = self.counts
        print(
            f"shared chaos: seed {self.seed}: {c.incarnations} producer processes, {c.kills} "
            f"SIGKILLs ({c.owner_kills} of the owner, {c.all_kills} of all at once, "
            f"{c.killed_closing} while closing), {c.retires} closed, {c.owner_handovers} "
            f"owner handovers seen; calls {dict(sorted(c.kinds.items()))}, {c.flushes} flush(), "
            f"{c.records_acked} records acknowledged; the follower saw {report['records']} "
            f"records ({len(report['skips'])} skips over deleted segments); the store ends at "
            f"{end} with head {low}, {segments} segments, {scan['records']} records scanned, "
            f"{acks['read_back']} acknowledged read back, {acks['below_head']} below the head; "
            f"producers logged {logs.count('died holding the append lock')} repairs after a "
            f"holder died, {logs.count('before its cleaner died')} + "
            f"{logs.count('before a crash')} removals of files below the recorded head; "
            f"{scan['early_rolls'] + report['early_rolls']} early rolls",
            flush=True,
        )
        if problems:
            self.fail(f"problems at the end:\n{problems}")

    def check_head(self, low: int, end: int, report: dict, problems: Problems) -> int:
        """Whether the head is where retention may have put it, and the offset from which every
        record must still be there: 0 without retention; with it, the end less
        ``retention_bytes`` (the oldest segments go while the log without them stays at or above
        it, and the end only grows)."""
        if self.bad_head is not None:
            kind = (
                "the head moved with no retention configured"
                if self.retention is None
                else "retention deleted more than retention_bytes allows"
            )
            problems.add(kind, f"at {self.bad_head[0]:.1f} s into the run: {self.bad_head[1]}")
        if self.retention is None:
            if report["skips"]:
                problems.add(
                    "the head moved with no retention configured",
                    f"the follower found records deleted: skipped {report['skips'][:5]}",
                )
            if low != 0:
                problems.add(
                    "the head moved with no retention configured",
                    f"min_offset is {low} at the end: every record below it was deleted",
                )
            return 0
        if low > 0 and end - low < self.retention:
            problems.add(
                "retention deleted more than retention_bytes allows",
                f"head {low}, end {end}: the log keeps {end - low} bytes, less than "
                f"retention_bytes {self.retention}",
            )
        return max(0, end - self.retention)

    def follower_seen(self):
        with open(self.work / "seen", "rb") as f:
            while chunk := f.read(pc.SEEN.size * 65536):
                yield from pc.SEEN.iter_unpack(chunk)

    def check_scan(self, log: CommitLog, low: int, stop_at: int, problems: Problems) -> dict:
        """The store's records above its head: valid, and exactly those the follower saw."""
        v = pc.Validator(SEGMENT, low)
        seen = (s for s in self.follower_seen() if s[0] >= low)
        empties = set()
        for off, view in log.scan():
            body = bytes(view)
            if off == stop_at:
                v.feed_stop(off, len(body))
                continue
            v.feed(off, body)
            d = pc.digest(body)
            if d == EMPTY:
                empties.add(off)
            s = next(seen, None)
            if s != (off, d):
                problems.add(
                    "the store differs from what the follower saw",
                    f"at {off} the store holds {d.hex()}, the follower saw {s}",
                )
        rest = [next(seen, None) for _ in range(3)]
        if rest[0] is not None:
            problems.add(
                "the store differs from what the follower saw",
                f"the follower saw records past the store's end: {rest}",
            )
        if v.stopped_at != stop_at:
            problems.add("bad records in the store", f"no stop record at {stop_at} at the end")
        for p in v.problems:
            problems.add("bad records in the store", p)
        return {
            "records": v.records,
            "empties": empties,
            "last_op": v.last_op,
            "early_rolls": v.early_rolls,
        }

    def acked(self, i: Incarnation):
        """``(offset, inc, op, idx, n, digest)`` of each record ``i`` acknowledged, in order."""
        with open(i.acks, "rb") as f:
            for line in f:
                if not line.endswith(b"\n"):
                    break  # cut by its SIGKILL: not acknowledged
                if line == b"C\n":
                    i.closed = True
                elif line.startswith(b"F "):
                    self.counts.flushes += 1
                elif line[:1].isdigit():
                    off, op, idx, n, d, kind = line.split()
                    if idx == b"0":
                        k = kind.decode()
                        self.counts.kinds[k] = self.counts.kinds.get(k, 0) + 1
                    yield int(off), i.inc, int(op), int(idx), int(n), bytes.fromhex(d.decode())

    def check_acks(
        self, log: CommitLog, low: int, keep_from: int, report: dict, problems: Problems
    ) -> dict:
        """Every acknowledged record reads back at its offset with its body (above the head; one
        below the head and at or above ``keep_from`` is lost), and the follower saw it (unless
        retention deleted it before the follower got there)."""
        skips = report["skips"]
        seen = self.follower_seen()
        s = next(seen, None)
        max_op: dict[int, int] = {}
        empties = set()
        read_back = below = 0
        slot = {i.inc: i.slot for i in self.incs}
        previous = None
        for off, inc, op, idx, n, d in heapq.merge(*(self.acked(i) for i in self.incs)):
            self.counts.records_acked += 1
            if off == previous:
                problems.add("two records at one offset", f"at {off} (the second of inc {inc})")
            previous = off
            max_op[inc] = max(op, max_op.get(inc, -1))
            if d == EMPTY:
                empties.add(off)
            where = f"at {off} (inc {inc} op {op} record {idx} of {n})"
            while s is not None and s[0] < off:
                s = next(seen, None)
            if s is not None and s[0] == off:
                if s[1] != d:
                    problems.add(
                        "the follower saw another body than the one acknowledged",
                        f"{where}: the follower saw digest {s[1].hex()}, not {d.hex()}",
                    )
            elif not any(a <= off < b for a, b in skips):
                problems.add(
                    "acknowledged records the follower never saw (nor skipped as deleted)", where
                )
            if off < low:
                below += 1
                if off >= keep_from:
                    problems.add(
                        "LOST acknowledged records (deleted, and retention did not allow it)",
                        where,
                    )
                continue
            try:
                body = bytes(log.read(off))
            except Exception as e:
                problems.add("LOST acknowledged records (reading them raised)", f"{where}: {e!r}")
                continue
            read_back += 1
            if pc.digest(body) != d:
                problems.add(
                    "acknowledged records read back with another body",
                    f"{where}: {len(body)} bytes, {pc.parse(body)}",
                )
            elif op >= 0 and pc.parse(body) != (slot[inc], inc, op, idx, n):
                problems.add(
                    "acknowledged records read back with another body",
                    f"{where}: reads back as {pc.parse(body)}",
                )
        return {"max_op": max_op, "empties": empties, "read_back": read_back, "below_head": below}


def test_header_len_agrees():
    assert pc.HEADER == HEADER_LEN


def test_validator_catches_what_it_is_for():
    """The checks the chaos test relies on fail where they should."""
    b = [pc.make_body(0, 1, op, idx, 2, b"x" * 10) for op, idx in ((0, 0), (0, 1), (1, 0))]
    good = pc.Validator(SEGMENT, 0)
    off = 0
    for body in b:
        good.feed(off, body)
        off += HEADER_LEN + len(body)
    assert good.problems == []
    cut = pc.Validator(SEGMENT, 0)
    cut.feed(0, b[0])
    cut.feed(HEADER_LEN + len(b[0]), b[2])  # the batch's second record is missing
    assert any("cut" in p for p in cut.problems)
    hole = pc.Validator(SEGMENT, 0)
    hole.feed(0, b[0])
    hole.feed(HEADER_LEN + len(b[0]) + 8, b[1])  # a gap between records
    assert any("not dense" in p for p in hole.problems)
    bad = pc.Validator(SEGMENT, 0)
    bad.feed(0, b[0][:-1] + b"y")
    assert any("checksum" in p for p in bad.problems)
    skipped = pc.Validator(SEGMENT, 0)
    skipped.feed(0, pc.make_body(0, 2, 0, 0, 1, b""))
    skipped.feed(HEADER_LEN + pc.MIN_BODY, pc.make_body(0, 2, 2, 0, 1, b""))  # op 1 missing
    assert any("not consecutive" in p for p in skipped.problems)


def test_shared_writer_processes_killed_at_random_with_a_follower(tmp_path):
    seed = int(os.environ.get("RMQLOG_PROC_CHAOS_SEED", str(time.time_ns() % (1 << 32))))
    chaos = Chaos(tmp_path, seed, SECS)
    try:
        chaos.run()
    finally:
        chaos.kill_everything()
