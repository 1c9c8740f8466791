"""Power loss on faultfs in lazy mode (``tests/faultfs.py``): what a writer wrote but did not
sync lives only in the FUSE daemon's memory, and a power cut drops it, together with everything
the kernel writes back afterwards (the dirty pages of the killed writer's maps). The mount is
then replaced by a fresh one over the same backing directory, so the kernel page cache of the
old one is gone too: only what an fsync/fdatasync/msync made durable is left.

A writer in a child process appends and reports every acknowledged offset (and in async mode
every ``flushed_offset`` that ``flush()`` returned) through a pipe; the parent cuts the power
while it is still appending, kills it and reopens the log. docs/recovery.md: in
``flush="sync"`` every acknowledged record survives; in ``"async"`` every record below the last
reported ``flushed_offset``; the survivors are always a prefix. The control: with
``flush="none"`` and no flush call, records really are lost, so these tests can see a missing
sync. Several cuts in a row: survivors of an earlier cut must survive the later ones.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _writer import body

SEG = 256 * 1024
RUN = 0.5  # seconds of appending before a cut, after the first acknowledgement
CAP = 5_000  # records per round at most (the none control gets there first)
ROUNDS = {"sync": 3, "async": 3, "none": 2}

WRITER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, sys.argv[5])
    from _writer import body
    from rmqlog import CommitLog
    dirs, flush, first, cap, _, seg = sys.argv[1:]
    first, cap, seg = int(first), int(cap), int(seg)
    log = CommitLog(dirs, segment_size=seg, flush=flush, flush_interval_ms=100, clean_interval_ms=0)
    out = sys.stdout
    for n in range(cap):
        i = first + n
        size = 20_000 if i % 29 == 0 else 50 + (i * 7919) % 3000  # 1 in 29: the direct path
        out.write(f"{i} {log.append(body(i, size))} {size}\\n")
        if flush == "async" and n % 100 == 99:
            out.write(f"f {log.flush()}\\n")
        out.flush()
    out.write("done\\n")
    out.flush()
    time.sleep(3600)
    """
)


def run_round(faultfs, dirs: str, flush: str, first: int) -> tuple[list[tuple[int, int, int]], int]:
    """Starts a writer, lets it append, cuts the power while it does, kills it, remounts.
    Returns the acknowledged records ``(index, offset, size)`` and the last flushed_offset it
    reported. Only lines read before the cut count: each was written after its append
    returned, so before the cut."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            WRITER,
            dirs,
            flush,
            str(first),
            str(CAP),
            str(Path(__file__).parent),
            str(SEG),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    deadline = None
    # After RUN seconds, a random number of acknowledgements more: the cut falls anywhere
    # between two flushes, not just after a slow one.
    extra = random.Random(f"{flush} {first}").randrange(100)
    try:
        while True:
            line = proc.stdout.readline()
            if not line:
                pytest.fail(f"the writer died (exit status {proc.wait()})")
            if line == "done\n":
                break
            lines.append(line)
            if deadline is None:
                deadline = time.monotonic() + RUN
            elif time.monotonic() >= deadline:
                if extra == 0:
                    break
                extra -= 1
    finally:
        faultfs.power_cut(proc)  # the power goes while the writer appends
        proc.stdout.close()
    acked, flushed = [], 0
    for line in lines:
        parts = line.split()
        if parts[0] == "f":
            flushed = max(flushed, int(parts[1]))
        else:
            acked.append((int(parts[0]), int(parts[1]), int(parts[2])))
    return acked, flushed


@pytest.mark.parametrize("flush", ["sync", "async", "none"])
def test_power_cut_keeps_what_was_acknowledged(faultfs, flush):
    faultfs.lazy()
    dirs = os.pathsep.join(str(faultfs.path / d) for d in ("d0", "d1"))
    kept: dict[int, bytes] = {}  # offset -> body of every record known to have survived
    lost_total = 0
    for cut in range(ROUNDS[flush]):
        acked, flushed = run_round(faultfs, dirs, flush, first=1_000_000 * (cut + 1))
        assert len(acked) > 20, f"cut {cut}: the writer barely ran ({len(acked)} appends)"

        log = faultfs.log(dirs, segment_size=SEG, clean_interval_ms=0)
        present = {off: bytes(view) for off, view in log.scan()}
        for off, b in kept.items():
            assert present.get(off) == b, (
                f"cut {cut}: a survivor of an earlier cut at {off} is gone"
            )
        alive = []
        for i, off, size in acked:
            survived = present.get(off) == body(i, size)
            if flush == "sync":
                assert survived, f"cut {cut}: acknowledged record {i} at {off} is lost"
            elif flush == "async" and off < flushed:
                assert survived, (
                    f"cut {cut}: record {i} at {off} is lost, below the flushed_offset {flushed} "
                    "flush() had returned"
                )
            alive.append(survived)
        # Survivors are a prefix: no record is missing before a surviving one.
        if False in alive:
            first_lost = alive.index(False)
            assert not any(alive[first_lost:]), f"cut {cut}: a record in the middle is lost"
        lost_total += alive.count(False)
        assert log.verify() == []
        kept = present
        log.close()
    if flush == "none":
        # The control: nothing synced the records, and the cut took them.
        assert lost_total > 0, "flush='none' lost nothing: the power cut drops nothing"
