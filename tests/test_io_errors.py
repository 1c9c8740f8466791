"""I/O errors from a real filesystem: the store lives on faultfs (``tests/faultfs.py``), a FUSE
mount the kernel drives, whose daemon fails chosen operations on the segment files with EIO or
ENOSPC. So ``msync`` goes through the kernel's writeback and fsync paths, and a failed write-back
is reported the way the kernel reports it.

What docs/recovery.md promises: a failed sync poisons the writer; that call and every later
append raise ``WriterPoisonedError`` naming the cause, reads (the writer's, a follower's) keep
working, and after a reopen every record acknowledged before the failure is there. The records
of the failing sync are in doubt: each is there with its content or gone, and the survivors are a
prefix. A failed direct write (``pwritev``: records of 16 KiB or more; every record in
``flush="sync"``) falls back to the map, so nothing is lost as long as the sync works.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time

import pytest

from rmqlog import (
    HEADER_LEN,
    CommitLog,
    CommitLogError,
    InvalidOffsetError,
    OffsetOutOfRangeError,
    WriterPoisonedError,
)

SEG = 64 * 1024
SEGMENTS = "/d[01]/" + "[0-9]" * 20  # segment files, not rmqlog.meta or rmqlog.tail


def body(i: int, size: int | None = None) -> bytes:
    size = 200 + (i * 37) % 1500 if size is None else size
    unit = b"<%d>" % i
    return (unit * (size // len(unit) + 1))[:size]


def append(log: CommitLog, first: int, n: int, size: int | None = None) -> dict[int, bytes]:
    out = {}
    for i in range(first, first + n):
        b = body(i, size)
        out[log.append(b)] = b
    return out


def next_offset(log: CommitLog, size: int) -> int:
    """Where an append of a ``size``-byte body goes (to know the offset of one that raises)."""
    seg = log.segments()[-1]
    end = seg.start_offset + seg.size
    return end if log.max_offset + HEADER_LEN + size > end else log.max_offset


def store(faultfs):
    return [faultfs.path / "d0", faultfs.path / "d1"]


def assert_reads(log: CommitLog, records: dict[int, bytes]) -> None:
    for off, b in records.items():
        assert bytes(log.read(off)) == b, f"record at {off} reads wrong"


def assert_poisoned(log: CommitLog, strerror: str) -> None:
    """Every kind of append raises WriterPoisonedError naming the failed sync."""
    for attempt in (
        lambda: log.append(b"small"),
        lambda: log.append(b"L" * 20_000),
        lambda: log.append_batch([b"a", b"b"]),
    ):
        with pytest.raises(WriterPoisonedError) as e:
            attempt()
        assert strerror in str(e.value)


def assert_never_wrong(log: CommitLog, records: dict[int, bytes]) -> None:
    """Each record reads back with its content or raises an rmqlog error, never other bytes."""
    for off, b in records.items():
        try:
            got = bytes(log.read(off))
        except CommitLogError:
            continue
        assert got == b, f"record at {off} reads other bytes"


def close_poisoned(log: CommitLog) -> None:
    """Closes a poisoned writer; its final sync may fail again (that raises the poison)."""
    with contextlib.suppress(WriterPoisonedError):
        log.close()
    assert log.closed


def assert_survivors(log: CommitLog, acked: dict[int, bytes], in_doubt: dict[int, bytes]) -> None:
    """Every record of ``acked`` is there; each of ``in_doubt`` is there with its content or
    gone, the survivors are a prefix, and the log holds nothing else."""
    assert_reads(log, acked)
    expected = dict(acked)
    gone_at = None
    for off, b in sorted(in_doubt.items()):
        try:
            got = bytes(log.read(off))
        except (OffsetOutOfRangeError, InvalidOffsetError):
            gone_at = off if gone_at is None else gone_at
            continue
        assert got == b, f"the record in doubt at {off} came back with other content"
        assert gone_at is None, f"the record at {gone_at} is gone but the later one at {off} is not"
        expected[off] = b
    assert {off: bytes(v) for off, v in log.scan()} == expected
    assert log.verify() == []


def wait_for(cond, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


@pytest.mark.parametrize("err", ["EIO", "ENOSPC"])
def test_failed_sync_in_flush_poisons_the_writer(faultfs, err):
    strerror = os.strerror(getattr(errno, err))
    dirs = store(faultfs)
    log = faultfs.log(dirs, segment_size=SEG, flush="none")
    acked = append(log, 0, 300)  # about 5 segments, in both directories
    assert log.flush() == log.max_offset
    durable = log.flushed_offset
    follower = faultfs.log(dirs, read_only=True)
    in_doubt = append(log, 300, 60)

    faultfs.stats(reset=True)
    faultfs.fail("fsync", SEGMENTS, err)
    with pytest.raises(WriterPoisonedError) as e:
        log.flush()
    assert strerror in str(e.value)
    assert "syncing segment" in str(e.value)
    assert faultfs.count("fsync", SEGMENTS, kind="faults") >= 1, "no sync reached the disk"
    assert log.flushed_offset == durable

    assert_poisoned(log, strerror)
    faultfs.clear()
    assert_poisoned(log, strerror)  # the fault is gone; the poison stays

    everything = {**acked, **in_doubt}
    assert_reads(log, everything)
    follower.refresh()
    assert_reads(follower, everything)
    assert_reads(faultfs.log(dirs, read_only=True), everything)  # a follower opened now

    close_poisoned(log)
    faultfs.remount()  # nothing of the old mount's page cache is left
    reopened = faultfs.log(dirs, segment_size=SEG)
    assert_survivors(reopened, acked, in_doubt)
    reopened.append(b"the reopened writer writes")


@pytest.mark.parametrize("err", ["EIO", "ENOSPC"])
def test_failed_sync_of_a_sync_append_poisons_the_writer(faultfs, err):
    """flush="sync": the append whose sync fails raises (its record is in doubt)."""
    strerror = os.strerror(getattr(errno, err))
    dirs = store(faultfs)
    log = faultfs.log(dirs, segment_size=SEG, flush="sync")
    acked = append(log, 0, 100)
    durable = log.flushed_offset
    assert durable == log.max_offset
    faultfs.fail("fsync", SEGMENTS, err)
    in_doubt = {next_offset(log, 700): body(100, 700)}
    with pytest.raises(WriterPoisonedError) as e:
        log.append(body(100, 700))
    assert strerror in str(e.value)
    assert faultfs.count("fsync", SEGMENTS, kind="faults") >= 1
    assert log.flushed_offset == durable
    assert_poisoned(log, strerror)
    faultfs.clear()
    assert_poisoned(log, strerror)
    assert_reads(log, {**acked, **in_doubt})
    assert_reads(faultfs.log(dirs, read_only=True), {**acked, **in_doubt})

    close_poisoned(log)
    faultfs.remount()
    reopened = faultfs.log(dirs, segment_size=SEG)
    assert_survivors(reopened, acked, in_doubt)


@pytest.mark.parametrize("err", ["EIO", "ENOSPC"])
def test_background_flusher_hitting_a_failed_sync_poisons_the_writer(faultfs, err):
    strerror = os.strerror(getattr(errno, err))
    dirs = store(faultfs)
    log = faultfs.log(dirs, segment_size=SEG, flush="async", flush_interval_ms=20)
    acked = append(log, 0, 200)
    wait_for(lambda: log.flushed_offset == log.max_offset, "the background flush")
    durable = log.flushed_offset

    faultfs.fail("fsync", SEGMENTS, err)
    in_doubt: dict[int, bytes] = {}
    i = 200
    deadline = time.monotonic() + 10
    with pytest.raises(WriterPoisonedError) as e:
        while time.monotonic() < deadline:
            b = body(i)
            in_doubt[log.append(b)] = b
            i += 1
            time.sleep(0.002)
    assert strerror in str(e.value)
    assert faultfs.count("fsync", SEGMENTS, kind="faults") >= 1
    assert in_doubt, "the flusher failed before anything was appended after the fault"
    assert log.flushed_offset == durable

    assert_poisoned(log, strerror)
    faultfs.clear()
    assert_poisoned(log, strerror)
    everything = {**acked, **in_doubt}
    assert_reads(log, everything)
    assert_reads(faultfs.log(dirs, read_only=True), everything)

    close_poisoned(log)
    faultfs.remount()
    reopened = faultfs.log(dirs, segment_size=SEG)
    assert_survivors(reopened, acked, in_doubt)


@pytest.mark.parametrize(
    ("flush", "size"),
    [("async", 20_000), ("sync", None)],
    ids=["async-large-records", "sync-every-record"],
)
def test_failed_direct_write_falls_back_to_the_map(faultfs, flush, size):
    """One pwritev fails: the record goes through the map instead, and is durable after the
    next sync; a power cut (lazy mode: only synced data survives) proves it."""
    faultfs.lazy()
    dirs = store(faultfs)
    log = faultfs.log(dirs, segment_size=SEG * 4, flush=flush, flush_interval_ms=60_000)
    records = append(log, 0, 5, size)
    log.flush()
    assert_reads(log, records)  # the pages are in the writer's map too
    faultfs.stats(reset=True)
    faultfs.fail("write", SEGMENTS, "EIO", times=1)
    records.update(append(log, 5, 6, size))  # stays in the first segment
    assert faultfs.count("write", SEGMENTS, kind="faults") == 1, "the direct write never failed"
    assert_reads(log, records)
    if flush == "sync":
        assert log.flushed_offset == log.max_offset
    else:
        assert log.flush() == log.max_offset
    assert faultfs.count("fsync", SEGMENTS) >= 1
    records.update(append(log, 11, 30, size))  # more, into new segments
    log.flush()

    faultfs.power_cut()
    reopened = faultfs.log(dirs, segment_size=SEG * 4)
    assert_survivors(reopened, records, {})


@pytest.mark.parametrize("flush", ["async", "sync"])
def test_failing_writes_poison_at_the_next_sync(faultfs, flush):
    """Every write to the segments fails: the direct write falls back to the map, the kernel's
    write-back of the map fails, the next sync reports it and poisons the writer.

    The records written since the last sync never reached the disk, and the page cache need not
    keep them: FUSE marks the pages a failed write covered as not up to date, and the next
    reader to fault one in reads it from the disk. So they read back with their content or fail
    (an error, never other bytes); what a reopen claims about them is
    ``test_a_poisoned_writer_claims_nothing_it_could_not_sync``'s business."""
    strerror = os.strerror(errno.EIO)
    dirs = store(faultfs)
    log = faultfs.log(dirs, segment_size=SEG * 4, flush=flush, flush_interval_ms=60_000)
    acked = append(log, 0, 5, 20_000)
    log.flush()
    assert_reads(log, acked)
    faultfs.fail("write", SEGMENTS, "EIO")
    if flush == "async":
        in_doubt = append(log, 5, 3, 20_000)  # acknowledged: through the map
        assert_reads(log, {**acked, **in_doubt})
        with pytest.raises(WriterPoisonedError) as e:
            log.flush()
    else:
        in_doubt = {next_offset(log, 20_000): body(5, 20_000)}
        with pytest.raises(WriterPoisonedError) as e:
            log.append(body(5, 20_000))  # the record's own sync fails
    assert strerror in str(e.value)
    assert faultfs.count("write", SEGMENTS, kind="faults") >= 2  # pwritev, then the write-back
    assert_poisoned(log, strerror)
    faultfs.clear()
    assert_poisoned(log, strerror)
    for reader in (log, faultfs.log(dirs, read_only=True)):
        assert_reads(reader, acked)
        assert_never_wrong(reader, in_doubt)
    close_poisoned(log)
    reopened = faultfs.log(dirs, segment_size=SEG * 4)
    assert_reads(reopened, acked)
    assert_never_wrong(reopened, in_doubt)


