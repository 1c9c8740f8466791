"""Driving ``tests/faultfs.py`` from tests: start the daemon, mount, inject faults, cut the power.

``FaultFS(base)`` keeps everything under ``base``: the backing directory ``base/backing``, the
mount point ``base/mnt`` (``.path``), the control socket and the daemon's log. ``start()`` mounts
and returns once the kernel serves the mount and the daemon answers; ``close()`` closes the logs
opened with :meth:`FaultFS.log`, unmounts (lazily when still busy, as a last resort) and stops the
daemon, always. The ``faultfs`` fixture in ``conftest.py`` hands one out per test.

:func:`unavailable` says why FUSE tests cannot run here (None when they can); when
``fusermount3`` is missing and this process is root it first installs Debian's ``fuse3`` with
``apt-get``.
"""

from __future__ import annotations

import contextlib
import fnmatch
import gc
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from rmqlog import CommitLog

DAEMON = Path(__file__).with_name("faultfs.py")
MOUNT_TIMEOUT = 20.0

_probe: list[str | None] = []


def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(
        args, capture_output=True, text=True, check=False, env=env, timeout=timeout
    )


def _install_fuse3() -> str | None:
    """Installs Debian's fuse3 (fusermount3, libfuse3); None on success, else why not."""
    if os.geteuid() != 0:
        return "fusermount3 is missing and installing fuse3 needs root"
    if shutil.which("apt-get") is None:
        return "fusermount3 is missing and there is no apt-get to install fuse3"
    r = _run("apt-get", "install", "-y", "-q", "fuse3")
    if r.returncode != 0:
        _run("apt-get", "update", "-q")
        r = _run("apt-get", "install", "-y", "-q", "fuse3")
    if r.returncode != 0 or shutil.which("fusermount3") is None:
        lines = (r.stderr or r.stdout).strip().splitlines()
        return f"`apt-get install -y fuse3` failed: {lines[-1] if lines else r.returncode}"
    return None


def unavailable(base: Path) -> str | None:
    """None when FUSE mounts work here, else the reason (decided once per session): installs
    fuse3 where ``fusermount3`` is missing, checks that ``mfusepy`` loads libfuse 3, and mounts
    a probe. A probe that fails for a reason other than a missing permission or device raises:
    that is a bug of the daemon, not of the machine."""
    if not _probe:
        _probe.append(_check(base))
    return _probe[0]


def _check(base: Path) -> str | None:
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist (no FUSE in this kernel or container)"
    if shutil.which("fusermount3") is None:
        why = _install_fuse3()
        if why:
            return why
    env = dict(os.environ, FUSE_LIBRARY_NAME="fuse3")
    r = subprocess.run(
        [sys.executable, "-c", "import mfusepy"], capture_output=True, text=True, env=env
    )
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines()
        return (
            "mfusepy cannot be imported (pip install -e '.[test]'; it needs libfuse3): "
            f"{lines[-1] if lines else r.returncode}"
        )
    fs = FaultFS(base)
    try:
        fs.start()
    except OSError as e:
        text = str(e)
        if any(
            s in text
            for s in ("not permitted", "Permission denied", "device not found", "No such device")
        ):
            return f"cannot mount a FUSE filesystem here: {text}"
        raise
    finally:
        fs.close()
    return None


def _mounted(path: Path) -> bool:
    target = str(path).replace("\\", "\\134").replace(" ", "\\040")
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


