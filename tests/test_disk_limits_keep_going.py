"""At the disk limits appends keep going (issue 33, item 6): segments the cleaning deletes are
unmapped as soon as no view holds them, so their blocks free at once, in a process that appends
and reads, in one that waits for records, and with shared writers, which clean inline at a roll as
the exclusive writer does.

Each test fills a small tmpfs to ``force_clean_ratio`` many times over; before, the first reads
(or polls) pinned the deleted segments' maps and every append after the disk filled raised
``DiskFullError`` until a manual ``clean()``.
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


def _append_for(log: CommitLog, seconds: float, read_every: int = 0) -> tuple[int, int]:
    """Appends for ``seconds``; reads a record back every ``read_every`` (the view dropped at
    once). Returns (appended, DiskFullError count)."""
    n = errors = 0
    body = os.urandom(BODY)
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        try:
            offset = log.append(body)
            n += 1
            if read_every and n % read_every == 0:
                assert bytes(log.read(offset)) == body
        except DiskFullError:
            errors += 1
            time.sleep(0.005)
    return n, errors


def _disk_turnover() -> int:
    """How many records fill an 8 MiB disk twice."""
    return 2 * (8 << 20) // (BODY + 64)


def test_a_process_that_reads_keeps_appending_at_force_clean_ratio(mnt):
    disk = mnt.tmpfs("disk", 8 << 20)
    log = mnt.log([disk / "s"], segment_size=SEG, force_clean_ratio=0.8)
    n, errors = _append_for(log, 2.0, read_every=200)
    assert n > _disk_turnover(), f"{n} appends ({errors} DiskFullError): the disk did not free"
    assert errors < n // 20, f"{errors} DiskFullError for {n} appends"
    assert _deleted_maps() <= 2, "deleted segments stay mapped"
    assert log.min_offset > 0, "the cleaning deleted the head"


def test_shared_writers_clean_inline_at_the_roll(mnt):
    disk = mnt.tmpfs("disk", 8 << 20)
    opts = dict(segment_size=SEG, force_clean_ratio=0.8, exclusive=False, clean_interval_ms=0)
    log = mnt.log([disk / "s"], **opts)
    other = mnt.log([disk / "s"], **opts)
    n, errors = _append_for(log, 1.0, read_every=100)
    m, errors2 = _append_for(other, 1.0, read_every=100)
    assert n + m > _disk_turnover(), f"{n}+{m} appends: the disk did not free"
    assert errors + errors2 < (n + m) // 20, f"{errors}+{errors2} DiskFullError"
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
        n, errors = _append_for(log, 2.0)
        assert n > _disk_turnover(), f"{n} appends ({errors} DiskFullError): blocks pinned"
        assert errors < n // 20, f"{errors} DiskFullError for {n} appends"
    finally:
        child.kill()
        child.wait()
