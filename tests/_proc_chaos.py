"""The child processes of tests/test_shared_chaos.py, and the record format and validator they
share with it.

Run as ``python tests/_proc_chaos.py producer ARGS_JSON`` or ``... follower ARGS_JSON``.

Every body but the empty ones is self-describing: a header naming the producer slot, the
incarnation (one per process, unique in a run), the operation (one per ``append`` or
``append_batch`` call, numbered from 0 in each incarnation), the record's index in its batch and
the batch's size, the body's length, and a checksum of all the rest. So any reader checks each
record on its own, and checks across records that batches are whole and contiguous and that each
incarnation's operations appear in order with none missing.

A producer writes one line per record to its acknowledgement file once the call that appended it
returned (one ``os.write`` per call): ``OFFSET OP IDX N DIGEST KIND``, ``OP`` -1 for an empty
body, ``KIND`` how it was appended: ``s`` ``append``, ``e`` ``append`` of an empty body, ``b``
``append_batch`` of a list, ``i`` of an iterator, ``a`` of a pyarrow array.
Other lines: ``O`` once the log is open, ``F FLUSHED`` after a ``flush()``, ``C`` once closed.
Maintenance calls (``clean()``, ``truncate_before()``, ``move_segment()``, ``rebalance()`` in turn,
``maint_every`` seconds apart on average) write three more kinds of line: ``M KIND ARGS``
before the call (so a truncation a SIGKILL cut short is still known: ``M truncate TARGET``), then
``m KIND WHO RESULT`` once it returned, or ``x KIND WHO ERROR WHY`` once it raised an error it may
legitimately raise (anything else kills the producer, with the traceback on its stderr), each
ending with `` @TIME`` (``time.time()``, to line them up with the producers' logs); ``WHO``
is ``o`` if the producer held the store's background work (``rmqlog.owner``) after the call, else
``n`` (then it did not hold it during the call either: an open keeps that lock until it closes).
A ``rebalance`` line's result is the number of moves and each move, ``START:FROM>TO`` (indices
into the directories given).
The follower writes ``(offset, digest)`` of each record it is shown to a binary file, its position
to a progress file (a thread, every 0.1 s, also while it waits), every problem it finds to a
problems file as it finds it, and a JSON report when it reaches the stop record.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import random
import re
import struct
import sys
import threading
import time

HEADER = 32  # rmqlog's record header (rmqlog.HEADER_LEN; a test checks they agree)
MAGIC = b"CHS1"
HEAD = struct.Struct("<4sHIIHHI")  # magic, slot, incarnation, op, idx, n, length
CHECK = 8  # the checksum after HEAD: blake2b-64 of HEAD and the payload
MIN_BODY = HEAD.size + CHECK
SEEN = struct.Struct("<Q8s")  # the follower's record of one record: offset, digest
STOP = b"rmqlog-proc-chaos: stop"  # the sentinel the parent appends once everything stopped
PROGRESS = struct.Struct("<QQQ")  # the follower's position, records seen, problems


MAINT_KINDS = ("clean", "truncate", "move", "rebalance")
MAINT_LINE = re.compile(rb"^[Mmx] [^\n]*$", re.M)  # the maintenance lines of an ack file


def owner_pid(dirs) -> int | None:
    """The pid holding the exclusive flock on ``rmqlog.owner`` (the background work), if any."""
    files = set()
    for d in dirs:
        with contextlib.suppress(OSError):
            st = os.stat(os.path.join(d, "rmqlog.owner"))
            files.add((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
    inodes = {f[2] for f in files}
    by_inode = None  # a lock on an inode of that number (a stacked filesystem may show another
    # device than stat does)
    with open("/proc/locks") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[1] == "FLOCK" and parts[3] == "WRITE":
                major, minor, ino = parts[5].split(":")
                if (int(major, 16), int(minor, 16), int(ino)) in files:
                    return int(parts[4])
                if int(ino) in inodes and by_inode is None:
                    by_inode = int(parts[4])
    return by_inode


def digest(body: bytes) -> bytes:
    """What a producer acknowledges and the follower reports of a body: blake2b-64 of it all."""
    return hashlib.blake2b(body, digest_size=8).digest()


def make_body(slot: int, inc: int, op: int, idx: int, n: int, payload: bytes) -> bytes:
    head = HEAD.pack(MAGIC, slot, inc, op, idx, n, MIN_BODY + len(payload))
    return head + hashlib.blake2b(head + payload, digest_size=CHECK).digest() + payload


def parse(body: bytes) -> tuple[int, int, int, int, int] | str:
    """``(slot, inc, op, idx, n)`` of a valid non-empty body, else why it is not valid."""
    if len(body) < MIN_BODY:
        return f"a body of {len(body)} bytes (less than a header)"
    magic, slot, inc, op, idx, n, length = HEAD.unpack_from(body)
    if magic != MAGIC:
        return f"bad magic {magic!r}"
    if length != len(body):
        return f"length {len(body)}, the body says {length}"
    check = hashlib.blake2b(body[: HEAD.size] + body[MIN_BODY:], digest_size=CHECK).digest()
    if check != body[HEAD.size : MIN_BODY]:
        return "checksum mismatch"
    if not 0 <= idx < n:
        return f"index {idx} of a batch of {n}"
    return slot, inc, op, idx, n


class Validator:
    """Checks a stream of records in offset order, from a scan of the log or a follower.

    - each body is valid (``parse``) or empty, or the stop record (the last);
    - offsets are dense: each record starts where the previous ended (``offset + HEADER + len``),
      or at the start of the next segment (the rest of the segment was a filler);
    - a batch's records are contiguous and whole: after record ``idx < n - 1`` of a batch comes
      its record ``idx + 1``;
    - each incarnation's operations come in order, none missing: ``op`` is the previous one's + 1
      (the first seen is 0, unless older records were deleted: after ``restart``).

    ``restart(pos)`` starts the stream again at ``pos`` (a follower that found the records before
    it deleted by retention): the first record may then be in the middle of a batch, and an
    incarnation's operations may jump once. ``problems`` lists what failed, with offsets.
    """

    def __init__(self, segment_size: int, start: int) -> None:
        self.segment_size = segment_size
        self.pos = start
        self.batch: tuple[int, int, int, int] | None = None  # inc, op, n, next idx
        self.last_op: dict[int, int] = {}
        self.may_jump: set[int] = set()  # incarnations seen before a restart
        self.started_late = start > 0  # records before the start may be gone
        self.fresh = True  # no record since the (re)start
        self.problems: list[str] = []
        self.records = 0
        self.empties = 0
        self.early_rolls = 0  # jumps to the next segment where the record would have fit
        self.stopped_at: int | None = None

    def problem(self, text: str) -> None:
        self.problems.append(text)

    def restart(self, pos: int) -> None:
        self.pos = pos
        self.batch = None
        self.may_jump = set(self.last_op)
        self.started_late = True
        self.fresh = True

    def _place(self, off: int, length: int) -> None:
        if self.stopped_at is not None:
            self.problem(f"a record at {off} after the stop record at {self.stopped_at}")
        if off != self.pos:
            seg_end = (self.pos // self.segment_size + 1) * self.segment_size
            if self.pos % self.segment_size == 0 or off != seg_end:
                self.problem(f"record at {off}, expected at {self.pos} (offsets not dense)")
            elif self.pos + HEADER + length <= seg_end:
                self.early_rolls += 1
        self.pos = off + HEADER + length
        self.records += 1

    def feed(self, off: int, body: bytes) -> None:
        self._place(off, len(body))
        fresh, self.fresh = self.fresh, False
        if not body:
            self.empties += 1
            if self.batch is not None:
                self.problem(f"an empty record at {off} inside batch {self.batch[:2]}")
                self.batch = None
            return
        parsed = parse(body)
        if isinstance(parsed, str):
            self.problem(f"bad record at {off} ({len(body)} bytes): {parsed}")
            self.batch = None
            return
        _, inc, op, idx, n = parsed
        continuing = False
        if self.batch is not None:
            b_inc, b_op, b_n, b_idx = self.batch
            continuing = (inc, op, idx, n) == (b_inc, b_op, b_idx, b_n)
            if not continuing:
                self.problem(
                    f"batch inc {b_inc} op {b_op} cut at record {b_idx} of {b_n}: "
                    f"at {off} comes inc {inc} op {op} record {idx} of {n}"
                )
        elif idx != 0 and not fresh:
            self.problem(f"record {idx} of {n} of inc {inc} op {op} at {off} without its first")
        if not continuing:
            self._op(off, inc, op, fresh and idx > 0)
        self.batch = (inc, op, n, idx + 1) if idx + 1 < n else None

    def _op(self, off: int, inc: int, op: int, mid_batch: bool) -> None:
        """The first record of an operation (or of what is left of it after a restart)."""
        last = self.last_op.get(inc)
        if last is None:
            if op != 0 and not self.started_late:
                self.problem(f"inc {inc} starts with op {op} at {off} (op 0 missing)")
        elif inc in self.may_jump:
            if op < last or (op == last and not mid_batch):
                self.problem(f"inc {inc} op {op} at {off} after its op {last}")
        elif op != last + 1:
            self.problem(f"inc {inc} op {op} at {off} after its op {last} (not consecutive)")
        self.may_jump.discard(inc)
        self.last_op[inc] = op

    def feed_stop(self, off: int, length: int) -> None:
        self._place(off, length)
        if self.batch is not None:
            self.problem(f"batch inc {self.batch[0]} op {self.batch[1]} cut by the stop record")
            self.batch = None
        self.stopped_at = off


def _ack_lines(kind: str, offsets, bodies, op: int) -> bytes:
    n = len(bodies)
    return "".join(
        f"{o} {op} {i} {n} {digest(b).hex()} {kind}\n"
        for i, (o, b) in enumerate(zip(offsets, bodies, strict=True))
    ).encode()


MAX_TRUNCATE = 0.5  # a truncation deletes at most this fraction of the log, from its head


def maintain(log, kind: str, rng: random.Random, args: dict, acks: int) -> None:
    """One maintenance call of ``kind``, its arguments chosen with ``rng`` (the producer's second
    generator: its appends stay the same whatever this one does), acknowledged with ``M`` before
    and ``m`` (returned) or ``x`` (raised an error it may raise) after it.

    - ``clean(force)``, ``force`` at random; ``rebalance(max_bytes)``, ``max_bytes`` None or a few
      segments;
    - ``truncate_before(target)``: where the run truncates (``args["truncate"]``), ``target`` is
      the head plus up to ``MAX_TRUNCATE`` of the log (now and then a segment's start), so the
      head never passes a target a producer chose; otherwise 0 (a call that deletes nothing);
    - ``move_segment(start, dest)``: a sealed segment to another directory; one time in seven
      (and when none is sealed) the active segment, which is refused.

    The errors it may raise: a move of a segment deleted meanwhile (by retention or a truncation
    of another process: ``OffsetOutOfRangeError``, and the head is then past it), a move of the
    active segment (``InvalidOffsetError`` saying so), and a move to a directory without room for
    the copy (``OSError`` ENOSPC: the tmpfs of the third directory may fill up). Anything else
    propagates."""
    from rmqlog import InvalidOffsetError, OffsetOutOfRangeError

    dirs = args["dirs"]
    start = -1
    active = False
    if kind == "clean":
        force = rng.random() < 0.5
        arg = str(int(force))

        def call():
            return log.clean(force)

    elif kind == "truncate":
        target = 0
        if args["truncate"]:
            low, end = log.min_offset, log.max_offset
            target = low + int((end - low) * rng.uniform(0.0, MAX_TRUNCATE))
            if rng.random() < 0.3:
                target -= target % args["store"]["segment_size"]
        arg = str(target)

        def call():
            return log.truncate_before(target)

    elif kind == "move":
        segs = log.segments()
        sealed = [s for s in segs if s.sealed]
        active = not sealed or rng.random() < 1 / 7
        seg = segs[-1] if active else rng.choice(sealed)
        start = seg.start_offset
        here = os.path.normpath(os.path.dirname(seg.path))
        to = rng.choice([i for i, d in enumerate(dirs) if os.path.normpath(d) != here])
        arg = f"{start} {to} {'active' if active else 'sealed'}"

        def call():
            log.move_segment(start, dirs[to])
            return "ok"

    else:
        max_bytes = rng.choice([None, 1 << 20, 4 << 20, 16 << 20])
        arg = str(max_bytes)

        def call():
            moves = log.rebalance(max_bytes)
            where = {os.path.normpath(d): i for i, d in enumerate(dirs)}
            done = ",".join(
                f"{s}:{where.get(os.path.normpath(f))}>{where.get(os.path.normpath(t))}"
                for s, f, t in moves
            )
            return f"{len(moves)} {done or '-'}"

    os.write(acks, f"M {kind} {arg} @{time.time():.3f}\n".encode())
    try:
        result = call()
    except (OffsetOutOfRangeError, InvalidOffsetError, OSError) as e:
        if kind != "move":
            raise
        if type(e) is OSError:
            if e.errno != errno.ENOSPC:
                raise
            why = "ENOSPC"
        elif isinstance(e, OffsetOutOfRangeError):
            low = log.min_offset
            if start >= low:
                raise AssertionError(f"moving {start}: {e!r}, though the head is {low}") from e
            why = "deleted"
        elif active and "active segment" in str(e):
            why = "active"
        else:
            raise
        who = "o" if owner_pid(dirs) == os.getpid() else "n"
        os.write(acks, f"x {kind} {who} {type(e).__name__} {why} @{time.time():.3f}\n".encode())
        return
    who = "o" if owner_pid(dirs) == os.getpid() else "n"
    os.write(acks, f"m {kind} {who} {result} @{time.time():.3f}\n".encode())


def producer(args: dict) -> None:
    """Appends at random until killed or told to stop (a stop file), acknowledging each record
    once its call returned; every ``maint_every`` seconds on average, a maintenance call
    (``maintain``)."""
    from rmqlog import CommitLog

    logging.basicConfig(
        level=logging.WARNING, format=f"%(asctime)s inc {args['inc']}: %(name)s: %(message)s"
    )
    logging.getLogger("rmqlog").setLevel(logging.INFO)  # what each deletion took, and why
    slot, inc, seg = args["slot"], args["inc"], args["store"]["segment_size"]
    rng = random.Random(args["seed"])
    acks = os.open(args["acks"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    stops = (args["stop_all"], args["stop_me"])
    dirs = list(args["dirs"])
    rng.shuffle(dirs)  # shared writers may give the directories in any order
    log = CommitLog(
        dirs,
        exclusive=False,
        flush=args["flush"],
        flush_interval_ms=args["flush_interval_ms"],
        **args["store"],
    )
    os.write(acks, b"O\n")
    pa = None
    if args["arrow"]:
        import pyarrow as pa

    def size() -> int:
        r = rng.random()
        if r < 0.01:  # about a quarter of a segment: rolls come often
            return seg // 4 - rng.randrange(HEADER + MIN_BODY, 4096)
        if r < 0.05:
            return rng.randrange(4096, 32768)
        if r < 0.5:
            return rng.randrange(0, 256)
        return rng.randrange(0, 4096)

    # Maintenance: its own generator; the four kinds in turn, in an order of this producer's, so
    # that a producer not doing the background work soon makes every kind of call.
    mrng = random.Random(args["seed"] ^ 0x6D61696E74)
    kinds = mrng.sample(MAINT_KINDS, len(MAINT_KINDS))
    every = args["maint_every"]
    next_maint = time.monotonic() + mrng.expovariate(1 / every)
    op = 0
    while not any(os.path.exists(s) for s in stops):
        if time.monotonic() >= next_maint:
            maintain(log, kinds[0], mrng, args, acks)
            kinds.append(kinds.pop(0))
            next_maint = time.monotonic() + mrng.expovariate(1 / every)
            continue
        r = rng.random()
        if r < 0.02:
            flushed = log.flush()
            os.write(acks, b"F %d\n" % flushed)
        elif r < 0.05:  # an empty body: not self-describing, so it takes no op number
            off = log.append(b"")
            os.write(acks, _ack_lines("e", [off], [b""], -1))
        elif r < 0.55:
            body = make_body(slot, inc, op, 0, 1, rng.randbytes(size()))
            off = log.append(body)
            os.write(acks, _ack_lines("s", [off], [body], op))
            op += 1
        else:
            n = rng.randint(1, 200) if rng.random() < 0.8 else rng.randint(1, 8)
            bodies = [make_body(slot, inc, op, i, n, rng.randbytes(size())) for i in range(n)]
            how = rng.random()
            if pa is not None and how < 0.5:
                kind, offsets = "a", log.append_batch(pa.array(bodies, pa.binary())).to_pylist()
            elif how > 0.85:
                kind, offsets = "i", log.append_batch(iter(bodies))
            else:
                kind, offsets = "b", log.append_batch(bodies)
            os.write(acks, _ack_lines(kind, offsets, bodies, op))
            op += 1
    log.close()
    os.write(acks, b"C\n")


BAD = "bad records the follower was shown"
RAISED = "errors raised to the follower"
IDLE = "the follower's scan ended idle"


def follower(args: dict) -> None:
    """Follows the store from offset 0 with ``scan(follow=True)`` until the stop record,
    validating every record. Each problem is written as ``KIND<TAB>TEXT`` line as it is found,
    and the follower goes on (an error raised to it: after 0.1 s, from where it was)."""
    from rmqlog import CommitLog, CommitLogError, OffsetOutOfRangeError

    problems = open(args["problems"], "a")
    seen = open(args["seen"], "wb")
    progress = os.open(args["progress"], os.O_WRONLY | os.O_CREAT, 0o644)
    v = Validator(args["segment_size"], 0)
    checked = 0  # v.problems written so far
    count = 0
    lock = threading.Lock()
    finished = threading.Event()
    t0 = time.monotonic()

    def problem(kind: str, text: str) -> None:
        nonlocal count
        count += 1
        if count <= 1000:
            problems.write(f"{kind}\t{time.monotonic() - t0:.2f} s: {text}\n")
            problems.flush()

    def write_progress() -> None:
        os.pwrite(progress, PROGRESS.pack(v.pos, v.records, count), 0)

    def progress_thread() -> None:
        while not finished.wait(0.1):
            write_progress()

    ro = CommitLog(args["dirs"], read_only=True)
    threading.Thread(target=progress_thread, daemon=True).start()
    skips: list[tuple[int, int]] = []
    pos = 0
    last_flush = time.monotonic()
    while v.stopped_at is None:
        try:
            for off, view in ro.scan(pos, follow=True, timeout=args["idle"]):
                body = bytes(view)
                if body == STOP:
                    v.feed_stop(off, len(body))
                    break
                with lock:
                    v.feed(off, body)
                seen.write(SEEN.pack(off, digest(body)))
                pos = v.pos
                while checked < len(v.problems):
                    problem(BAD, v.problems[checked])
                    checked += 1
                if time.monotonic() - last_flush > 0.5:
                    seen.flush()
                    last_flush = time.monotonic()
            else:
                problem(IDLE, f"no record for {args['idle']} s at {pos}")
        except OffsetOutOfRangeError as e:
            low = ro.min_offset
            if low <= pos:
                ro.refresh()
                low = ro.min_offset
            if low <= pos:
                problem(RAISED, f"at {pos}, though min_offset is {low}: {e!r}")
                time.sleep(0.1)
                continue
            skips.append((pos, low))  # deleted before the follower got there
            with lock:
                v.restart(low)
            pos = low
        except CommitLogError as e:
            problem(RAISED, f"at {pos}: {e!r}")
            time.sleep(0.1)
        while checked < len(v.problems):
            problem(BAD, v.problems[checked])
            checked += 1
    finished.set()
    seen.close()
    write_progress()
    report = {
        "records": v.records,
        "empties": v.empties,
        "early_rolls": v.early_rolls,
        "problems": count,
        "skips": skips,
        "stop_at": v.stopped_at,
        "last_op": {str(k): o for k, o in v.last_op.items()},
        "end": v.pos,
    }
    with open(args["report"] + ".tmp", "w") as f:
        json.dump(report, f)
    os.rename(args["report"] + ".tmp", args["report"])
    ro.close()


if __name__ == "__main__":
    {"producer": producer, "follower": follower}[sys.argv[1]](json.loads(sys.argv[2]))
