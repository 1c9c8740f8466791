"""Real, small filesystems for tests: tmpfs mounts of a given size, read-only remounts, and ext4
loop images, so that free space, ENOSPC and EROFS come from the kernel, not from mocks.

Everything mounted through :class:`Mounts` (or :func:`tmpfs`) is unmounted at exit, in reverse
order, even when the test failed; a mount still busy at that point is detached lazily
(``umount -l``) so that no mount outlives the test session.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from rmqlog import CommitLog

_probe: list[str | None] = []


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False)


def _must(*args: str) -> None:
    r = _run(*args)
    if r.returncode != 0:
        raise OSError(f"{' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")


def _out(*args: str) -> str:
    r = _run(*args)
    if r.returncode != 0:
        raise OSError(f"{' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout.strip()


def mount_unavailable() -> str | None:
    """None when this process may mount filesystems, else the reason (tried once per session)."""
    if not _probe:
        _probe.append(_probe_mount())
    return _probe[0]


def _probe_mount() -> str | None:
    for tool in ("mount", "umount"):
        if shutil.which(tool) is None:
            return f"cannot mount test filesystems: `{tool}` is not installed"
    probe = tempfile.mkdtemp(prefix="rmqlog-mount-probe-")
    try:
        r = _run("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", probe)
        if r.returncode != 0:
            lines = r.stderr.strip().splitlines()
            why = lines[0] if lines else f"exit status {r.returncode}"
            return f"mounting a tmpfs is not permitted here (mount -t tmpfs: {why})"
        unmount(Path(probe))
        return None
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(probe)


def unmount(path: Path) -> None:
    """Unmounts the top mount at ``path``; lazily if it is still busy."""
    if _run("umount", str(path)).returncode != 0:
        _must("umount", "-l", str(path))


@contextlib.contextmanager
def tmpfs(path: Path, size: int | str) -> Iterator[Path]:
    """Mounts a tmpfs of ``size`` bytes (or a ``mount`` size such as ``"1m"``) at ``path``
    (created if missing) and unmounts it on exit, always."""
    path.mkdir(parents=True, exist_ok=True)
    _must("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path))
    try:
        yield path
    finally:
        gc.collect()  # memoryviews over maps of files there
        unmount(path)


def remount_ro(path: Path) -> int:
    """Makes the filesystem at ``path`` read-only; returns how many mounts it added at ``path``
    (each needs one more unmount).

    ``mount -o remount,ro`` is used when nothing has a file there open for writing. A live writer
    always does (its lock file, its segment maps), and the kernel then refuses the remount with
    EBUSY, as it would on a production host; the directory is then made read-only by stacking a
    read-only bind mount of it over itself. Every path lookup there (a new segment, the metadata)
    then fails with a real EROFS, while descriptors and maps opened before keep working, which is
    how a filesystem that the kernel turned read-only under a running process behaves.
    """
    if _run("mount", "-o", "remount,ro", str(path)).returncode == 0:
        return 0
    _must("mount", "--bind", str(path), str(path))
    try:
        _must("mount", "-o", "remount,bind,ro", str(path))
    except OSError:
        unmount(path)
        raise
    return 1


class Mounts:
    """Mounts made for one test, and the logs opened over them; :meth:`close` closes the logs
    first, then unmounts everything in reverse order."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self._mounted: list[Path] = []
        self._loops: list[str] = []
        self._logs: list[CommitLog] = []

    def tmpfs(self, name: str, size: int | str) -> Path:
        """A tmpfs of ``size`` bytes mounted at ``base/name``."""
        path = self.base / name
        path.mkdir(parents=True, exist_ok=True)
        _must("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path))
        self._mounted.append(path)
        return path

    def ext4(self, name: str, size: int | str, *mkfs: str) -> Path:
        """An ext4 filesystem in a ``size``-byte image file (``truncate -s``, ``mkfs.ext4 -q -F``
        with the options ``mkfs``), mounted read-write through a loop device at ``base/name``;
        ``mkfs.ext4`` defaults keep 5 % of the blocks reserved for root."""
        image = self.base / f"{name}.img"
        _must("truncate", "-s", str(size), str(image))
        _must("mkfs.ext4", "-q", "-F", *mkfs, str(image))
        path = self.base / name
        path.mkdir(parents=True, exist_ok=True)
        dev = _out("losetup", "--find", "--show", str(image))
        self._loops.append(dev)
        # A read-only flag (`blockdev --setro`) left on this loop device by an earlier user would
        # make the kernel mount the filesystem read-only without a word.
        if _out("blockdev", "--getro", dev) != "0":
            _must("blockdev", "--setrw", dev)
        _must("mount", dev, str(path))
        self._mounted.append(path)
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            raise OSError(f"{dev} on {path} was mounted read-only")
        return path

    def remount_ro(self, path: Path) -> int:
        """See :func:`remount_ro`; whatever it mounts is unmounted by :meth:`close`."""
        added = remount_ro(path)
        self._mounted.extend([path] * added)
        return added

    def log(self, paths, **kwargs) -> CommitLog:
        """Opens a CommitLog that :meth:`close` closes before unmounting."""
        log = CommitLog(paths, **kwargs)
        self._logs.append(log)
        return log

    def close(self) -> None:
        for log in reversed(self._logs):
            with contextlib.suppress(Exception):
                log.close()
        self._logs.clear()
        gc.collect()
        errors = []
        for path in reversed(self._mounted):
            try:
                unmount(path)
            except OSError as e:
                errors.append(str(e))
        self._mounted.clear()
        for dev in reversed(self._loops):
            r = _run("losetup", "-d", dev)
            if r.returncode != 0:
                errors.append(f"losetup -d {dev}: {r.stderr.strip()}")
        self._loops.clear()
        if errors:
            raise OSError("; ".join(errors))

    def __enter__(self) -> Mounts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def fill(path: Path, nbytes: int, name: str = "ballast") -> Path:
    """Writes ``nbytes`` of another program's data into ``path/name`` (real blocks)."""
    f = path / name
    with open(f, "wb") as out:
        out.write(b"\xa5" * nbytes)
        out.flush()
        os.fsync(out.fileno())
    return f


def used_ratio(path: Path) -> float:
    """Used ratio of the filesystem at ``path`` as ``df`` computes it."""
    s = os.statvfs(path)
    used = s.f_blocks - s.f_bfree
    return used / (used + s.f_bavail)


def free_bytes(path: Path) -> int:
    """Space an unprivileged writer can use at ``path`` (``f_bavail``)."""
    s = os.statvfs(path)
    return s.f_bavail * s.f_frsize
