"""Helpers of the tests that run child processes: kill them, wait for a condition, see where a
process sleeps."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import textwrap
import time


def sigkill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def finish(*procs: subprocess.Popen) -> None:
    """Kills what still runs, reaps every process and closes its pipes."""
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
        for f in (p.stdin, p.stdout, p.stderr):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()


def wait_for(pred, timeout: float = 5.0) -> bool:
    """Polls ``pred`` until it holds (events and log records are delivered by other threads);
    whether it did within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def sleeps_in_futex(pid: int) -> bool:
    """Whether the main thread of ``pid`` is blocked in futex(2) (x86-64: system call 202)."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            return f.read().split()[0] == "202"
    except (OSError, IndexError):
        return False


def child(script: str, *args: str) -> subprocess.Popen:
    """``python -c script args...`` with its stdin, stdout and stderr piped (text)."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def expect_line(proc: subprocess.Popen, prefix: str) -> str:
    """The child's next line, which must start with ``prefix``."""
    line = proc.stdout.readline().strip()
    assert line.startswith(prefix), (line, proc.stderr.read() if proc.poll() is not None else "")
    return line
