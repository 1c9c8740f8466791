"""The record starts that walks learn and share across the logs of a process
(src/storage/boundaries.rs): a search by time or position answers as a scan does even where the
cache's key is fooled (a store written again at once on a file system whose ctime keeps seconds,
its inode reused) or a noted record is damaged since. tests/boundaries.rs has the rest."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import time

from rmqlog import CommitLog

SEG = 1 << 20  # a stride of 64 KiB: a walk notes about 16 starts a segment


def _answers(log: CommitLog) -> tuple[dict[int, int], dict[int, int]]:
    """What a scan says: the first record at or after some positions, and at or after the time
    of every 25th record."""
    recs = [(r.offset, r.timestamp_ms) for r in map(log.read_record, (o for o, _ in log.scan()))]
    end = log.max_offset
    first_at = {p: next((o for o, _ in recs if o >= p), end) for p in range(0, end, 9_001)}
    first_ts = {t: next(o for o, ts in recs if ts >= t) for _, t in recs[::25]}
    return first_at, first_ts


def _check(log: CommitLog) -> None:
    first_at, first_ts = _answers(log)
    for p, want in first_at.items():
        assert log._record_start_at_or_after(p) == want, p
    for t, want in first_ts.items():
        assert log.offset_for_timestamp(t) == want, t


def _key(log: CommitLog) -> tuple[int, int]:
    st = os.stat(log.segments()[0].path)
    return st.st_ino, st.st_ctime_ns


def test_a_store_written_again_at_once_where_ctime_keeps_seconds(mnt):
    """ext4 with 128-byte inodes keeps ctime in seconds: a store deleted and written again at the
    same path within a second gets its first segment file with the old file's inode and ctime,
    so the old file's key. The old starts fail their check and are dropped (once with bodies of
    the same size: the same starts, other timestamps; once with other sizes: no starts)."""
    disk = mnt.ext4("coarse", 64 << 20, "-I", "128")
    root = disk / "store"
    for size in (1000, 700):
        for _ in range(3):  # the two stores must fall within one second of ctime
            time.sleep(1.0 - time.time() % 1.0 + 0.01)
            shutil.rmtree(root, ignore_errors=True)
            with CommitLog(str(root), segment_size=SEG) as a:
                a.append_batch([b"a" * 1000] * 600)
                before = _key(a)
                a._record_start_at_or_after(a.max_offset - 1)  # notes A's starts
                a.offset_for_timestamp(1 << 62)
            shutil.rmtree(root)
            time.sleep(0.02)  # B's timestamps are all newer than A's
            with CommitLog(str(root), segment_size=SEG) as b:
                b.append_batch([b"b" * size] * 300)
                time.sleep(0.01)
                b.append_batch([b"c" * size] * 300)
                if _key(b) != before:
                    continue  # a second passed: no collision to test; again
                _check(b)
                with CommitLog(str(root), read_only=True) as r:
                    _check(r)
            break
        else:
            raise AssertionError(f"no try wrote both stores within one second of ctime ({size})")


def test_a_damaged_timestamp_never_leads_a_later_search(tmp_path):
    """A record after the answers, its timestamp zeroed: a walk over it does not note it (its CRC
    fails), so searches for earlier times still answer from the clean records before it."""
    root = str(tmp_path / "store")
    with CommitLog(root, segment_size=SEG) as w:
        for _ in range(12):
            w.append_batch([b"x" * 1000] * 50)
            time.sleep(0.003)
        path = w.segments()[0].path
        first_at, first_ts = _answers(w)
        offsets = [o for o, _ in w.scan()]
    # Record 320 of 1,032 bytes: where a walk from the segment's start would note one.
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, struct.pack("<Q", 0), offsets[320] + 24)
    finally:
        os.close(fd)
    with CommitLog(root, read_only=True) as r:
        r._record_start_at_or_after(r.max_offset - 1)  # walks over the damage
        for t, want in first_ts.items():
            if want < offsets[320]:
                assert r.offset_for_timestamp(t) == want, t
        for p, want in first_at.items():
            if p <= offsets[320]:
                assert r._record_start_at_or_after(p) == want, p


def test_old_records_inside_a_new_body_do_not_lead_a_walk(mnt):
    """The same collision of inode and ctime, where the new store's first record's body holds
    the old store's bytes at their own positions (a segment archived as a body): whole records,
    with the noted offsets and timestamps, sit at the old starts. The first record's header is
    part of the cache's key, so the old starts are not the new file's."""
    disk = mnt.ext4("coarse", 64 << 20, "-I", "128")
    root = disk / "store"
    for _ in range(3):
        time.sleep(1.0 - time.time() % 1.0 + 0.01)
        shutil.rmtree(root, ignore_errors=True)
        with CommitLog(str(root), segment_size=SEG) as a:
            for _ in range(6):
                a.append_batch([b"a" * 1000] * 100)
                time.sleep(0.003)
            before = _key(a)
            end = a.max_offset
            a._record_start_at_or_after(end - 1)  # notes A's starts
            last = a.read_record(end - 1032).timestamp_ms
            a.offset_for_timestamp(last)
            with open(a.segments()[0].path, "rb") as f:
                old = f.read(end)
        shutil.rmtree(root)
        with CommitLog(str(root), segment_size=SEG) as b:
            b.append(old[32:])  # its body starts at byte 32: A's bytes at their own positions
            b.append(b"tail")
            if _key(b) != before:
                continue
            _check(b)
            assert b.offset_for_timestamp(last) == 0
        break
    else:
        raise AssertionError("no try wrote both stores within one second of ctime")


def test_a_walk_reads_headers_not_bodies(mnt):
    """Records of 1 MiB (a stride or more each): a walk to the segment's end, from a page cache
    without the file, brings in the pages of its headers, not the bodies (a walk that noted every
    record checked each one whole). The loop device reads no more than a page a fault."""
    disk = mnt.ext4("walk", 128 << 20)
    dev = subprocess.run(
        ["findmnt", "-no", "SOURCE", str(disk)], capture_output=True, text=True, check=True
    ).stdout.strip()
    subprocess.run(["blockdev", "--setra", "0", dev], check=True)
    root = str(disk / "store")
    with CommitLog(root, segment_size=64 << 20) as w:
        w.append_batch([os.urandom(1 << 20) for _ in range(60)])
        w.flush()
        path = w.segments()[0].path
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    with CommitLog(root, read_only=True) as r:
        r._record_start_at_or_after(r.max_offset - 1)
        r.offset_for_timestamp(1 << 62)
        out = subprocess.run(
            ["fincore", "--bytes", "--noheadings", "--output", "RES", path],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    resident = int(out.split()[0])
    assert resident < 8 << 20, f"{resident:,} bytes of the 64 MiB segment read in"
