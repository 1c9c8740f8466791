"""Waiting for records across real processes: followers that block in ``wait()`` or follow the
log with ``scan(follow=True)`` / ``scan_batches(follow=True)`` while a writer in another process
appends, rolls, truncates and dies (docs/producers-consumers.md)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from _procs import sleeps_in_futex

from rmqlog import CommitLog

SEGMENT = 64 * 1024

# A follower child: follows the store from offset 0 with a scan of `kind` and prints one JSON
# line per record (offset, length, first 8 bytes) until the record STOP, then "end". The idle
# timeout only bounds a failing test.
STOP = b"STOP"
FOLLOWER = """
import json, sys
from rmqlog import CommitLog
dirs, kind = sys.argv[1], sys.argv[2]
log = CommitLog(dirs, read_only=True)
print("ready", flush=True)
def records():
    if kind == "batches":
        for b in log.scan_batches(0, follow=True, timeout=60.0, body="binary"):
            yield from zip(b.column("offset").to_pylist(), b.column("body").to_pylist())
    else:
        for off, body in log.scan(0, follow=True, timeout=60.0):
            yield off, bytes(body)
for off, body in records():
    if body == b"STOP":
        break
    print(json.dumps([off, len(body), body[:8].hex()]), flush=True)
print("end", flush=True)
"""


def child(script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def expect_line(proc: subprocess.Popen, want: str) -> None:
    line = proc.stdout.readline().strip()
    assert line == want, (line, proc.stderr.read() if proc.poll() is not None else "")


def body(i: int) -> bytes:
    size = (i * 7919) % 2048
    return (i.to_bytes(8, "little") * (size // 8 + 1))[: max(size, 8)]


def test_followers_in_other_processes_see_every_record_once_in_order(tmp_path):
    dirs = os.pathsep.join(str(tmp_path / f"d{i}") for i in range(2))
    CommitLog(dirs, segment_size=SEGMENT).close()
    kinds = ["records", "records", "batches"]
    followers = [child(FOLLOWER, dirs, kind) for kind in kinds]
    try:
        for f in followers:
            expect_line(f, "ready")
        written = []
        with CommitLog(dirs, segment_size=SEGMENT) as log:
            i = 0
            while i < 6000:
                if i % 3:
                    written.append((log.append(body(i)), body(i)))
                    i += 1
                else:
                    batch = [body(j) for j in range(i, i + 7)]
                    written += zip(log.append_batch(batch), batch, strict=True)
                    i += 7
            assert len(log.segments()) > 20, "the writer rolled many times"
            log.append(STOP)
            want = [[off, len(b), b[:8].hex()] for off, b in written]
            for f, kind in zip(followers, kinds, strict=True):
                out, err = f.communicate(timeout=120)
                lines = out.splitlines()
                assert lines[-1] == "end", err
                got = [json.loads(line) for line in lines[:-1]]
                assert got == want, f"{kind}: {len(got)} records, {len(want)} written"
    finally:
        for f in followers:
            f.kill()
            f.wait()


WAITER = """
import os, resource, sys, time
from rmqlog import CommitLog
log = CommitLog(sys.argv[1], read_only=True)
end = log.max_offset
print("ready", flush=True)
before = resource.getrusage(resource.RUSAGE_SELF)
now = log.wait(end)  # no timeout: woken by the append alone
after = resource.getrusage(resource.RUSAGE_SELF)
cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
print(now > end, bytes(log.read(end)).decode(), round(cpu, 4), flush=True)
"""


def test_a_waiting_follower_uses_no_cpu_and_wakes_for_the_append(tmp_path):
    d = str(tmp_path / "d")
    with CommitLog(d, segment_size=SEGMENT) as log:
        log.append(b"first")
        w = child(WAITER, d)
        try:
            expect_line(w, "ready")
            time.sleep(2.0)  # the follower sleeps in the kernel meanwhile
            log.append(b"wake")
            out, err = w.communicate(timeout=30)
        finally:
            w.kill()
            w.wait()
    passed, text, cpu = out.split()
    assert (passed, text) == ("True", "wake"), err
    assert float(cpu) < 0.05, f"{cpu} s of CPU in 2 s of waiting"


INTERRUPTED = """
import sys
from rmqlog import CommitLog
if sys.argv[2] == "batches":
    import pyarrow  # noqa: F401  (loaded before "ready": the signal is for the wait)
