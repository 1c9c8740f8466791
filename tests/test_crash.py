"""A writer killed with SIGKILL: every record whose append returned survives, the log ends at a
record boundary, corruption in the unflushed tail is cut and never comes back."""

import os
import platform
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rmqlog import HEADER_LEN, CommitLog, OffsetOutOfRangeError

WRITER = Path(__file__).with_name("_writer.py")
SEGMENT = 256 * 1024
# Kill rounds per flush mode (the reliability matrix asks for at least 50).
ROUNDS = int(os.environ.get("RMQLOG_CRASH_ROUNDS", "50"))
MAX_SIZE = 60 * 1024

sys.path.insert(0, str(WRITER.parent))
from _writer import body  # noqa: E402


def dirs_of(tmp_path: Path) -> str:
    return os.pathsep.join(str(tmp_path / f"d{i}") for i in range(3))


def run_writer(dirs: str, flush: str, seed: int, count: int | None = None) -> subprocess.Popen:
    args = [sys.executable, str(WRITER), dirs, flush, str(SEGMENT), str(MAX_SIZE), str(seed)]
    if count is not None:
        args.append(str(count))
    return subprocess.Popen(args, stdout=subprocess.PIPE, text=True)


def parse(lines: list[str]) -> list[tuple[int, int, int]]:
    reported = []
    for line in lines:
        parts = line.split()
        if len(parts) == 3:
            reported.append((int(parts[0]), int(parts[1]), int(parts[2])))
    return reported


def first_report(proc: subprocess.Popen) -> str:
    """Waits for the writer's first acknowledged record (the open can take a while on a loaded
    machine), so that the kill lands while it appends."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip(), f"the writer exited ({proc.wait()}) before its first append returned"
    return line


def kill_and_collect(proc: subprocess.Popen, first: str = "") -> list[tuple[int, int, int]]:
    """SIGKILL, then the records the writer reported (complete lines only)."""
    proc.send_signal(signal.SIGKILL)
    # Read through the text wrapper that `first_report` read from: `communicate()` with a
    # timeout reads the pipe's fd directly and would lose the lines the wrapper buffered (and
    # could start mid-line, where a line's tail can parse as another record).
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return parse((first + out).split("\n")[:-1])  # the last piece may be cut mid-line


def run_to_done_and_kill(proc: subprocess.Popen) -> list[tuple[int, int, int]]:
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == "done":
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=30)
            return parse(lines)
        lines.append(line)
    raise AssertionError("writer ended without finishing")


def check_log(dirs: str, reported: list[tuple[int, int, int]], acknowledged: int = 0) -> None:
    """Reads back ``reported``; the log holds at least ``acknowledged`` records (all of them by
    default) and ends at a record boundary."""
    with CommitLog(dirs, segment_size=SEGMENT, max_message_size=MAX_SIZE) as log:
        for i, off, size in reported:
            assert bytes(log.read(off)) == body(i, size), f"record {i} at {off}"
        # The log ends at a record boundary: walking next_offset lands exactly on max_offset.
        last = None
        count = 0
        for off, _ in log.scan():
            last = off
            count += 1
        assert count >= max(acknowledged, len(reported))
        if last is not None:
            assert log.read_record(last).next_offset == log.max_offset
        # Appends continue.
        off = log.append(b"after the crash")
        assert bytes(log.read(off)) == b"after the crash"


@pytest.mark.parametrize("flush", ["async", "sync", "none"])
def test_sigkill_mid_append_keeps_every_acknowledged_record(tmp_path, flush):
    dirs = dirs_of(tmp_path)
    rng = random.Random(flush)
    survivors: list[tuple[int, int, int]] = []
    for seed in range(1, ROUNDS + 1):
        proc = run_writer(dirs, flush, seed)
        first = first_report(proc)
        time.sleep(0.05 + rng.random() * 0.3)
        reported = kill_and_collect(proc, first)
        assert reported, "the writer reported nothing before the kill"
        survivors += reported
        # Each round reads back what it was told, and the last round everything: a recovery that
        # cut an earlier record moves the end back under it, and the records appended since
        # overwrite it, which the last round's full read sees.
        check_log(dirs, survivors if seed == ROUNDS else reported, len(survivors))
    used = {Path(d).name for d in dirs.split(os.pathsep) if any(Path(d).iterdir())}
    assert len(used) == 3


def test_corrupt_unflushed_tail_is_cut_and_never_returns(tmp_path):
    dirs = dirs_of(tmp_path)
    proc = run_writer(dirs, "none", seed=7, count=400)
    reported = run_to_done_and_kill(proc)
    assert len(reported) == 400

    # A record near the tail whose two successors sit right after it in the same segment.
    k = next(
        k
        for k in range(len(reported) - 3, 0, -1)
        if reported[k + 1][1] == reported[k][1] + HEADER_LEN + reported[k][2]
        and reported[k + 2][1] == reported[k + 1][1] + HEADER_LEN + reported[k + 1][2]
    )
    _, off_k, size_k = reported[k]
    with CommitLog(dirs, segment_size=SEGMENT, read_only=True) as ro:
        seg = next(s for s in ro.segments() if s.start_offset <= off_k < s.start_offset + s.size)
        assert ro.flushed_offset <= off_k, "the tail must be above the flushed offset"
    with open(seg.path, "r+b") as f:
        f.seek(off_k - seg.start_offset + HEADER_LEN // 2)  # inside the header
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))

    with CommitLog(dirs, segment_size=SEGMENT, flush="none") as log:
        assert log.max_offset == off_k
        for i, off, size in reported[:k]:
            assert bytes(log.read(off)) == body(i, size)
        with pytest.raises(OffsetOutOfRangeError):
            log.read(off_k)

    # A record of the same size goes where the cut one was; kill again before any flush.
    script = textwrap.dedent(
        f"""
        import sys, time
        from rmqlog import CommitLog
        log = CommitLog({dirs!r}, segment_size={SEGMENT}, flush="none")
        print(log.append(b"n" * {size_k}), flush=True)
        time.sleep(3600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert int(proc.stdout.readline()) == off_k
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)

    with CommitLog(dirs, segment_size=SEGMENT) as log:
        # The old records k+1, k+2 were zeroed: the new record ends the log exactly where k+1 was.
        assert log.max_offset == reported[k + 1][1]
        assert bytes(log.read(off_k)) == b"n" * size_k
        with pytest.raises(OffsetOutOfRangeError):
            log.read(reported[k + 1][1])
        for i, off, size in reported[:k]:
            assert bytes(log.read(off)) == body(i, size)


