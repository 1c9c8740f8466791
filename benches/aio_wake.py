"""How soon an awaiting coroutine wakes after an append in another process: ``await
log.wait_async(end)`` against the blocking ``log.wait(end)``, measured as ``rows_wait.py`` measures
the blocking one. The numbers in docs/producers-consumers.md ("asyncio") come from it:

    .venv/bin/python benches/aio_wake.py [--samples 1000] [--rounds 3]

This process is the writer: it appends one 100 B record every millisecond (its sample number in
the body's first 8 bytes) and notes, in a shared file, the CLOCK_MONOTONIC time at which each
``append`` returned. A follower process (``read_only=True``) waits for the next record, in one
of the modes below, and notes for every record a wake covers the time its wait returned. A
sample is (wake - the return of that record's own ``append``); it may be negative (the follower
is woken from inside the append, as it publishes).

Modes, alternating, ``--rounds`` times each (a burst of other work on a shared machine lands in
one round, not in every round of one mode):

- ``sync``: ``end = log.wait(end)``, the blocking wait (GIL released, the thread in the futex).
- ``async``: ``end = await log.wait_async(end)`` in an event loop: the log's thread sleeps in the
  futex and signals the loop's eventfd; the loop's callback wakes the coroutine, which looks.
- ``async_100``: 100 coroutines ``await log.wait_async(end)`` at once (``asyncio.gather``); the
  sample is the time the last of them returned: the fan-out of one wake to many waiters.
"""

from __future__ import annotations

import argparse
import mmap
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

from rmqlog import CommitLog

BODY = bytes(range(100))

FOLLOWER = """
import asyncio, mmap, os, sys, time
from rmqlog import CommitLog
path, shm, n, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
fd = os.open(shm, os.O_RDWR)
woke = memoryview(mmap.mmap(fd, 16 * n)).cast("q")  # append returns, wakes: n each
log = CommitLog(path, read_only=True)
clock = lambda: time.clock_gettime_ns(time.CLOCK_MONOTONIC)

def note(end, new, t):
    seen = 0
    for _off, body in log.scan(end, new):
        woke[n + int.from_bytes(body[:8], "little")] = t
        seen += 1
    return seen

def blocking():
    end, seen = log.max_offset, 0
    print("ready", flush=True)
    while seen < n:
        new = log.wait(end, timeout=30)
        t = clock()
        if new <= end:
            sys.exit("no record for 30 s")
        seen += note(end, new, t)
        end = new

async def awaiting(k):
    end, seen = log.max_offset, 0
    print("ready", flush=True)
    while seen < n:
        if k == 1:
            new = await log.wait_async(end, timeout=30)
        else:
            new = min(await asyncio.gather(*(log.wait_async(end, timeout=30) for _ in range(k))))
        t = clock()
        if new <= end:
            sys.exit("no record for 30 s")
        seen += note(end, new, t)
        end = new

if mode == "sync":
    blocking()
else:
    asyncio.run(awaiting(1 if mode == "async" else 100))
print("done", flush=True)
"""


def measure(root: str, mode: str, n: int) -> list[int]:
    """The samples of one round, in nanoseconds."""
    d = tempfile.mkdtemp(dir=root)
    path, shm = os.path.join(d, "store"), os.path.join(d, "times")
    with open(shm, "wb") as f:
        f.truncate(16 * n)
    fd = os.open(shm, os.O_RDWR)
    at = memoryview(mmap.mmap(fd, 16 * n)).cast("q")
    os.close(fd)
    with CommitLog(path, segment_size=64 << 20, flush="async") as log:
        follower = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(FOLLOWER), path, shm, str(n), mode],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert follower.stdout is not None
            assert follower.stdout.readline().strip() == "ready"
            time.sleep(0.2)  # into its first wait
            tick = time.monotonic()
            for i in range(n):
                tick += 0.001
                while (left := tick - time.monotonic()) > 0:
                    time.sleep(left if left > 0.0002 else 0)
                log.append(i.to_bytes(8, "little") + BODY[8:])
                at[i] = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            out, _ = follower.communicate(timeout=120)
            assert follower.returncode == 0 and out.split()[-1:] == ["done"], out
        finally:
            follower.kill()
            follower.wait()
    samples = [at[n + i] - at[i] for i in range(n)]
    at.release()
    return samples


def dist(ns: list[int]) -> dict[str, float]:
    us = sorted(x / 1000 for x in ns)

    def pct(p: float) -> float:
        return us[min(len(us) - 1, int(p / 100 * len(us)))]

    return {
        "p50": statistics.median(us),
        "p90": pct(90),
        "p99": pct(99),
        "max": us[-1],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=1000, help="appends per round (1 kHz)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of each mode, alternating")
    p.add_argument("--dir", default=None, help="where the stores go (default: the temp dir)")
    a = p.parse_args()
    modes = ("sync", "async", "async_100")
    rounds: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(dir=a.dir) as root:
        for r in range(a.rounds):
            for m in modes:
                rounds[m].append(dist(measure(root, m, a.samples)))
                print(f"round {r + 1} {m:9}: {rounds[m][-1]}", file=sys.stderr, flush=True)
    load = os.getloadavg()
    print(
        f"\n{a.samples} appends at 1 kHz per round, {a.rounds} rounds per mode; "
        f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"load average {load[0]:.1f} after the run"
    )
    print("\n| mode | p50 (us) | p90 | p99 | max |")
    print("|---|---:|---:|---:|---:|")
    for m in modes:
        med = {k: statistics.median(d[k] for d in rounds[m]) for k in ("p50", "p90", "p99", "max")}
        lo_hi = {
            k: (min(d[k] for d in rounds[m]), max(d[k] for d in rounds[m])) for k in ("p50", "p99")
        }
        print(
            f"| `{m}` | {med['p50']:.1f} ({lo_hi['p50'][0]:.1f}-{lo_hi['p50'][1]:.1f}) "
            f"| {med['p90']:.1f} | {med['p99']:.1f} ({lo_hi['p99'][0]:.1f}-{lo_hi['p99'][1]:.1f}) "
            f"| {med['max']:.0f} |"
        )


if __name__ == "__main__":
    main()
