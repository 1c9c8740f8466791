"""Stress: 4 threads appending, 4 threads reading and scanning, the cleaner thread deleting old
segments (``clean_interval_ms=50``, a small ``retention_bytes``), a thread moving segments
between the directories and truncating the head, and a read-only follower in another process,
all at once on one store, for a bounded time.

Duration: ``RMQLOG_STRESS_SECONDS`` seconds, 6 by default; for a longer soak run e.g.
``RMQLOG_STRESS_SECONDS=30 .venv/bin/python -m pytest -q tests/test_stress.py``.

Every body is self-describing (``_model.make_body``: its number, a digest, derived filler), so
any reader, even in another process, can tell a torn, shifted or mixed-up record. The only
error a read may raise is ``OffsetOutOfRangeError`` for an offset below the current
``min_offset`` (deleted by the cleaner); anything else fails the test. A watchdog fails the test
if a thread is still running 30 s after the deadline (a deadlock), after dumping every stack.
"""

from __future__ import annotations

import faulthandler
import itertools
import json
import os
import random
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from _model import check_body, make_body

from rmqlog import HEADER_LEN, CommitLog, InvalidOffsetError, OffsetOutOfRangeError

DURATION = float(os.environ.get("RMQLOG_STRESS_SECONDS", "6"))
GRACE = 30.0
SEG = 64 * 1024
RETENTION = 16 * SEG
APPENDERS = 4
READERS = 4

_OUT_OF_RANGE = re.compile(r"offset (-?\d+) is out of range")

FOLLOWER = textwrap.dedent(
    """
    import json, re, sys, time
    sys.path.insert(0, sys.argv[1])
    from _model import check_body
    from rmqlog import HEADER_LEN, CommitLog, OffsetOutOfRangeError

    path, duration, seg = sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    ro = CommitLog(path, read_only=True)
    print("open", flush=True)
    out = {"records": 0, "refreshes": 0, "skips": 0, "errors": []}
    pos = ro.min_offset
    prev_end = None  # where the record after the last one seen must start
    last_max = ro.max_offset
    deadline = time.monotonic() + duration
    try:
        while True:
            final = time.monotonic() >= deadline
            top = ro.refresh()
            out["refreshes"] += 1
            if top < last_max:
                out["errors"].append(f"max_offset went back from {last_max} to {top}")
            last_max = top
            try:
                for off, body in ro.scan(start=pos):
                    i = check_body(bytes(body))
                    if prev_end is not None and off != prev_end and not (
                        off % seg == 0 and off > prev_end
                    ):
                        out["errors"].append(f"record {i} at {off}, expected one at {prev_end}")
                    end = off + HEADER_LEN + len(body)
                    prev_end = end if seg - end % seg >= 8 else end + seg - end % seg
                    out["records"] += 1
                    pos = prev_end
            except OffsetOutOfRangeError as e:
                m = re.search(r"offset (-?\\d+) is out of range", str(e))
                ro.refresh()
                if m is None or int(m.group(1)) >= ro.min_offset:
                    out["errors"].append(f"{e!r} with min_offset {ro.min_offset}")
                    break
                out["skips"] += 1  # the cleaner deleted what was next: go on from the head
                pos, prev_end = ro.min_offset, None
                continue
            if final:
                break
            pos = max(pos, top)
            # Now and then fall behind, so that the cleaner deletes what comes next.
            time.sleep(0.4 if out["refreshes"] % 300 == 0 else 0.002)
    except BaseException as e:
        out["errors"].append(repr(e))
    out["max_offset"] = ro.max_offset
    print(json.dumps(out), flush=True)
    """
)


def out_of_range_offset(err: OffsetOutOfRangeError) -> int:
    m = _OUT_OF_RANGE.search(str(err))
    assert m is not None, f"OffsetOutOfRangeError without the offset: {err}"
    return int(m.group(1))


class Shared:
    """What the appenders acknowledged: offset -> record number, and the offsets in order of
    acknowledgement (for random picks)."""

    def __init__(self) -> None:
        self.written: dict[int, int] = {}
        self.offsets: list[int] = []
        self.numbers = itertools.count()
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.deleted_reads = 0
        self.reads = 0
        self.scanned = 0
        self.held: list[tuple[memoryview, bytes]] = []
        self.moves = 0
        self.truncates = 0

    def fail(self, what: str) -> None:
        self.errors.append(what)
        self.stop.set()


