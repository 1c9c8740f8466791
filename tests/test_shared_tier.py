"""Shared writers (``exclusive=False``) with a remote tier and with a custom placement function,
in real processes (docs/producers-consumers.md, docs/tiering.md, docs/placement.md).

Only the open doing the store's background work (the flock on ``rmqlog.owner``) ships sealed
segments, deletes the local copies of uploaded ones and trims the tier; the other opens read the
remote-only segments from the tier. Here:

- three producer processes on a tiered store of 64 KiB segments: the one doing the background
  work is SIGKILLed twice (a replacement joins after the first kill; the second kill aims at an
  upload not yet in the manifest); uploads go on in exactly the process that took over; every
  acknowledged record reads back in the survivors (by read and scan, remote-only segments
  included), in a read-only follower, and, after one survivor closed and the last one was
  killed, in an exclusive reopen with the tier; nothing unacknowledged appears but the calls the
  killed ones were in; a URL-only open shows a dense prefix; ``verify(remote=True)`` is clean;
- a joiner whose tier options differ from the writers' (another URL, another local retention
  or ``tier_after``) is refused, naming the difference, and changes nothing; a joiner that gives
  no tier takes the store's (docs/options.md);
- two processes, each with its own placement function, put each segment they roll where their
  function said; a joiner with a named strategy is refused, and the other way round;
- a process that is not doing the background work reads a record of a segment whose local copy
  the owner process deleted (remote only in its ``segments()`` first); when the owner closes,
  another open ships on;
- the ``tier_status()`` of an open not doing the background work says where the segments are
  now, not where they were when it appended them.

Run as ``python tests/test_shared_tier.py ARGS_JSON``, this file is the producer child: it appends
in a thread, acknowledging each record (``index offset size``, body ``_writer.body(index, size)``)
in its acks file once ``append`` returned, and answers JSON commands on stdin, one JSON line each.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from _proc_chaos import owner_pid
from _tier import (
    exists,
    listed,
    manifest,
    object_name,
    objects,
    tier_kwargs,
    uploaded,
    wait_for,
)
from _writer import body

SEGMENT = 64 * 1024
LOCAL = 2 * SEGMENT  # local_retention_bytes: the active segment and about one sealed one
MAX_SIZE = 2048  # record bodies are 8 to MAX_SIZE bytes
REPLY_TIMEOUT = 60.0  # seconds a child has to answer a command
HERE = Path(__file__)


# ---------------------------------------------------------------------------------------------
# The child.


def _strategy(target: str, calls: str):
    """A placement function: the eligible directory named ``target``, each call logged as
    ``start target pid`` in ``calls``."""
    fd = os.open(calls, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def place(dirs, start: int) -> int:
        index = next(i for i, d in enumerate(dirs) if os.path.basename(d.path) == target)
        os.write(fd, f"{start} {target} {os.getpid()}\n".encode())
        return index

    return place


def _segments(log) -> list[dict[str, Any]]:
    return [
        {
            "start": s.start_offset,
            "end": s.start_offset + s.size,
            "local": s.local,
            "remote": s.remote,
            "sealed": s.sealed,
            "path": s.path,
        }
        for s in log.segments()
    ]


def _check(log, ack_files: list[str]) -> dict[str, Any]:
    """Reads back every record the ack files list; counts those in segments that were remote
    only in this open's view just before."""
    segs = [s for s in _segments(log) if not s["local"]]
    checked = remote_only = 0
    bad: list[str] = []
    for path in ack_files:
        for i, off, size in read_acks(Path(path)):
            try:
                got = bytes(log.read(off))
            except Exception as e:
                got = f"{type(e).__name__}: {e}".encode()
            if got != body(i, size):
                if len(bad) < 10:
                    bad.append(f"record {i} at {off}: {got[:80]!r}")
                continue
            checked += 1
            remote_only += any(s["start"] <= off < s["end"] for s in segs)
    # A scan from the head (whole remote objects downloaded) finds them too.
    acked = {off: (i, size) for path in ack_files for i, off, size in read_acks(Path(path))}
    scanned = 0
    for off, b in log.scan():
        if off in acked:
            i, size = acked.pop(off)
            if bytes(b) != body(i, size) and len(bad) < 10:
                bad.append(f"scan: record {i} at {off}: {bytes(b)[:80]!r}")
            scanned += 1
    if acked and len(bad) < 10:
        bad.append(f"scan: {len(acked)} acknowledged records not found, from {min(acked)}")
    return {"checked": checked, "remote_only": remote_only, "scanned": scanned, "bad": bad}


