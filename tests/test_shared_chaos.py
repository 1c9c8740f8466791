"""A randomized chaos test of shared writers (``exclusive=False``) with real producer processes
SIGKILLed at random and a follower process waiting for their records
(docs/producers-consumers.md).

Three or four producer processes append at random (single records, batches of 1 to 200, empty and
large bodies, every flush mode, ``flush()`` now and then) to a store of 1 MiB segments in three
directories (the third on a tmpfs of its own where this process may mount one, so that
``rebalance()`` has used ratios to even out), with or without retention deleting its head
meanwhile; each acknowledges every record once its call returned (tests/_proc_chaos.py). Every
producer, the one doing the store's background work or not, also makes maintenance calls now and
then: ``clean()``, ``truncate_before()`` (to a target it chose, up to half the log, in the runs
whose seed turns truncation on; else to 0, deleting nothing), ``move_segment()`` (of a sealed
segment, or of the active one, which is refused) and ``rebalance()``. The parent SIGKILLs
producers at random (one, the one doing the store's background work, one in the middle of a
maintenance call, or all at once), lets one close now and then, and starts a new incarnation in
each one's place. A follower process follows the store from offset 0 with
``scan(follow=True)``, validating every record as it comes. At the end every producer stops
(closing, or killed: the seed picks), the parent opens the store exclusively, appends a stop
record the follower ends at, and checks:

- the follower saw no invalid record and no error, and exactly the records of the store above
  its head;
- nothing was deleted that retention and the truncations did not allow: the head stays at or
  below the furthest target a producer gave ``truncate_before`` (whether its call returned or a
  SIGKILL cut it short), or, with ``retention_bytes``, where the log keeps at least that much;
  without either it stays at 0 (the segment files are watched during the run too);
- every acknowledged record reads back with its body at its offset, after every move and
  rebalance (below the head, where retention or a truncation allowed its deletion: the follower
  saw it, or it was deleted before the follower got there);
- nothing that was never acknowledged appears, but the one call each killed producer may have
  been in; batches are whole and contiguous; ``verify()`` is clean; each segment has one file,
  in the directory the store says (a move a SIGKILL cut short leaves one copy);
- maintenance calls raised nothing but what they may (a move of a segment deleted meanwhile, of
  the active segment: the producer checks, and dies of anything else), and, in a run of at least
  the CI length, processes that were not doing the background work made calls of every kind;
- no producer, no follower and no handover of the background work stalled for 10 s (these fail
  at once; the rest is reported at the end, every kind of problem with its count).

``RMQLOG_PROC_CHAOS_SECS`` (default 15) sets the length, ``RMQLOG_PROC_CHAOS_SEED`` replays a run's
choices (the seed is printed; kill timing, and when a maintenance call falls among a producer's
appends, depend on the machine, so a replay is not exact). A failed run leaves its files where it
says: each producer's acknowledgements (``work/acks.N``, maintenance calls timed) and log
(``work/stderr.N``), the follower's, and ``work/events``, the parent's spawns and SIGKILLs, timed
like the logs.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import _mounts
import _proc_chaos as pc

from rmqlog import HEADER_LEN, CommitLog

SECS = float(os.environ.get("RMQLOG_PROC_CHAOS_SECS", "15"))
STUCK = 10.0  # seconds without progress that count as a stall
SEGMENT = 1 << 20
TMPFS = 256 << 20  # the third directory's filesystem, where one may be mounted
COVERAGE_SECS = 15.0  # runs at least this long must show every kind of maintenance call made by
# a process other than the one doing the background work (measured: 10 to 35 of each per 15 s run)
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
    maint: str | None = None  # the maintenance call it is in (acknowledged ``M``, not yet done)


@dataclass
class Maint:
    """The maintenance calls of one kind (tests/_proc_chaos.py ``maintain``)."""

    calls: int = 0  # asked (``M`` lines)
    returned: int = 0
    by_other: int = 0  # returned or raised in a process not doing the background work
    raised: dict[str, int] = field(default_factory=dict)  # "Error (why)" -> count
    killed_in: int = 0  # the producer was SIGKILLed in the call
    effect: int = 0  # segments deleted (clean), moved (move, rebalance), heads moved (truncate)

    def __str__(self) -> str:
        raised = f", raised {dict(sorted(self.raised.items()))}" if self.raised else ""
        return (
            f"{self.calls} ({self.returned} returned, {self.by_other} by non-owners"
            f"{raised}, {self.killed_in} killed in, effect {self.effect})"
        )


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
    maint: dict[str, Maint] = field(default_factory=lambda: {k: Maint() for k in pc.MAINT_KINDS})
    maint_kills: int = 0  # SIGKILLs aimed at a producer in a maintenance call


def proc_locks_owner(dirs: list[Path]) -> int | None:
    """The pid holding the exclusive flock on ``rmqlog.owner`` (the background work), if any."""
    return pc.owner_pid(dirs)


def segment_files(dirs: list[Path]) -> tuple[dict[int, list[Path]], list[Path]]:
    """The segment files in ``dirs``: start -> the directories holding one; and the copies of
    segments being moved (``NAME.tmp``; not the metadata's temporary files)."""
    files: dict[int, list[Path]] = {}
    temps = []
    for d in dirs:
        with contextlib.suppress(OSError):
            for n in os.listdir(d):
                if len(n) == 20 and n.isdigit():
                    files.setdefault(int(n), []).append(d)
                elif len(n) == 24 and n.endswith(".tmp") and n[:20].isdigit():
                    temps.append(d / n)
    return files, temps


def describe_process(pid: int) -> str:
    """What a stalled process is doing: its state and where each thread waits."""
    out = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        # A thread that ends meanwhile: its files go (OSError) or read empty (IndexError).
        with contextlib.suppress(OSError, IndexError):
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
        self.dirs = [root / "d0", root / "d1", root / "d2"]
        self.tmpfs = False  # d2 is a tmpfs of its own (mount)
        self.mounts = _mounts.Mounts(root)
        self.work = root / "work"
        self.work.mkdir()
        self.slots = self.rng.choice([3, 4])
        self.retention = self.rng.choice([None, 24 << 20, 64 << 20])
        self.end_mode = self.rng.choice(["close", "kill"])
        self.truncate = self.rng.random() < 0.5  # truncate_before deletes (else it is given 0)
        self.maint_every = self.rng.choice([0.05, 0.1, 0.15])  # s between a producer's calls
        self.truncated_to = 0  # the furthest target of a truncate_before asked so far
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
            "truncate": self.truncate,
            "maint_every": self.maint_every,
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
        self.event(f"spawned inc {inc} (slot {slot}, pid {proc.pid}, {flush})")

    def event(self, what: str) -> None:
        """A line of ``work/events``, timed like the producers' logs (``time.time()``)."""
        with open(self.work / "events", "a") as f:
            f.write(f"{time.time():.3f} {what}\n")

    def kill(self, i: Incarnation) -> None:
        i.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(i.proc.pid, signal.SIGKILL)
        i.proc.wait()
        self.counts.kills += 1
        self.read_acks(i, time.monotonic())  # all of it: the maintenance call it was in
        if i.maint is not None:
            self.counts.maint[i.maint].killed_in += 1
        owner = " (the owner)" if i.proc.pid == self.owner else ""
        self.event(f"SIGKILLed inc {i.inc}{owner}" + (f" in {i.maint}" if i.maint else ""))
        del self.live[i.slot]
        delay = 0.0 if self.rng.random() < 0.8 else self.rng.uniform(0.0, 0.5)
        self.pending[i.slot] = time.monotonic() + delay

    def mount(self) -> None:
        """A tmpfs of its own for the third directory, where this process may mount one: with
        every directory on one filesystem, ``rebalance()`` has no used ratios to even out."""
        if _mounts.mount_unavailable() is None:
            self.mounts.tmpfs(self.dirs[2].name, TMPFS)
            self.tmpfs = True

    def unmount(self, save: bool) -> None:
        """Unmounts the tmpfs; first copies its files next to it (``d2.saved``) if ``save``."""
        if not self.tmpfs:
            return
        if save:
            with contextlib.suppress(OSError):
                shutil.copytree(self.dirs[2], self.root / "d2.saved")
        self.mounts.close()
        self.tmpfs = False

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
            f"({self.config()}); files in {self.root}"
            + (" (the tmpfs d2 copied to d2.saved)" if self.tmpfs else ""),
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
        for m in pc.MAINT_LINE.finditer(chunk, 0, end):
            self.maintenance_line(i, m.group().decode().split(" "))

    def maintenance_line(self, i: Incarnation, parts: list[str]) -> None:
        """Counts one ``M``, ``m`` or ``x`` line of ``i`` (tests/_proc_chaos.py ``maintain``)."""
        what, kind = parts[0], parts[1]
        c = self.counts.maint[kind]
        if what == "M":
            i.maint = kind
            c.calls += 1
            if kind == "truncate":
                self.truncated_to = max(self.truncated_to, int(parts[2]))
            return
        i.maint = None
        if parts[2] == "n":
            c.by_other += 1
        if what == "x":
            why = f"{parts[3]} ({parts[4]})"
            c.raised[why] = c.raised.get(why, 0) + 1
            return
        c.returned += 1
        if kind in ("clean", "rebalance"):
            c.effect += int(parts[3])
        elif kind == "move":
            c.effect += 1
        elif int(parts[3]) > 0:
            c.effect += 1  # a truncation that returned a head above 0

    def check(self) -> None:
        """Everything that must hold at every moment: no child died of itself, none stalled."""
        now = time.monotonic()
        for slot, i in list(self.live.items()):
            self.read_acks(i, now)
            rc = i.proc.poll()
            if rc is not None:
                self.read_acks(i, now)  # what it wrote before it exited
                if i.retiring is not None and rc == 0:
                    del self.live[slot]
                    self.pending[slot] = now
                    continue
                self.fail(f"producer inc {i.inc} exited with {rc}:\n{tail(i.err)}")
            if not i.opened and now - i.started > STUCK:
                self.fail(f"producer inc {i.inc} did not open the store in {STUCK} s")
            if now - i.last_progress > STUCK:
                what = "close" if i.retiring is not None else "append"
                if i.maint is not None:
                    what = f"{i.maint} (maintenance call)"
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
        """The segment files: without retention none is ever deleted but by a truncation (the
        first file starts at or below the furthest target asked); with it, once any was, the
        files span at least ``retention_bytes`` (the log keeps that much; 2 segments of slack
        for a listing of the directories one after the other), or start at or below that target.

        A segment moving from a directory listed later to one listed earlier can be missed by a
        listing, and a truncation's ``M`` line may have been written after the acknowledgement
        files were read: a file that seems gone is looked for again, after reading them again,
        three times 20 ms apart, before it counts."""
        if self.bad_head is not None:
            return
        for attempt in range(4):
            if attempt:
                time.sleep(0.02)
            starts = list(segment_files(self.dirs)[0])
            for i in self.live.values():
                self.read_acks(i, time.monotonic())  # the truncations asked before the listing
            if not starts or min(starts) <= self.truncated_to:
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
        why += f", and no truncation asked for more than {self.truncated_to}"
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

    def config(self) -> str:
        return (
            f"slots {self.slots}, retention_bytes {self.retention}, end {self.end_mode}, "
            f"truncation {'on' if self.truncate else 'off'}, maintenance every "
            f"{self.maint_every:g} s, d2 {'a tmpfs' if self.tmpfs else 'on the same filesystem'}"
        )

    def run(self) -> None:
        self.mount()
        print(
            f"shared chaos: {self.secs:g} s, RMQLOG_PROC_CHAOS_SEED={self.seed} ({self.config()})",
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
            self.event("SIGKILLing every producer")
            for i in live:
                self.kill(i)
            self.counts.all_kills += 1
        elif r < 0.57:
            i = self.rng.choice(live)
            i.stop.touch()
            i.retiring = time.monotonic()
            self.counts.retires += 1
            self.event(f"asked inc {i.inc} to close")
            if self.rng.random() < 0.3:  # and killed while it closes
                time.sleep(self.rng.uniform(0.0, 0.05))
                if i.proc.poll() is None:
                    self.kill(i)
                    self.counts.killed_closing += 1
        elif r < 0.63:
            self.kill_in_maintenance()

    def kill_in_maintenance(self) -> None:
        """SIGKILLs the first producer found in a maintenance call (its ``M`` line written, its
        ``m`` or ``x`` not yet), looking every 2 ms for up to 0.5 s."""
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            for i in list(self.live.values()):
                if i.retiring is None and i.proc.poll() is None:
                    self.read_acks(i, time.monotonic())
                    if i.maint is not None:
                        self.kill(i)
                        self.counts.maint_kills += 1
                        return
            time.sleep(0.002)

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
        for i in self.incs:
            self.read_acks(i, time.monotonic())  # every maintenance line
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
            self.check_segment_files(log, problems)
        self.check_maintenance(problems)
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
        m = c.maint
        print(
            f"shared chaos: maintenance calls (truncation {'on' if self.truncate else 'off'}, "
            f"to {self.truncated_to} at most; d2 "
            f"{'a tmpfs' if self.tmpfs else 'on the same filesystem: rebalance moves nothing'}): "
            + "; ".join(f"{k} {m[k]}" for k in pc.MAINT_KINDS)
            + f"; {c.maint_kills} SIGKILLs aimed at one",
            flush=True,
        )
        if problems:
            self.fail(f"problems at the end:\n{problems}")

    def check_head(self, low: int, end: int, report: dict, problems: Problems) -> int:
        """Whether the head is where retention and the truncations may have put it, and the
        offset from which every record must still be there: the furthest target a producer gave
        ``truncate_before`` (0 if none, or without truncation), or with retention, the end less
        ``retention_bytes`` if that is further (the oldest segments go while the log without them
        stays at or above it, and the end only grows)."""
        t = self.truncated_to
        keep_from = max(t, 0 if self.retention is None else end - self.retention, 0)
        if self.retention is None:
            kind = "the head moved with no retention configured" + (
                f" past the furthest truncation ({t})" if t else " (nor truncation)"
            )
        else:
            kind = "retention deleted more than retention_bytes allows" + (
                f" (and past the furthest truncation, {t})" if t else ""
            )
        if self.bad_head is not None:
            problems.add(kind, f"at {self.bad_head[0]:.1f} s into the run: {self.bad_head[1]}")
        for a, b in report["skips"]:
            if b > keep_from:
                problems.add(
                    kind,
                    f"the follower found records deleted: skipped [{a}, {b}), past {keep_from}",
                )
        if low > keep_from:
            if self.retention is None:
                problems.add(
                    kind, f"min_offset is {low} at the end: every record below it was deleted"
                )
            else:
                problems.add(
                    kind,
                    f"head {low}, end {end}: the log keeps {end - low} bytes, less than "
                    f"retention_bytes {self.retention}",
                )
        return keep_from

    def check_segment_files(self, log: CommitLog, problems: Problems) -> None:
        """After the exclusive open: each segment of the store has one file, in the directory
        the store says, and no other segment file or copy (``*.tmp``) is left, whatever moves
        and deletions the SIGKILLs cut short."""
        files, temps = segment_files(self.dirs)
        listed = {s.start_offset: os.path.normpath(os.path.dirname(s.path)) for s in log.segments()}
        for start, where in sorted(files.items()):
            if len(where) > 1:
                problems.add(
                    "a segment has files in several directories",
                    f"{start}: in {[str(d) for d in where]}",
                )
            elif start not in listed:
                problems.add("segment files the store does not list", f"{start} in {where[0]}")
            elif os.path.normpath(where[0]) != listed[start]:
                problems.add(
                    "a segment's file is not where the store says",
                    f"{start}: in {where[0]}, the store says {listed[start]}",
                )
        for start in sorted(set(listed) - set(files)):
            problems.add("segments without a file", f"{start} (the store says {listed[start]})")
        for t in temps:
            problems.add("copies left by moves (*.tmp) after the exclusive open", str(t))

    def check_maintenance(self, problems: Problems) -> None:
        """In a run of at least the CI length, a process not doing the background work made
        (and finished) at least one maintenance call of each kind."""
        if self.secs < COVERAGE_SECS:
            return
        for kind, m in self.counts.maint.items():
            if m.by_other == 0:
                problems.add(
                    "maintenance calls of a kind never made by a non-owner process",
                    f"{kind}: {m}",
                )

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
    failed = True
    try:
        chaos.run()
        failed = False
    finally:
        chaos.kill_everything()
        chaos.unmount(save=failed)