def appender(log: CommitLog, sh: Shared, seed: int) -> None:
    rng = random.Random(seed)
    try:
        while not sh.stop.is_set():
            if rng.random() < 0.2:
                nums = [next(sh.numbers) for _ in range(rng.randint(0, 8))]
                offs = log.append_batch(make_body(i) for i in nums)
                if len(offs) != len(nums) or offs != sorted(offs):
                    sh.fail(f"append_batch returned {offs} for {len(nums)} bodies")
            else:
                nums = [next(sh.numbers)]
                offs = [log.append(make_body(nums[0]))]
            for off, i in zip(offs, nums, strict=True):
                if off in sh.written:
                    sh.fail(f"offset {off} given twice (records {sh.written[off]} and {i})")
                sh.written[off] = i
                sh.offsets.append(off)
            if rng.random() < 0.01:
                time.sleep(0.001)
    except BaseException as e:
        sh.fail(f"appender: {e!r}")


def reader(log: CommitLog, sh: Shared, seed: int) -> None:
    rng = random.Random(seed)
    last_min = last_max = 0

    def below_min(off: int) -> bool:
        return off < log.min_offset

    try:
        while not sh.stop.is_set():
            lo, hi = log.min_offset, log.max_offset
            if lo < last_min or hi < last_max:
                sh.fail(f"offsets went back: [{last_min}, {last_max}) -> [{lo}, {hi})")
            last_min, last_max = lo, hi
            if not sh.offsets:
                continue
            roll = rng.random()
            # Mostly recent records, sometimes anything (old ones may be deleted).
            k = len(sh.offsets)
            off = sh.offsets[rng.randrange(max(0, k - 2000), k) if roll < 0.7 else rng.randrange(k)]
            expected = make_body(sh.written[off])
            if roll < 0.45:
                try:
                    view = log.read(off)
                except OffsetOutOfRangeError as e:
                    if out_of_range_offset(e) != off or not below_min(off):
                        sh.fail(f"read({off}): {e!r} with min_offset {log.min_offset}")
                    sh.deleted_reads += 1
                    continue
                if bytes(view) != expected:
                    sh.fail(f"read({off}) gave {bytes(view)[:40]!r}, wrote {expected[:40]!r}")
                sh.reads += 1
                if len(sh.held) < 200 and rng.random() < 0.02:
                    sh.held.append((view, expected))
            elif roll < 0.6:
                try:
                    rec = log.read_record(off)
                except OffsetOutOfRangeError as e:
                    if out_of_range_offset(e) != off or not below_min(off):
                        sh.fail(f"read_record({off}): {e!r} with min_offset {log.min_offset}")
                    sh.deleted_reads += 1
                    continue
                end = off + HEADER_LEN + len(expected)
                if (rec.offset, bytes(rec.body)) != (off, expected) or not (
                    rec.next_offset == end or (rec.next_offset % SEG == 0 and rec.next_offset > end)
                ):
                    sh.fail(f"read_record({off}) = {rec!r}, next {rec.next_offset}")
                sh.reads += 1
            else:
                scan_from(log, sh, off, rng.randint(1, 300))
    except BaseException as e:
        sh.fail(f"reader: {e!r}")


def scan_from(log: CommitLog, sh: Shared, start: int, limit: int) -> None:
    """Scans up to ``limit`` records from ``start``: in order, no gap, each body intact."""
    prev_end = start
    try:
        for n, (off, view) in enumerate(log.scan(start=start)):
            body = bytes(view)
            i = check_body(body)
            if off != prev_end and not (off % SEG == 0 and off > prev_end):
                sh.fail(f"scan from {start}: record {i} at {off}, expected one at {prev_end}")
            known = sh.written.get(off)
            if known is not None and known != i:
                sh.fail(f"scan: record {i} at {off}, but record {known} was written there")
            end = off + HEADER_LEN + len(body)
            prev_end = end if SEG - end % SEG >= 8 else end + SEG - end % SEG
            sh.scanned += 1
            if n + 1 >= limit:
                break
    except OffsetOutOfRangeError as e:
        off = out_of_range_offset(e)
        if off >= log.min_offset:
            sh.fail(f"scan from {start}: {e!r} with min_offset {log.min_offset}")
        sh.deleted_reads += 1
    except AssertionError as e:
        sh.fail(f"scan from {start}: {e}")


def maintainer(log: CommitLog, sh: Shared, dirs: list[str], seed: int) -> None:
    """Moves random sealed segments to random directories, and now and then truncates the head
    (keeping ``RETENTION`` and more, so the cleaner's promise still holds at the end)."""
    rng = random.Random(seed)
    try:
        while not sh.stop.is_set():
            segs = log.segments()
            if len(segs) > 2:
                seg = rng.choice(segs[:-1])
                try:
                    log.move_segment(seg.start_offset, rng.choice(dirs))
                    sh.moves += 1
                except (OffsetOutOfRangeError, InvalidOffsetError):
                    pass  # deleted by the cleaner meanwhile, or not sealed yet
            if rng.random() < 0.15:
                keep_from = log.max_offset - RETENTION - 2 * SEG
                if keep_from > log.min_offset:
                    log.truncate_before(rng.randint(log.min_offset, keep_from))
                    sh.truncates += 1
            time.sleep(0.002)
    except Exception as e:
        sh.fail(f"maintainer: {e!r}")