def child(args: dict[str, Any]) -> None:
    from rmqlog import CommitLog

    kwargs = dict(args["log"])
    if "strategy" in args:
        kwargs["strategy"] = _strategy(*args["strategy"])
    log = CommitLog(args["dirs"], exclusive=False, **kwargs)
    acks = os.open(args["acks"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    rng = random.Random(args["slot"])
    stop = threading.Event()
    errors: list[str] = []

    def appender() -> None:
        i = args["slot"] * 1_000_000
        try:
            while not stop.is_set():
                size = rng.randint(8, MAX_SIZE)
                off = log.append(body(i, size))
                os.write(acks, f"{i} {off} {size}\n".encode())  # one write: a line or nothing
                i += 1
                time.sleep(args["pace"])
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}")

    thread = threading.Thread(target=appender, daemon=True)
    if not args.get("paused"):  # paused: appends nothing
        thread.start()

    def reply(x: Any) -> None:
        sys.stdout.write(json.dumps(x) + "\n")
        sys.stdout.flush()

    reply({"pid": os.getpid()})
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "status":
            reply({"tier": log.tier_status(), "errors": errors})
        elif op == "segments":
            reply(_segments(log))
        elif op == "check":
            reply(_check(log, cmd["acks"]))
        elif op == "verify":
            reply([list(r) for r in log.verify(remote=True)])
        elif op == "close":
            stop.set()
            if thread.is_alive():
                thread.join()
            log.close()
            reply({"errors": errors})
            return


# ---------------------------------------------------------------------------------------------
# The parent's side.


def read_acks(path: Path) -> list[tuple[int, int, int]]:
    """``(index, offset, size)`` of each complete line (a SIGKILL may cut the last one)."""
    if not path.exists():
        return []
    text = path.read_text()
    return [tuple(map(int, x.split())) for x in text.splitlines(keepends=True) if x.endswith("\n")]


class Producer:
    """A child of this file; ``call`` sends a command and returns its answer."""

    def __init__(self, tmp: Path, dirs: list[str], slot: int, log: dict, **extra: Any) -> None:
        self.slot = slot
        self.acks = tmp / f"acks-{slot}"
        self.err = tmp / f"stderr-{slot}"
        args = {"dirs": dirs, "slot": slot, "acks": str(self.acks), "log": log, "pace": 0.01}
        args.update(extra)
        # TMPDIR: the tier cache directory a killed child leaves behind goes into tmp.
        env = {**os.environ, "TMPDIR": str(tmp)}
        with open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(HERE), json.dumps(args)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=env,
            )
        self.replies: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.pid = self._reply()["pid"]
        assert self.pid == self.proc.pid
        self.killed = False

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.replies.put(line)
        self.replies.put(None)

    def _reply(self) -> Any:
        try:
            line = self.replies.get(timeout=REPLY_TIMEOUT)
        except queue.Empty:
            line = "(no answer in time)"
        if not line or not line.startswith(("{", "[")):
            raise AssertionError(f"producer {self.slot}: {line!r}; stderr: {self.stderr()}")
        return json.loads(line)

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")[-3000:]

    def call(self, op: str, **kw: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def status(self) -> dict:
        got = self.call("status")
        assert not got["errors"], f"producer {self.slot}: {got['errors']}"
        return got["tier"]

    def acked(self) -> list[tuple[int, int, int]]:
        return read_acks(self.acks)

    def wait_acks(self, n: int, timeout: float = 30.0) -> None:
        wait_for(
            lambda: len(self.acked()) >= n or self.proc.poll() is not None,
            f"producer {self.slot} acknowledges {n} records",
            timeout,
        )
        assert self.proc.poll() is None, f"producer {self.slot} exited: {self.stderr()}"

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(timeout=30) == -signal.SIGKILL
        self.killed = True

    def close(self) -> None:
        got = self.call("close")
        assert not got["errors"], f"producer {self.slot}: {got['errors']}"
        assert self.proc.wait(timeout=30) == 0, self.stderr()

    def reap(self) -> None:
        """At teardown: SIGKILL if still running."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        if self.proc.stdin:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()


@contextlib.contextmanager
def producers() -> Any:
    """A list to put Producers in; each one still running at the end is killed."""
    started: list[Producer] = []
    try:
        yield started
    finally:
        for p in started:
            p.reap()


def store_dirs(tmp: Path, n: int = 2) -> list[str]:
    return [str(tmp / f"d{i}") for i in range(n)]


def tier_log(tier, **kw: Any) -> dict[str, Any]:
    """The options every shared writer of a tiered store gives."""
    return {
        "segment_size": SEGMENT,
        "flush_interval_ms": 50,
        "local_retention_bytes": LOCAL,
        **tier_kwargs(tier),
        **kw,
    }


def owner(dirs: list[str], among: list[Producer], timeout: float = 10.0) -> Producer:
    """The producer doing the background work (waits for one of ``among`` to hold it)."""
    by_pid = {p.pid: p for p in among}
    return wait_for(
        lambda: by_pid.get(owner_pid(dirs) or -1),
        f"one of {sorted(by_pid)} holds rmqlog.owner (holder: {owner_pid(dirs)})",
        timeout,
    )


def current(tier) -> dict | None:
    """The tier's current manifest (None before the first), read again if the version the
    pointer named was pruned between the two reads."""
    for attempt in range(5):
        if "manifest/CURRENT" not in tier.keys():
            return None
        try:
            return manifest(tier)
        except Exception:
            if attempt == 4:
                raise
    return None


def version(tier) -> int:
    m = current(tier)
    return m["version"] if m else 0


def check_store(
    dirs: list[str], tier, acked: list[tuple[int, int, int]], killed: dict
) -> tuple[list, int]:
    """An exclusive reopen with the tier once every producer stopped: every acknowledged record
    at its offset with its body; nothing twice; nothing unacknowledged but the call a killed
    producer was in (``killed``: slot -> its last acknowledged index); everything sealed is
    uploaded and listed, no other object; ``verify(remote=True)`` clean. Returns the log's
    ``(offset, body)`` in order, and where its last (active) segment starts."""
    from rmqlog import CommitLog

    with CommitLog(dirs, **tier_log(tier)) as log:
        uploaded(log, timeout=60)
        for i, off, size in acked:
            assert bytes(log.read(off)) == body(i, size), f"record {i} at {off}"
        records = [(off, bytes(b)) for off, b in log.scan()]
        indexes = []
        for off, b in records:
            i = int.from_bytes(b[:8], "little")
            assert b == body(i, len(b)), f"a record at {off} that no producer wrote: {b[:40]!r}"
            indexes.append(i)
        assert len(indexes) == len(set(indexes)), "a record is in the log twice"
        extra = set(indexes) - {i for i, _, _ in acked}
        in_flight = {last + 1 for last in killed.values()}
        assert extra <= in_flight, f"records never acknowledged: {sorted(extra - in_flight)}"
        assert log.verify(remote=True) == []
        sealed = [s.start_offset for s in log.segments() if s.sealed]
        assert listed(tier) == sealed
        assert objects(tier) == [object_name(s) for s in sealed]
        assert any(not s.local for s in log.segments()), "nothing is remote only"
        active = log.segments()[-1].start_offset
    return records, active


def check_url_open(tier, acked: list[tuple[int, int, int]], records: list | None = None) -> int:
    """``CommitLog(tier_url, read_only=True)``: a dense prefix of the log, from 0. Each record is
    one a producer wrote; every acknowledged record below its end is there at its offset; with
    ``records`` (the whole log, after the run), it is exactly their prefix. Returns its end."""
    from rmqlog import CommitLog

    with CommitLog(tier.url, read_only=True, tier_options=tier.options or None) as remote:
        end = remote.max_offset
        assert remote.min_offset == 0 and end > 0
        got = []
        next_offset = 0
        for off, b in remote.scan():
            b = bytes(b)
            assert off == next_offset, f"the URL open skips from {next_offset} to {off}"
            i = int.from_bytes(b[:8], "little")
            assert b == body(i, len(b)), f"a record at {off} that no producer wrote: {b[:40]!r}"
            got.append((off, b))
            next_offset = remote.read_record(off).next_offset
        assert next_offset == end or not got
        mine = dict(got)
        for i, off, size in acked:
            if off < end:
                assert mine.get(off) == body(i, size), f"record {i} at {off} in the URL open"
        if records is not None:
            assert got == [r for r in records if r[0] < end]
        assert remote.verify() == []
    return end


# ---------------------------------------------------------------------------------------------
# 1. Three producers; the one doing the background work SIGKILLed, twice.


def unlisted(tier) -> set[str]:
    """Objects the current manifest does not list: an upload not finished (yet)."""
    found = set(objects(tier))
    m = current(tier)
    return found - {object_name(e["start"]) for e in (m["segments"] if m else [])}


def kill_the_owner(
    dirs: list[str], tier, procs: list[Producer], killed: dict, mid_upload: bool = False
) -> tuple[Producer, bool]:
    """SIGKILLs the producer doing the background work (``mid_upload``: as soon as an object
    the manifest does not list appears, within a few seconds); another takes it over at once,
    and uploads go on in it, and only in it: objects keep appearing, the manifest's version
    keeps growing. Returns the one that took over, and whether the victim died between an
    object's upload and the manifest listing it."""
    alive = [p for p in procs if not p.killed]
    victim = owner(dirs, alive)
    before = version(tier)
    before_objects = len(objects(tier))
    if mid_upload:
        # Segments are uploaded in order: the next object is the one after the last listed.
        m = current(tier)
        starts = [e["start"] for e in m["segments"]] if m else []
        name = object_name(starts[-1] + SEGMENT if starts else 0)
        deadline = time.monotonic() + 5
        while not exists(tier, name) and time.monotonic() < deadline:
            pass  # no pause: the window is a few milliseconds
    victim.kill()
    caught = bool(unlisted(tier))
    killed[victim.slot] = max(i for i, _, _ in victim.acked())
    survivors = [p for p in alive if p is not victim]
    t = time.monotonic()
    heir = owner(dirs, survivors)
    took = time.monotonic() - t
    assert took < 5, f"the background work was taken over after {took:.1f} s"
    status = wait_for(
        lambda: (st := heir.status())["uploads"] >= 3 and st["local_deleted"] >= 2 and st,
        f"producer {heir.slot}, which took over from {victim.slot}, uploads",
    )
    assert status["last_error"] is None, status
    wait_for(lambda: version(tier) >= before + 3, "the manifest's version grows")
    wait_for(lambda: len(objects(tier)) >= before_objects + 3, "objects keep appearing")
    for p in survivors:
        if p is not heir:
            st = p.status()
            assert (st["uploads"], st["local_deleted"]) == (0, 0), (p.slot, st)
    return heir, caught


def test_uploads_survive_the_owner_killed(tmp_path, tier):
    from rmqlog import CommitLog

    dirs = store_dirs(tmp_path)
    opts = tier_log(tier)
    killed: dict[int, int] = {}  # slot -> last acknowledged index
    with producers() as procs:
        first = Producer(tmp_path, dirs, 0, opts)
        procs.append(first)
        first.wait_acks(1)
        assert owner(dirs, [first]) is first, "the first open does the background work"
        for slot in (1, 2):
            procs.append(Producer(tmp_path, dirs, slot, opts))
        for p in procs:
            p.wait_acks(20)
        wait_for(
            lambda: first.status()["local_deleted"] >= 2,
            "the first owner uploaded and deleted local copies",
        )
        for p in procs[1:]:
            st = p.status()
            assert (st["uploads"], st["local_deleted"]) == (0, 0), st

        heir, _ = kill_the_owner(dirs, tier, procs, killed)
        procs.append(Producer(tmp_path, dirs, 3, opts))  # joins after the crash
        procs[-1].wait_acks(20)
        assert owner(dirs, procs) is heir
        _, caught = kill_the_owner(dirs, tier, procs, killed, mid_upload=True)
        print(f"the second owner was killed mid-upload: {caught}")

        # Every acknowledged record, the dead producers' too, in each surviving process
        # (remote-only segments included).
        survivors = [p for p in procs if not p.killed]
        assert len(survivors) == 2
        for p in survivors:
            got = p.call("check", acks=[str(q.acks) for q in procs])
            assert got["bad"] == [], f"producer {p.slot}: {got['bad']}"
            assert got["remote_only"] > 0 and got["checked"] > 200, got
        assert survivors[0].call("verify") == []
        # A read-only follower of the store, and a URL-only open, while they still append.
        acked = [a for p in procs for a in p.acked()]
        with CommitLog(dirs, read_only=True, **tier_kwargs(tier)) as follower:
            for i, off, size in acked:
                assert bytes(follower.read(off)) == body(i, size), f"record {i} at {off}"
            assert follower.tier_status()["remote_segments"] > 0
        check_url_open(tier, acked)
        # One closes, the last one dies: the store is left as after a crash.
        survivors[0].close()
        last = owner(dirs, survivors[1:])
        last.wait_acks(len(last.acked()) + 20)
        last.kill()
        killed[last.slot] = max(i for i, _, _ in last.acked())
        acked = [a for p in procs for a in p.acked()]

    records, active = check_store(dirs, tier, acked, killed)
    assert len(records) >= len(acked)
    # Every sealed segment: all but the active one.
    assert check_url_open(tier, acked, records) == active


# ---------------------------------------------------------------------------------------------
# 2. A joiner with other tier options is refused and changes nothing.


def metadata_files(dirs: list[str]) -> dict[str, list[str]]:
    """The files of each directory but the segments and the temporary files of a checkpoint or
    a manifest copy being written."""
    return {
        d: sorted(n for n in os.listdir(d) if not n.isdigit() and not n.endswith(".tmp"))
        for d in dirs
    }


def names(message: str, option: str, there: str, here: str) -> bool:
    """The refusal names ``option``, the writers' value (``there``) and the joiner's (``here``),
    in that order."""
    at = message.find(option)
    return at >= 0 and 0 <= message.find(there, at) < message.rfind(here)


def test_joiner_with_other_tier_options_is_refused(tmp_path, tier):
    from rmqlog import CommitLog, ConfigurationError

    dirs = store_dirs(tmp_path)
    opts = tier_log(tier)
    if tier.kind == "file":
        other_url = (tmp_path / "other-tier").as_uri()
    else:
        other_url = f"s3://{tier.bucket}/other"
    url = tier.url
    # What each joiner changes, and what its refusal must name: the option, the writers' value
    # and its own.
    cases = {
        "another tier_url": ({"tier_url": other_url}, ("tier_url", url, other_url)),
        "another local_retention_bytes": (
            {"local_retention_bytes": 3 * LOCAL},
            ("local_retention_bytes", str(LOCAL), str(3 * LOCAL)),
        ),
        "another tier_after": ({"tier_after": 5.0}, ("tier_after", "0", "5000")),
    }
    with producers() as procs:
        for slot in (0, 1):
            procs.append(Producer(tmp_path, dirs, slot, opts))
            procs[-1].wait_acks(1)
        boss = owner(dirs, procs)
        wait_for(lambda: boss.status()["local_deleted"] >= 1, "uploads and local deletions")
        files = metadata_files(dirs)
        store_id = manifest(tier)["store_id"]
        for what, (change, named) in cases.items():
            kwargs = {**opts, **change}
            kwargs = {k: v for k, v in kwargs.items() if v is not None}
            try:
                CommitLog(dirs, exclusive=False, **kwargs).close()
            except ConfigurationError as e:
                message = str(e)
            else:
                raise AssertionError(f"a joiner with {what} was accepted")
            assert names(message, *named), (what, named, message)
            assert owner(dirs, procs) is boss
        # Nothing changed: no file came or went beside the segments, the other tier is empty,
        # the writers' tier has no error, and the writers go on appending and shipping.
        assert metadata_files(dirs) == files
        if tier.kind == "file":
            assert not (tmp_path / "other-tier").exists() or not any(
                (tmp_path / "other-tier").iterdir()
            )
        else:
            listing = tier.client.list_objects_v2(Bucket=tier.bucket, Prefix="other/")
            assert listing.get("KeyCount", 0) == 0
        before = version(tier)
        counts = [len(p.acked()) for p in procs]
        for p, n in zip(procs, counts, strict=True):
            p.wait_acks(n + 50)
        wait_for(lambda: version(tier) >= before + 2, "the writers ship on")
        assert manifest(tier)["store_id"] == store_id
        for p in procs:
            assert p.status()["last_error"] is None
        # A joiner with the same options is still let in, and reads everything.
        with CommitLog(dirs, exclusive=False, **opts) as same:
            for i, off, size in [a for p in procs for a in p.acked()]:
                assert bytes(same.read(off)) == body(i, size)
        for p in procs:
            p.close()
        acked = [a for p in procs for a in p.acked()]
    check_store(dirs, tier, acked, {})


def test_a_joiner_that_gives_no_tier_takes_the_writers(tmp_path, tier):
    """The writers gave ``tier_url`` (and the options to reach it); a joiner that gives no tier,
    nor any other store-wide option, takes the store's settings and joins (docs/options.md)."""
    from rmqlog import CommitLog

    dirs = store_dirs(tmp_path)
    opts = {"segment_size": SEGMENT, "flush_interval_ms": 50, **tier_kwargs(tier)}
    with producers() as procs:
        writer = Producer(tmp_path, dirs, 0, opts)
        procs.append(writer)
        wait_for(lambda: writer.status()["uploads"] >= 1, "the writer uploads")
        with CommitLog(dirs, exclusive=False) as joiner:
            assert joiner.recorded_settings()["segment_size"] == SEGMENT
            joined = joiner.append(b"from the joiner")
        n = len(writer.acked())
        writer.wait_acks(n + 50)
        writer.close()
        acked = writer.acked()
    with CommitLog(dirs, **tier_kwargs(tier)) as log:
        assert bytes(log.read(joined)) == b"from the joiner"
        for i, off, size in acked:
            assert bytes(log.read(off)) == body(i, size)


# ---------------------------------------------------------------------------------------------
# 3. A placement function in each shared writer.


def test_each_process_places_with_its_own_function(tmp_path):
    from rmqlog import CommitLog, ConfigurationError

    dirs = store_dirs(tmp_path, 3)
    opts = {"segment_size": SEGMENT, "flush_interval_ms": 50}
    targets = {0: "d2", 1: "d1"}  # d0 gets nothing
    calls = {slot: tmp_path / f"calls-{slot}" for slot in targets}
    with producers() as procs:
        for slot, target in targets.items():
            procs.append(
                Producer(
                    tmp_path, dirs, slot, opts, strategy=[target, str(calls[slot])], pace=0.002
                )
            )
            procs[-1].wait_acks(1)
        for strategy in ("round_robin", "most_free", None):
            kwargs = opts if strategy is None else {**opts, "strategy": strategy}
            try:
                CommitLog(dirs, exclusive=False, **kwargs).close()
            except ConfigurationError as e:
                message = str(e)
            else:
                raise AssertionError(f"a joiner with strategy {strategy} was accepted")
            named = strategy or "round_robin"
            assert f"strategy is custom there, {named} here" in message, message

        # Many rolls, by both processes. (Where two processes roll at once, both functions may be
        # called for one segment: they are called before the append lock is taken.)
        def rolled(path: Path) -> set[str]:
            return {line.split()[0] for line in path.read_text().splitlines()}

        wait_for(
            lambda: all(p.exists() and len(rolled(p)) >= 8 for p in calls.values()),
            "each process rolled at least 8 segments",
        )
        for p in procs:
            p.close()
        acked = [a for p in procs for a in p.acked()]

    said: dict[int, set[str]] = {}
    pids = {p.pid: p.slot for p in procs}
    for slot, path in calls.items():
        for line in path.read_text().splitlines():
            start, target, pid = line.split()
            assert pids[int(pid)] == slot and target == targets[slot]
            said.setdefault(int(start), set()).add(target)
    with CommitLog(dirs, read_only=True) as log:
        segs = log.segments()
        assert len(segs) >= 12
        where = {s.start_offset: os.path.basename(os.path.dirname(s.path)) for s in segs}
        for start, d in where.items():
            assert start in said, f"segment {start} ({d}): no placement function was called"
            assert d in said[start], f"segment {start} is in {d}, the function said {said[start]}"
        assert set(said) == set(where), "a function was called for a segment that is not there"
        assert {"d1", "d2"} <= set(where.values()) and "d0" not in where.values(), where
        for i, off, size in acked:
            assert bytes(log.read(off)) == body(i, size)
    # The other way round: writers with a named strategy refuse a joiner with a function.
    with CommitLog(dirs, exclusive=False, strategy="fewest_segments", **opts) as named:
        try:
            CommitLog(dirs, exclusive=False, strategy=lambda dirs, start: 0, **opts).close()
        except ConfigurationError as e:
            assert "strategy is fewest_segments there, custom here" in str(e), str(e)
        else:
            raise AssertionError("a joiner with a function was accepted")
        named.append(b"still open")


# ---------------------------------------------------------------------------------------------
# 4. A non-owner reads a record whose segment is remote only.


def test_non_owner_reads_a_segment_the_owner_made_remote_only(tmp_path, tier):
    from rmqlog import CommitLog

    dirs = store_dirs(tmp_path)
    opts = tier_log(tier)
    with producers() as procs:
        boss = Producer(tmp_path, dirs, 0, opts, paused=True)  # the first open: the owner
        procs.append(boss)
        other = Producer(tmp_path, dirs, 1, opts, paused=True)
        procs.append(other)
        assert owner(dirs, procs) is boss
        with CommitLog(dirs, exclusive=False, **opts) as log:  # this process: not the owner
            assert owner_pid(dirs) == boss.pid != os.getpid()
            written = []
            for i in range(400):
                size = 100 + (i * 37) % 1500
                written.append((i, log.append(body(i, size)), size))
            status = wait_for(
                lambda: (st := boss.status())["local_deleted"] >= 2 and st,
                "the owner deleted local copies of uploaded segments",
            )

            def remote_only_segment():
                segs = log.segments()
                return next((s for s in segs if s.remote and not s.local and s.sealed), None)

            seg = wait_for(remote_only_segment, "a remote-only segment in this process's view")
            lo, hi = seg.start_offset, seg.start_offset + seg.size
            assert seg.path == f"{tier.url}/{object_name(lo)}"
            for d in dirs:
                assert not os.path.exists(os.path.join(d, object_name(lo)))
            mine = [w for w in written if lo <= w[1] < hi]
            assert len(mine) >= 10
            for i, off, size in mine:
                assert bytes(log.read(off)) == body(i, size)
                assert bytes(log.read_record(off).body) == body(i, size)
            assert [(o, bytes(b)) for o, b in log.scan(lo, hi)] == [
                (off, body(i, size)) for i, off, size in mine
            ]
            st = log.tier_status()
            assert st["uploads"] == 0 and st["local_deleted"] == 0, st
            assert st["range_reads"] + st["downloads"] > 0, st
            assert status["uploads"] >= 2
            # Another process that is not the owner either reads them all too.
            got = other.call("check", acks=[])
            assert got == {"checked": 0, "remote_only": 0, "scanned": 0, "bad": []}
            acks = tmp_path / "acks-parent"
            acks.write_text("".join(f"{i} {off} {size}\n" for i, off, size in written))
            got = other.call("check", acks=[str(acks)])
            assert got["bad"] == [] and got["checked"] == len(written), got
            assert got["remote_only"] >= len(mine), got
            assert other.status()["uploads"] == 0
            # The owner closes: another open takes the background work over and ships on.
            boss.close()
            heir = wait_for(
                lambda: (pid := owner_pid(dirs)) in (other.pid, os.getpid()) and pid,
                "another open takes the background work over",
                10,
            )
            before = version(tier)
            for i in range(400, 700):
                size = 100 + (i * 37) % 1500
                written.append((i, log.append(body(i, size)), size))
            shipper = log.tier_status if heir == os.getpid() else other.status
            status = wait_for(
                lambda: (st := shipper())["uploads"] >= 2 and st,
                "the open that took over uploads",
            )
            assert status["last_error"] is None
            wait_for(lambda: version(tier) >= before + 2, "the manifest's version grows")
            acks.write_text("".join(f"{i} {off} {size}\n" for i, off, size in written))
            got = other.call("check", acks=[str(acks)])
            assert got["bad"] == [] and got["checked"] == len(written), got
        other.close()


def test_non_owner_tier_status_takes_in_the_owners_work(tmp_path, tier):
    """``tier_status()`` of an open that is not doing the background work says where the
    segments are now (its counters, ``uploads`` and the like, are its own): not the segments
    it appended as local and pending, once the owner uploaded them and dropped their copies."""
    from rmqlog import CommitLog

    dirs = store_dirs(tmp_path)
    opts = tier_log(tier)
    with producers() as procs:
        boss = Producer(tmp_path, dirs, 0, opts, paused=True)
        procs.append(boss)
        with CommitLog(dirs, exclusive=False, **opts) as log:
            assert owner_pid(dirs) == boss.pid
            for i in range(400):
                log.append(body(i, 100 + (i * 37) % 1500))
            end = log.max_offset
            sealed = end // SEGMENT  # the segments wholly below the end
            assert sealed >= 4
            done = wait_for(
                lambda: (
                    (st := boss.status())["uploads"] >= sealed
                    and st["pending_segments"] == 0
                    and st["local_deleted"] >= sealed - 1
                    and st
                ),
                "the owner uploaded every sealed segment and dropped their local copies",
            )
            st = log.tier_status()  # first: nothing else brought this open's view up to date
            where = {
                k: st[k]
                for k in ("remote_segments", "both_segments", "pending_segments", "local_segments")
            }
            assert where == {k: done[k] for k in where}, (where, done)
            assert st["uploads"] == 0 and st["manifest_version"] == done["manifest_version"]
            assert log.max_offset == end
        boss.close()


if __name__ == "__main__":
    child(json.loads(sys.argv[1]))