log = CommitLog(sys.argv[1], read_only=True)
try:  # from "ready" on: a SIGINT the parent sends once it sees a futex sleep lands in here
    print("ready", flush=True)
    if sys.argv[2] == "wait":
        log.wait(log.max_offset)
    elif sys.argv[2] == "scan":
        for _ in log.scan(log.max_offset, follow=True):
            pass
    else:
        for _ in log.scan_batches(log.max_offset, follow=True):
            pass
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


@pytest.mark.parametrize("how", ["wait", "scan", "batches"])
def test_ctrl_c_interrupts_a_waiting_follower(tmp_path, how):
    if os.uname().machine != "x86_64":
        pytest.skip("reads the x86-64 system call number from /proc/PID/syscall")
    d = str(tmp_path / "d")
    with CommitLog(d, segment_size=SEGMENT) as log:
        log.append(b"x")
        w = child(INTERRUPTED, d, how)
        try:
            expect_line(w, "ready")
            deadline = time.monotonic() + 30
            asleep = 0  # consecutive samples: a wait for the GIL is a futex sleep too, a short one
            while asleep < 5:  # into the wait, asleep in the kernel for 100 ms and more
                assert time.monotonic() < deadline, "the child never went to sleep"
                asleep = asleep + 1 if sleeps_in_futex(w.pid) else 0
                time.sleep(0.02)
            w.send_signal(signal.SIGINT)
            out, err = w.communicate(timeout=30)
        finally:
            w.kill()
            w.wait()
    assert out.strip() == "interrupted", err
    assert w.returncode == 0, err


WRITER = """
import sys
from rmqlog import CommitLog
log = CommitLog(sys.argv[1], segment_size=65536, flush="none")
for i in range(int(sys.argv[2])):
    print(log.append(b"before-%d" % i), flush=True)
print("done", flush=True)
sys.stdin.read()  # until killed
"""

FOLLOW_ACROSS_WRITERS = """
import sys
from rmqlog import CommitLog
log = CommitLog(sys.argv[1], read_only=True)
print("ready", flush=True)
for off, body in log.scan(0, follow=True, timeout=5.0):
    print(off, bytes(body).decode(), flush=True)
    if bytes(body) == b"after":
        break
"""


def test_a_follower_outlives_a_killed_writer_and_follows_the_next(tmp_path):
    d = str(tmp_path / "d")
    CommitLog(d, segment_size=SEGMENT).close()
    writer = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(WRITER), d, "3000"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    follower = child(FOLLOW_ACROSS_WRITERS, d)
    try:
        expect_line(follower, "ready")
        acked = []
        for line in writer.stdout:
            if line.strip() == "done":
                break
            acked.append(int(line))
        writer.send_signal(signal.SIGKILL)  # no close, no flush: a process crash
        writer.wait()
        seen = [follower.stdout.readline().split() for _ in acked]
        assert [int(off) for off, _ in seen] == acked
        assert [text for _, text in seen] == [f"before-{i}" for i in range(len(acked))]
        # The follower still waits; the next writer recovers the store and appends.
        with CommitLog(d, segment_size=SEGMENT) as log:
            off = log.append(b"after")
            out, err = follower.communicate(timeout=30)
        assert out.split() == [str(off), "after"], err
    finally:
        for p in (writer, follower):
            p.kill()
            p.wait()


def test_a_follower_keeps_following_through_truncations_and_moves(tmp_path):
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    CommitLog(dirs, segment_size=SEGMENT).close()
    follower = child(FOLLOWER, os.pathsep.join(dirs), "records")
    try:
        expect_line(follower, "ready")
        with CommitLog(dirs, segment_size=SEGMENT) as log:
            offs = [log.append(body(i)) for i in range(400)]
            first = [json.loads(follower.stdout.readline()) for _ in offs]
            assert [o for o, _, _ in first] == offs
            sealed = [s for s in log.segments() if s.sealed]
            other = next(d for d in dirs if not sealed[-1].path.startswith(d))
            log.move_segment(sealed[-1].start_offset, other)
            head = log.truncate_before(sealed[-2].start_offset + sealed[-2].size)
            more = [log.append(body(i)) for i in range(400, 800)]
            later = [json.loads(follower.stdout.readline()) for _ in more]
            assert [o for o, _, _ in later] == more
            assert [h for _, _, h in later] == [body(i)[:8].hex() for i in range(400, 800)]
            assert head > offs[0]
            log.append(STOP)
        out, err = follower.communicate(timeout=60)
        assert out.strip() == "end", err
    finally:
        follower.kill()
        follower.wait()