def test_appenders_readers_cleaner_and_a_follower(tmp_path):
    dirs = [str(tmp_path / f"d{i}") for i in range(3)]
    log = CommitLog(
        dirs,
        segment_size=SEG,
        flush="async",
        flush_interval_ms=20,
        clean_interval_ms=50,
        retention_bytes=RETENTION,
        retention_hours=None,
        delete_hours=None,
        max_used_ratio=1.0,
        max_deletes_per_pass=1000,
    )
    sh = Shared()
    for _ in range(50):
        i = next(sh.numbers)
        off = log.append(make_body(i))
        sh.written[off] = i
        sh.offsets.append(off)

    follower = subprocess.Popen(
        [
            sys.executable,
            "-c",
            FOLLOWER,
            str(Path(__file__).parent),
            dirs[1],
            str(DURATION),
            str(SEG),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    faulthandler.dump_traceback_later(DURATION + GRACE - 2, exit=False)
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline().strip() == "open"
        threads = [
            threading.Thread(target=appender, args=(log, sh, n), daemon=True)
            for n in range(APPENDERS)
        ] + [
            threading.Thread(target=reader, args=(log, sh, 100 + n), daemon=True)
            for n in range(READERS)
        ]
        threads.append(threading.Thread(target=maintainer, args=(log, sh, dirs, 7), daemon=True))
        started = time.monotonic()
        for t in threads:
            t.start()
        sh.stop.wait(DURATION)
        sh.stop.set()
        watchdog = started + DURATION + GRACE
        for t in threads:
            t.join(max(0.0, watchdog - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive()]
        assert not stuck, f"threads still running {GRACE} s after the deadline: {stuck}"
        try:
            out, _ = follower.communicate(timeout=max(1.0, watchdog - time.monotonic()))
        except subprocess.TimeoutExpired:
            follower.kill()
            raise AssertionError("the follower process did not finish (deadlock?)") from None
    finally:
        faulthandler.cancel_dump_traceback_later()
        if follower.poll() is None:
            follower.kill()
            follower.wait()

    assert sh.errors == []
    assert follower.returncode == 0
    report = json.loads(out.strip().splitlines()[-1])
    assert report["errors"] == []
    assert report["records"] > 0 and report["refreshes"] > 0

    # The cleaner deleted old segments while everything ran; once it has caught up, the log
    # keeps at least retention_bytes and no sealed segment more than needed.
    while log.clean():
        pass
    segs = log.segments()
    total = log.max_offset - log.min_offset  # the log's bytes in use
    assert total >= RETENTION
    assert len(segs) == 1 or total - segs[0].size < RETENTION
    stats = log.stats()
    assert stats["segments_deleted"] > 0, stats
    assert stats["clean_last_error"] is None, stats
    lo = log.min_offset
    assert lo > 0
    assert sh.reads > 0 and sh.scanned > 0
    assert sh.moves > 0 and sh.truncates > 0, (sh.moves, sh.truncates)
    # Views handed out stay valid, even over deleted segments.
    for view, expected in sh.held:
        assert bytes(view) == expected

    # Every acknowledged record at or above min_offset reads back; the log holds nothing else.
    live = sorted((off, i) for off, i in sh.written.items() if off >= lo)
    assert live and live[0][0] == lo
    got = [(off, check_body(bytes(v))) for off, v in log.scan()]
    assert got == live
    for off, i in live[:: max(1, len(live) // 500)]:
        assert bytes(log.read(off)) == make_body(i)
    for off in [o for o in sh.offsets[:1000] if o < lo][:50]:
        try:
            log.read(off)
            raise AssertionError(f"deleted offset {off} still reads")
        except OffsetOutOfRangeError:
            pass
    print(
        f"stress {DURATION:g} s: {len(sh.written)} records appended, {stats['segments_deleted']}"
        f" segments deleted, {sh.reads} reads, {sh.scanned} scanned, {sh.deleted_reads} reads"
        f" of deleted records, {sh.moves} moves, {sh.truncates} truncations; follower: {report}"
    )
    assert log.verify() == []
    assert log.read_record(live[-1][0]).next_offset == log.max_offset
    end = log.max_offset
    log.close()

    with CommitLog(dirs, segment_size=SEG, clean_interval_ms=0, max_used_ratio=1.0) as again:
        assert (again.min_offset, again.max_offset) == (lo, end)
        assert [off for off, _ in again.scan()] == [off for off, _ in live]
