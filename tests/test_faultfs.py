"""The fault-injecting FUSE filesystem itself (``tests/faultfs.py``): passthrough, fault rules,
counters, and the lazy model of power loss, seen through ordinary system calls on the mount."""

from __future__ import annotations

import errno
import fcntl
import mmap
import os

import pytest


def write_file(path, data: bytes, sync: bool) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, 0)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def test_passthrough(faultfs):
    d = faultfs.path / "dir"
    d.mkdir()
    (d / "a").write_bytes(b"hello")
    assert (faultfs.backing / "dir" / "a").read_bytes() == b"hello"
    os.rename(d / "a", d / "b")
    assert sorted(os.listdir(d)) == ["b"]
    os.truncate(d / "b", 2)
    assert (d / "b").read_bytes() == b"he"
    os.chmod(d / "b", 0o600)
    assert (faultfs.backing / "dir" / "b").stat().st_mode & 0o777 == 0o600
    os.utime(d / "b", ns=(1_000_000_000, 2_000_000_000))
    assert (d / "b").stat().st_mtime_ns == 2_000_000_000
    fd = os.open(d / "c", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, 1 << 20)
        assert os.fstat(fd).st_size == 1 << 20
        with mmap.mmap(fd, 1 << 20) as m:  # a shared writable map
            m[4096:4101] = b"world"
            m.flush()
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
    with open(faultfs.backing / "dir" / "c", "rb") as f:
        f.seek(4096)
        assert f.read(5) == b"world"
    assert os.statvfs(faultfs.path).f_blocks > 0
    os.unlink(d / "c")
    os.unlink(d / "b")
    os.rmdir(d)
    assert os.listdir(faultfs.backing) == []


def test_fault_rules_and_counters(faultfs):
    f = faultfs.path / "x.dat"
    write_file(f, b"abc", sync=False)
    faultfs.stats(reset=True)
    faultfs.fail("fsync", "/*.dat", "ENOSPC", times=2)
    fd = os.open(f, os.O_RDWR)
    try:
        for _ in range(2):
            with pytest.raises(OSError) as e:
                os.fsync(fd)
            assert e.value.errno == errno.ENOSPC
        os.fsync(fd)  # the rule is used up
        os.fdatasync(fd)
        faultfs.fail("write", "/x.*", errno.EIO)
        with pytest.raises(OSError) as e:
            os.pwrite(fd, b"def", 0)
        assert e.value.errno == errno.EIO
        faultfs.clear()
        os.pwrite(fd, b"def", 0)
    finally:
        os.close(fd)
    s = faultfs.stats()
    assert s["ops"]["fsync"]["/x.dat"] == 4
    assert s["ops"]["fdatasync"]["/x.dat"] == 1
    assert s["faults"] == {"fsync": {"/x.dat": 2}, "write": {"/x.dat": 1}}
    assert faultfs.count("write", "/x*") == 2
    with pytest.raises(RuntimeError, match="unknown op"):
        faultfs.fail("nosuchop", "*", "EIO")


def test_create_fallocate_and_close_faults(faultfs):
    faultfs.fail("create", "/new*", "EIO", times=1)
    with pytest.raises(OSError) as e:
        os.open(faultfs.path / "new", os.O_RDWR | os.O_CREAT, 0o644)
    assert e.value.errno == errno.EIO
    fd = os.open(faultfs.path / "new", os.O_RDWR | os.O_CREAT, 0o644)
    faultfs.fail("fallocate", "/new", "ENOSPC")
    faultfs.fail("flush", "/new", "EIO")
    try:
        with pytest.raises(OSError) as e:
            os.posix_fallocate(fd, 0, 1 << 20)
        assert e.value.errno == errno.ENOSPC
    finally:
        with pytest.raises(OSError) as e:
            os.close(fd)  # close(2) reports the failed FUSE flush; the descriptor is gone
        assert e.value.errno == errno.EIO
    assert faultfs.stats()["faults"] == {
        "create": {"/new": 1},
        "fallocate": {"/new": 1},
        "flush": {"/new": 1},
    }


def test_lazy_model_and_power_cut(faultfs):
    faultfs.lazy()
    synced, unsynced = faultfs.path / "synced", faultfs.path / "unsynced"
    write_file(synced, b"A" * 5000, sync=True)
    write_file(unsynced, b"B" * 5000, sync=False)
    assert unsynced.read_bytes() == b"B" * 5000  # reads see unsynced data
    assert (faultfs.backing / "unsynced").read_bytes() == bytes(5000)  # the size, no data
    assert faultfs.stats()["pending"] == {"/unsynced": 8192}
    # Data written after an fsync is lazy again; a rename keeps it with the file.
    fd = os.open(synced, os.O_RDWR)
    os.pwrite(fd, b"C" * 10, 0)
    os.close(fd)
    os.rename(synced, faultfs.path / "renamed")

    faultfs.power_cut()
    assert sorted(os.listdir(faultfs.path)) == ["renamed", "unsynced"]
    assert (faultfs.path / "renamed").read_bytes() == b"A" * 5000
    assert (faultfs.path / "unsynced").read_bytes() == bytes(5000)
    assert faultfs.stats()["pending"] == {}
    assert faultfs.stats()["lazy"], "lazy mode survives the remount"


def test_after_a_cut_writes_and_syncs_are_ignored(faultfs):
    faultfs.lazy()
    f = faultfs.path / "f"
    write_file(f, b"old", sync=True)
    fd = os.open(f, os.O_RDWR)
    try:
        faultfs.cut()
        os.pwrite(fd, b"new", 0)
        os.fsync(fd)  # acknowledged, and nothing happens
        with pytest.raises(OSError) as e:
            os.open(faultfs.path / "g", os.O_RDWR | os.O_CREAT)
        assert e.value.errno == errno.EIO
    finally:
        os.close(fd)
    faultfs.remount()
    assert f.read_bytes() == b"old"


def test_failed_fsync_drops_lazy_data(faultfs):
    """Like Linux after a failed writeback: the pages are clean, a second fsync succeeds and
    writes nothing."""
    faultfs.lazy()
    f = faultfs.path / "f"
    write_file(f, b"old", sync=True)
    fd = os.open(f, os.O_RDWR)
    try:
        os.pwrite(fd, b"new", 0)
        faultfs.fail("fsync", "/f", "EIO", times=1)
        with pytest.raises(OSError):
            os.fsync(fd)
        os.fsync(fd)
    finally:
        os.close(fd)
    faultfs.power_cut()
    assert f.read_bytes() == b"old"


def test_no_size_makes_statfs_report_no_blocks(faultfs):
    assert os.statvfs(faultfs.path).f_blocks > 0
    faultfs.no_size()
    sv = os.statvfs(faultfs.path)
    assert (sv.f_blocks, sv.f_bfree, sv.f_bavail) == (0, 0, 0)
    (faultfs.path / "a").write_bytes(b"still works")  # only the report changes
    faultfs.no_size(on=False)
    assert os.statvfs(faultfs.path).f_blocks > 0
    assert (faultfs.backing / "a").read_bytes() == b"still works"
