"""Power loss, simulated on a real filesystem: the log lives on ext4 in a loop-mounted image; the
"power cut" is a copy of the image taken while the writer is frozen (SIGSTOP), i.e. exactly the
blocks that reached the device. Data still only in the page cache is not in the copy, as after a
real power loss. The copy is then mounted (ext4 replays its journal) and the log reopened.

In flush="sync" every record whose append returned must survive; in "async" every record below
the flushed offset the writer last reported, and the survivors must be a prefix of what was
written (never a record missing in the middle). flush="none" is the control: nothing is synced,
so every cut must lose acknowledged records; a cut that loses none did not simulate a power loss
(the copy saw data that had not been synced), and the test fails. Needs root (mount, losetup);
skipped otherwise.
"""

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rmqlog import CommitLog

IMAGE_MB = 128
ROUND_RECORDS = 30_000  # about 20 MB: four rounds fit in the image whatever the writer's speed


def body(i: int) -> bytes:
    return hashlib.sha256(b"%d" % i).digest() * (1 + i % 40)


def sh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True)


class Disk:
    """An ext4 image loop-mounted at ``mnt``; ``power_cut()`` replaces it with the blocks that had
    reached the device and mounts that at the same place, as a reboot after a power loss would."""

    def __init__(self, tmp_path: Path):
        self.image = tmp_path / "disk.img"
        self.mnt = tmp_path / "mnt"
        self.mnt.mkdir()
        self.dev = None
        sh("truncate", "-s", f"{IMAGE_MB}M", str(self.image))
        if sh("mkfs.ext4", "-q", "-F", str(self.image)).returncode != 0:
            pytest.skip("mkfs.ext4 failed here")
        self.mount()

    def mount(self) -> None:
        sh("e2fsck", "-fy", str(self.image))  # replays the journal (exit 1 means "fixed")
        loop = sh("losetup", "--find", "--show", str(self.image))
        if loop.returncode != 0:
            pytest.skip(f"no loop device here: {loop.stderr.strip()}")
        self.dev = loop.stdout.strip()
        sh("blockdev", "--setrw", self.dev)
        if sh("mount", self.dev, str(self.mnt)).returncode != 0:
            self.unmount()
            pytest.skip("mounting a loop device is not permitted here")

    def unmount(self) -> None:
        sh("umount", str(self.mnt))
        if self.dev:
            sh("losetup", "-d", self.dev)
        self.dev = None

    def power_cut(self, frozen: subprocess.Popen) -> None:
        """``frozen`` is SIGSTOPped: copy the device now, kill it, boot from the copy."""
        copy = self.image.with_suffix(".cut")
        shutil.copyfile(self.image, copy)
        frozen.send_signal(signal.SIGKILL)
        frozen.send_signal(signal.SIGCONT)
        frozen.wait(timeout=30)
        self.unmount()
        copy.replace(self.image)
        self.mount()


@pytest.fixture
def disk(tmp_path):
    if os.geteuid() != 0 or not shutil.which("mkfs.ext4") or not shutil.which("losetup"):
        pytest.skip("power-loss simulation needs root, mkfs.ext4 and losetup (a loop mount)")
    d = Disk(tmp_path)
    try:
        yield d
    finally:
        d.unmount()


WRITER = textwrap.dedent(
    """
    import hashlib, sys, time
    from rmqlog import CommitLog
    store, flush, first, cap = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    log = CommitLog(store, segment_size=1 << 20, flush=flush, flush_interval_ms=20,
                    clean_interval_ms=0)
    i = first
    while i < first + cap:
        b = hashlib.sha256(b"%d" % i).digest() * (1 + i % 40)
        off = log.append(b)
        print(i, off, log.flushed_offset, flush=True)
        i += 1
    print("done", flush=True)  # the image has room for a few rounds only; wait for the cut
    while True:
        time.sleep(1)
    """
)


@pytest.mark.parametrize("flush", ["sync", "async", "none"])
def test_power_loss_keeps_what_was_acknowledged(disk, flush):
    store = disk.mnt / "store"
    kept: dict[int, bytes] = {}  # offset -> body of every record known to have survived
    for cut in range(4):
        first = 1_000_000 * (cut + 1)
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(store), flush, str(first), str(ROUND_RECORDS)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        lines = []
        deadline = time.monotonic() + 0.4 + 0.25 * cut
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line == "done\n":
                break
            lines.append(line)
        proc.send_signal(signal.SIGSTOP)  # frozen: nothing more reaches the page cache
        disk.power_cut(proc)
        reported = [tuple(map(int, ln.split())) for ln in lines if ln.endswith("\n")]
        assert len(reported) > 10, "the writer barely ran"

        with CommitLog(store, segment_size=1 << 20, clean_interval_ms=0) as log:
            present = {off: bytes(view) for off, view in log.scan()}
            for off, b in kept.items():
                assert present.get(off) == b, f"cut {cut}: an earlier survivor at {off} is gone"
            durable_below = reported[-1][2]  # flushed_offset at the last acknowledged append
            alive = []
            for i, off, _ in reported:
                if flush == "sync" or off < durable_below:
                    assert present.get(off) == body(i), f"cut {cut}: record {i} at {off} lost"
                alive.append(present.get(off) == body(i))
            if flush == "none":
                # The control: with nothing synced, the cut must lose what the writer wrote.
                assert False in alive, f"cut {cut}: no record lost although none was synced"
            # Survivors are a prefix: no record is missing before a surviving one.
            if False in alive:
                assert not any(alive[alive.index(False) :]), "a record in the middle is lost"
            assert log.verify() == []
            kept = present
