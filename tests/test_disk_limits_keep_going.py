"""At the disk limits appends keep going (issue 33, item 6): segments the cleaning deletes are
unmapped as soon as no view holds them, so their blocks free at once, in a process that appends
and reads, in one that waits for records, and with shared writers, which clean inline at a roll as
the exclusive writer does.

Each test sends three disks' worth of records through a small tmpfs at ``force_clean_ratio``,
each append tried again while the disk refuses it; before, the first reads (or polls) pinned the
deleted segments' maps and every append after the disk filled raised ``DiskFullError`` until a
manual ``clean()``. The counts asserted are of refusals, never of speed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from rmqlog import CommitLog, DiskFullError

KIB = 1024
SEG = 512 * KIB
BODY = 2000


def _deleted_maps() -> int:
    """Maps of this process onto deleted files."""
    with open("/proc/self/maps") as f:
        return sum("(deleted)" in line for line in f)


def _append_n(logs: list[CommitLog], n: int, read_every: int = 0) -> int:
    """Appends ``n`` records, in turn through each of ``logs``, each tried again (after 5 ms,
    through the next open: as opens that all append do) while the disk refuses it, at most 200
    times; reads a record back every ``read_every`` through the open that appended it (the view
    dropped at once). Returns how many ``DiskFullError`` the appends met."""
    errors = 0
    body = os.urandom(BODY)
    for i in range(n):
        for attempt in range(200):
            log = logs[(i + attempt) % len(logs)]
            try:
                offset = log.append(body)
                break
            except DiskFullError:
                errors += 1
                time.sleep(0.005)
        else:
            raise AssertionError(f"append {i} of {n}: the disk never freed ({errors} refusals)")
        if read_every and i % read_every == 0:
            assert bytes(log.read(offset)) == body
    return errors


def _disk_turnover() -> int:
    """Records that go through the 8 MiB disk three times."""
    return 3 * (8 << 20) // (BODY + 64)


def test_a_process_that_reads_keeps_appending_at_force_clean_ratio(mnt):
    already = _deleted_maps()  # left by earlier tests in this process
    disk = mnt.tmpfs("disk", 8 << 20)
    log = mnt.log([disk / "s"], segment_size=SEG, force_clean_ratio=0.8)
    n = _disk_turnover()
    errors = _append_n([log], n, read_every=200)
    assert errors < n // 100, f"{errors} DiskFullError for {n} appends"
    assert _deleted_maps() - already <= 2, "deleted segments stay mapped"
    assert log.min_offset > 0, "the cleaning deleted the head"


def test_shared_writers_clean_inline_at_the_roll(mnt):
    disk = mnt.tmpfs("disk", 8 << 20)
    opts = dict(segment_size=SEG, force_clean_ratio=0.8, exclusive=False, clean_interval_ms=0)
    log = mnt.log([disk / "s"], **opts)
    other = mnt.log([disk / "s"], **opts)
    n = _disk_turnover()
    errors = _append_n([log, other], n, read_every=101)
    assert errors < n // 100, f"{errors} DiskFullError for {n} appends"
    assert log.min_offset > 0


_CONSUMER = """
import sys
from rmqlog import CommitLog
log = CommitLog(sys.argv[1], read_only=True)
c = log.consumer("waiter", exclusive=True, on_loss="skip")
got = 0
print("ready", flush=True)
while True:
    records = c.poll(1000, timeout=0.2)
    got += len(records)
    del records
    c.commit()
"""


def test_a_consumer_waiting_in_another_process_pins_nothing(mnt, tmp_path):
    disk = mnt.tmpfs("disk", 8 << 20)
    log = mnt.log([disk / "s"], segment_size=SEG, force_clean_ratio=0.8, retain_unconsumed=False)
    log.append(b"first")
    log.flush()
    script = tmp_path / "consumer.py"
    script.write_text(_CONSUMER)
    child = subprocess.Popen(
        [sys.executable, str(script), str(disk / "s")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        n = _disk_turnover()
        errors = _append_n([log], n)
        assert errors < n // 100, f"{errors} DiskFullError for {n} appends: blocks pinned"
    finally:
        child.kill()
        child.wait()
