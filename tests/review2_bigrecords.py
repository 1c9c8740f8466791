"""Review 2: records at least a stride long. The walk validates (CRC over the whole body) every
record it would note, and `known()` validates the record it starts from, BEFORE checking whether
the index already has an entry near: with records >= stride every walked record's body is read
and CRC'd, on every walk. c16f21c's walk read only headers.

Run: .venv/bin/python tests/review2_bigrecords.py [store-dir]
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import tempfile
import time

from rmqlog import CommitLog

SEG = 64 << 20
libc = ctypes.CDLL(None, use_errno=True)


def resident(path: str) -> int:
    """Bytes of `path` in the page cache (mincore over a private PROT_READ map made by libc)."""
    size = os.path.getsize(path)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    fd = os.open(path, os.O_RDONLY)
    addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    os.close(fd)
    pages = (size + 4095) // 4096
    vec = (ctypes.c_ubyte * pages)()
    assert libc.mincore(addr, size, vec) == 0, ctypes.get_errno()
    libc.munmap(addr, size)
    return sum(v & 1 for v in vec) * 4096


def evict(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def main() -> None:
    root = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="rv2big-")
    store = os.path.join(root, "s")
    with CommitLog(store, segment_size=SEG) as w:
        for i in range(60):
            w.append(bytes([i]) * ((1 << 20) - 32))
        path = w.segments()[0].path
        end = w.max_offset
    evict(path)
    print(f"segment {SEG >> 20} MiB, 60 records of 1 MiB; resident after evict: {resident(path) >> 10} KiB")
    with CommitLog(store, read_only=True) as r:
        print(f"resident after a read-only open: {resident(path) >> 10} KiB")
        t = time.perf_counter()
        got = r._record_start_at_or_after(end - 1)
        dt = time.perf_counter() - t
        print(f"cold record_start_at_or_after(end-1) = {got}: {dt * 1e3:.1f} ms, "
              f"resident after: {resident(path) >> 10} KiB (a header walk needs 60 pages)")
    with CommitLog(store, read_only=True) as r:
        n = 2000
        t = time.perf_counter()
        for i in range(n):
            r._record_start_at_or_after((i * 7919 * 4096) % (end - 1) + 1)
        dt = time.perf_counter() - t
        print(f"warm index: {n} calls, {dt / n * 1e6:.1f} us a call")
        t = time.perf_counter()
        for i in range(n):
            r._record_start_at_or_after(40 + (i % 3))  # inside record 0: no index entry used
        dt0 = time.perf_counter() - t
        print(f"same log, offsets inside the first record (no known start): {dt0 / n * 1e6:.1f} us a call")


if __name__ == "__main__":
    main()