class FaultFS:
    """One faultfs daemon and its mount; see the module docstring of ``tests/faultfs.py`` for
    the model. ``.path`` is the mount point, ``.backing`` the directory behind it."""

    def __init__(self, base: Path) -> None:
        base.mkdir(parents=True, exist_ok=True)
        self.base = base
        self.backing = base / "backing"
        self.path = base / "mnt"
        self.sock = base / "control.sock"
        self.daemon_log = base / "faultfs.log"
        self.backing.mkdir(exist_ok=True)
        self.path.mkdir(exist_ok=True)
        self._proc: subprocess.Popen[bytes] | None = None
        self._conn: Any = None
        self._lazy = False
        self._logs: list[CommitLog] = []

    # -- the daemon ------------------------------------------------------------------------

    def start(self) -> None:
        """Starts the daemon and waits until the mount is served and the control answers."""
        if self._proc is not None:
            raise RuntimeError("faultfs is already running")
        with contextlib.suppress(FileNotFoundError):
            self.sock.unlink()
        with open(self.daemon_log, "ab") as out:
            self._proc = subprocess.Popen(
                [sys.executable, str(DAEMON), str(self.backing), str(self.path), str(self.sock)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, FUSE_LIBRARY_NAME="fuse3"),
            )
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while True:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                raise OSError(f"faultfs exited with {code} before mounting: {self.log_tail()}")
            if _mounted(self.path) and self.sock.exists():
                try:
                    self._call(cmd="ping")
                    os.stat(self.path)  # the kernel's INIT is answered
                    break
                except OSError:
                    pass
            if time.monotonic() > deadline:
                self._stop_daemon()
                raise OSError(f"faultfs did not mount within {MOUNT_TIMEOUT} s: {self.log_tail()}")
            time.sleep(0.02)
        if self._lazy:
            self._call(cmd="lazy", on=True)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.daemon_log.read_text(errors="replace")
        except OSError:
            return "(no daemon log)"
        return "\n".join(text.strip().splitlines()[-lines:]) or "(daemon log empty)"

    def _call(self, **req: Any) -> dict[str, Any]:
        if self._conn is None:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(30)
            s.connect(str(self.sock))
            self._conn = s.makefile("rwb")
            s.close()  # the file object keeps the connection
        try:
            self._conn.write(json.dumps(req).encode() + b"\n")
            self._conn.flush()
            line = self._conn.readline()
        except OSError:
            self._drop_conn()
            raise
        if not line:
            self._drop_conn()
            raise OSError(f"faultfs closed the control connection: {self.log_tail()}")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise RuntimeError(f"faultfs refused {req}: {reply.get('error')}")
        return reply

    def _drop_conn(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
            self._conn = None

    def _unmount(self) -> bool:
        """Unmounts, waiting a little for users to go; as a last resort detaches the mount
        (``umount -l``: its daemon serves it until the last user goes). False if it had to."""
        gc.collect()  # memoryviews over maps of files there
        tool = ["fusermount3", "-u"] if shutil.which("fusermount3") else ["umount"]
        deadline = time.monotonic() + 3
        while _mounted(self.path):
            if _run(*tool, str(self.path), timeout=60).returncode == 0:
                break
            if time.monotonic() > deadline:
                _run("umount", "-l", str(self.path), timeout=60)
                return False
            time.sleep(0.1)
        return True

    def _stop_daemon(self, detached: bool = False) -> None:
        """Waits for the daemon to exit (it does once the kernel lets the mount go); stops it
        otherwise, unless the mount was ``detached`` while in use: killing the daemon then would
        make the last users' maps fault (SIGBUS), so it is left to exit when they go."""
        self._drop_conn()
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.wait(timeout=1 if detached else 5)
            return
        except subprocess.TimeoutExpired:
            pass
        if detached:
            warnings.warn(
                f"faultfs at {self.path} was detached while in use; its daemon (pid {proc.pid}) "
                "exits when the last user goes",
                stacklevel=3,
            )
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    # -- the API for tests -----------------------------------------------------------------

    def fail(
        self, op: str, glob: str = "*", errno: int | str = "EIO", times: int | None = None
    ) -> int:
        """Makes ``op`` fail with ``errno`` on paths matching ``glob`` (relative to the mount
        point, with a leading ``/``), the next ``times`` times or until :meth:`clear`."""
        return self._call(cmd="fail", op=op, glob=glob, errno=errno, times=times)["rule"]

    def clear(self) -> None:
        """Removes every fault rule."""
        self._call(cmd="clear")

    def stats(self, reset: bool = False) -> dict[str, Any]:
        """``{"ops": {op: {path: n}}, "faults": {...}, "pending": {path: bytes}, ...}``."""
        return self._call(cmd="stats", reset=reset)

    def count(self, op: str, glob: str = "*", kind: str = "ops") -> int:
        """How many ``op`` (``kind="faults"``: failures injected) on paths matching ``glob``."""
        per_path = self.stats()[kind].get(op, {})
        return sum(n for p, n in per_path.items() if fnmatch.fnmatchcase(p, glob))

    def lazy(self, on: bool = True) -> None:
        """Lazy mode: unsynced data lives in the daemon only, until fsync or a power cut. It
        stays on across :meth:`power_cut` and :meth:`remount`."""
        self._call(cmd="lazy", on=on)
        self._lazy = on

    def no_size(self, on: bool = True) -> None:
        """statfs reports no size (every block count zero), as a FUSE filesystem without statfs
        does. Not kept across :meth:`remount`."""
        self._call(cmd="no_size", on=on)

    def cut(self) -> None:
        """The power goes: unsynced data is dropped, later writes and syncs are ignored."""
        self._call(cmd="cut")

    def remount(self) -> None:
        """Closes the logs opened with :meth:`log`, unmounts, and mounts ``backing`` again with
        a new daemon (fault rules and counters start empty; lazy mode is kept)."""
        self._close_logs()
        detached = not self._unmount()
        self._stop_daemon(detached)
        self.start()

    def power_cut(self, *procs: subprocess.Popen[Any]) -> None:
        """A power cut and a reboot: :meth:`cut`, SIGKILL ``procs`` (writers on the mount) and
        reap them, then :meth:`remount`: only what was durable is visible, and the kernel page
        cache of the old mount is gone with it."""
        self.cut()
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait(timeout=30)
        self.remount()

    def log(self, paths: Any, **kwargs: Any) -> CommitLog:
        """Opens a CommitLog that :meth:`remount` and :meth:`close` close first."""
        log = CommitLog(paths, **kwargs)
        self._logs.append(log)
        return log

    def _close_logs(self) -> None:
        for log in reversed(self._logs):
            with contextlib.suppress(Exception):
                log.close()
        self._logs.clear()

    def close(self) -> None:
        """Closes the logs, unmounts and stops the daemon (always; idempotent)."""
        detached = False
        try:
            self._close_logs()
            if _mounted(self.path):
                detached = not self._unmount()
        finally:
            self._stop_daemon(detached)

    def __enter__(self) -> FaultFS:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