def _kernel_at_least(major: int, minor: int) -> bool:
    m = re.match(r"(\d+)\.(\d+)", platform.release())
    return bool(m) and (int(m[1]), int(m[2])) >= (major, minor)


@pytest.mark.skipif(
    not _kernel_at_least(6, 8), reason="the recovery point needs unique mount ids (Linux 6.8+)"
)
def test_reopen_after_a_crash_starts_at_this_boots_recovery_point(tmp_path):
    """flush="none" never syncs, so flushed_offset stays 0; the reopen still scans only from the
    last roll (rmqlog.tail): the page cache kept what the killed writer copied into its maps."""
    dirs = dirs_of(tmp_path)
    reported = run_to_done_and_kill(run_writer(dirs, "none", 3, count=3000))
    script = textwrap.dedent(
        f"""
        import logging, sys
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
        from rmqlog import CommitLog
        opts = dict(segment_size={SEGMENT}, max_message_size={MAX_SIZE}, flush="none")
        with CommitLog({dirs!r}, **opts) as log:
            print(len(log.segments()), log.segments()[-1].start_offset, log.flushed_offset)
        """
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    nsegs, last_start, flushed = map(int, r.stdout.split())
    assert nsegs >= 4 and last_start > 0
    assert flushed == 0, "flush='none': nothing was synced, not even by the reopen"
    line = [x for x in r.stderr.splitlines() if "recovered the log end" in x][-1]
    assert "this boot's recovery point" in line, line
    m = re.search(r"scanned from (\d+)", line)
    assert m and int(m[1]) == last_start, line
    check_log(dirs, reported)