@pytest.mark.parametrize(
    ("flush", "fault", "lazy"),
    [
        ("none", "fsync-once", True),
        ("none", "write-always", False),
        ("async", "write-always", False),
        ("sync", "write-always", False),
    ],
)
def test_a_poisoned_writer_claims_nothing_it_could_not_sync(faultfs, flush, fault, lazy):
    """After a failed sync the page cache may have dropped the data or marked it clean, so a
    second sync succeeds without writing it ("retrying the sync would lie", docs/recovery.md).
    Whatever the poisoned writer does next (a flush() retried by the application, close()), a
    reboot must then find every record below every flushed_offset it reported, and the
    records of the failed sync must be there or cleanly gone, never damage below
    flushed_offset.

    ``fsync-once``: one fsync fails with EIO in lazy mode, where (as in Linux) a failed fsync
    loses the unsynced data. ``write-always``: every write to the segments fails (in async mode
    the records are large: the direct write fails first, then the write-back of the map), so
    the data never reaches the disk; the kernel reports that once, to the first sync."""
    if lazy:
        faultfs.lazy()
    dirs = store(faultfs)
    size = 20_000 if flush == "async" else None  # async: the direct path, and its fallback
    log = faultfs.log(dirs, segment_size=SEG, flush=flush, flush_interval_ms=60_000)
    acked = append(log, 0, 50, size)
    log.flush()
    if fault == "fsync-once":
        faultfs.fail("fsync", SEGMENTS, "EIO", times=1)
    else:
        faultfs.fail("write", SEGMENTS, "EIO")
    in_doubt: dict[int, bytes] = {}
    with pytest.raises(WriterPoisonedError):
        for i in range(50, 60):
            b = body(i, size)
            if flush == "sync":
                in_doubt[next_offset(log, len(b))] = b  # in doubt as soon as it is written
                log.append(b)
            else:
                in_doubt[log.append(b)] = b
        log.flush()

    reported = {log.flushed_offset}
    with contextlib.suppress(WriterPoisonedError):
        reported.add(log.flush())  # an application retrying
    reported.add(log.flushed_offset)
    faultfs.clear()
    with contextlib.suppress(WriterPoisonedError):
        reported.add(log.flush())
    reported.add(log.flushed_offset)
    close_poisoned(log)

    faultfs.power_cut()
    reopened = faultfs.log(dirs, segment_size=SEG)
    claimed = max(reported)
    for off, b in sorted(in_doubt.items()):
        if off < claimed:
            try:
                got = bytes(reopened.read(off))
            except (OffsetOutOfRangeError, InvalidOffsetError) as e:
                pytest.fail(
                    f"the poisoned writer reported flushed_offset {claimed}, but the record at "
                    f"{off} (appended before the failed sync) is lost after a power cut: {e}"
                )
            assert got == b
    assert_survivors(reopened, acked, in_doubt)
