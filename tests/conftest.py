"""Shared fixtures for the rmqlog API tests."""

from __future__ import annotations

import contextlib

import _faultfs
import _mounts
import pytest

from rmqlog import CommitLog


@pytest.fixture
def dirs(tmp_path):
    """The three default store directories (not created)."""
    return [tmp_path / "d0", tmp_path / "d1", tmp_path / "d2"]


@pytest.fixture
def make_log(dirs):
    """Factory of opened CommitLogs; every log it made is closed at teardown.

    ``make_log()`` opens the three default directories with ``segment_size=4096``; any argument
    of ``CommitLog`` can be given (``paths`` positionally or by keyword).
    """
    opened = []

    def make(paths=None, **kwargs):
        kwargs.setdefault("segment_size", 4096)
        log = CommitLog(dirs if paths is None else paths, **kwargs)
        opened.append(log)
        return log

    yield make
    for log in reversed(opened):
        with contextlib.suppress(Exception):
            log.close()


def _body(i: int, size: int = 100) -> bytes:
    head = f"rec-{i}-".encode()
    return (head * (size // len(head) + 1))[:size]


@pytest.fixture
def body():
    """``body(i, size=100)``: a distinct, recognisable body of ``size`` bytes for record ``i``."""
    return _body


@pytest.fixture(scope="session")
def mount_allowed():
    """Skips (with the reason) where mounting a tmpfs is not permitted."""
    reason = _mounts.mount_unavailable()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def mnt(mount_allowed, tmp_path):
    """Mounts for one test; logs opened with ``mnt.log`` are closed before the unmounts."""
    with _mounts.Mounts(tmp_path) as m:
        yield m


@pytest.fixture(scope="session")
def faultfs_available(tmp_path_factory):
    """Skips (with the reason) where a FUSE filesystem cannot be mounted; installs fuse3 first
    where ``fusermount3`` is missing (see ``_faultfs.unavailable``)."""
    reason = _faultfs.unavailable(tmp_path_factory.mktemp("faultfs-probe"))
    if reason:
        pytest.skip(reason)


@pytest.fixture
def faultfs(faultfs_available, tmp_path):
    """A faultfs mount for one test (``tests/faultfs.py``, ``tests/_faultfs.py``): ``.path`` is
    the mount point; ``fail()``, ``clear()``, ``stats()``, ``lazy()``, ``power_cut()``. Logs opened
    with ``faultfs.log`` are closed before it unmounts, which it always does."""
    fs = _faultfs.FaultFS(tmp_path / "faultfs")
    fs.start()
    try:
        yield fs
    finally:
        fs.close()
