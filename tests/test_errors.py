"""The exception tree, and every error that can be triggered through the API."""

from __future__ import annotations

import os

import pytest

import rmqlog
from rmqlog import (
    HEADER_LEN,
    ClosedError,
    CommitLogError,
    CorruptionError,
    DiskFullError,
    InvalidOffsetError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    ReadOnlyError,
    StoreLockedError,
    WriterPoisonedError,
)

SEG = 4096

TREE = {
    "OffsetOutOfRangeError": ("CommitLogError", "IndexError"),
    "InvalidOffsetError": ("CommitLogError", "ValueError"),
    "MessageTooLargeError": ("CommitLogError", "ValueError"),
    "DiskFullError": ("CommitLogError", "OSError"),
    "StoreLockedError": ("CommitLogError",),
    "CorruptionError": ("CommitLogError",),
    "ReadOnlyError": ("CommitLogError",),
    "ClosedError": ("CommitLogError", "ValueError"),
    "WriterPoisonedError": ("CommitLogError",),
}


def assert_intact(log, written):
    """Every record of ``written`` ({offset: body}) reads back, and nothing else is in the log."""
    for off, b in written.items():
        assert bytes(log.read(off)) == b
    assert [(o, bytes(v)) for o, v in log.scan()] == list(written.items())


def fill(log, body, n, size=700, first=0):
    return {log.append(body(first + i, size)): body(first + i, size) for i in range(n)}


# ---------------------------------------------------------------------------------------------
# the tree


def test_base_class():
    assert CommitLogError.__bases__ == (Exception,)
    assert CommitLogError.__module__ == "rmqlog"
    assert rmqlog.CommitLogError is CommitLogError


@pytest.mark.parametrize("name", sorted(TREE))
def test_exception_bases_are_exact(name):
    cls = getattr(rmqlog, name)
    assert name in rmqlog.__all__
    assert cls.__name__ == name
    assert cls.__module__ == "rmqlog"
    assert tuple(b.__name__ for b in cls.__bases__) == TREE[name]
    assert cls.__bases__[0] is CommitLogError
    assert issubclass(cls, CommitLogError) and issubclass(cls, Exception)
    assert cls.__doc__


def test_exception_bases_identity():
    assert OffsetOutOfRangeError.__bases__ == (CommitLogError, IndexError)
    assert InvalidOffsetError.__bases__ == (CommitLogError, ValueError)
    assert MessageTooLargeError.__bases__ == (CommitLogError, ValueError)
    assert DiskFullError.__bases__ == (CommitLogError, OSError)
    assert StoreLockedError.__bases__ == (CommitLogError,)
    assert CorruptionError.__bases__ == (CommitLogError,)
    assert ReadOnlyError.__bases__ == (CommitLogError,)
    assert ClosedError.__bases__ == (CommitLogError, ValueError)
    assert WriterPoisonedError.__bases__ == (CommitLogError,)
    for cls in (StoreLockedError, CorruptionError, ReadOnlyError, WriterPoisonedError):
        assert not issubclass(cls, (ValueError, OSError, IndexError))


# ---------------------------------------------------------------------------------------------
# OffsetOutOfRangeError


def test_offset_out_of_range(make_log, body):
    log = make_log()
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0)  # empty log
    written = fill(log, body, 12)
    end = log.max_offset
    for bad in (-1, -(2**70), end, end + 1, end + SEG * 10, 2**64, 2**70):
        with pytest.raises(OffsetOutOfRangeError) as info:
            log.read(bad)
        assert isinstance(info.value, IndexError)
        assert str(bad) in str(info.value)
        with pytest.raises(OffsetOutOfRangeError):
            log.read_record(bad)
    with pytest.raises(OffsetOutOfRangeError):
        log.scan(start=-1)
    with pytest.raises(IndexError, match=rf"\[0, {end}\)"):
        log.read(end)
    assert_intact(log, written)


def test_offset_below_min_offset(make_log, dirs, body):
    writer = make_log()
    written = fill(writer, body, 12)
    reader = make_log([dirs[0]], read_only=True)
    assert reader.min_offset == 0
    # the writer deletes the head segment; the follower's refresh drops it
    head = reader.segments()[0]
    writer.truncate_before(head.start_offset + head.size)
    assert not os.path.exists(head.path)
    reader.refresh()
    assert reader.min_offset == head.start_offset + head.size
    for bad in (0, head.start_offset + 1, reader.min_offset - 1):
        with pytest.raises(OffsetOutOfRangeError):
            reader.read(bad)
    with pytest.raises(OffsetOutOfRangeError):
        reader.scan(start=0)
    rest = {o: b for o, b in written.items() if o >= reader.min_offset}
    assert 0 < len(rest) < len(written)
    assert_intact(reader, rest)


# ---------------------------------------------------------------------------------------------
# InvalidOffsetError


def test_invalid_offset_inside_a_record(make_log, body):
    log = make_log()
    written = fill(log, body, 10)
    offsets = list(written)
    for bad in (offsets[0] + 1, offsets[3] + HEADER_LEN, offsets[5] + 100, offsets[-1] + 1):
        with pytest.raises(InvalidOffsetError) as info:
            log.read(bad)
        assert isinstance(info.value, ValueError)
        assert str(bad) in str(info.value)
        with pytest.raises(InvalidOffsetError):
            log.read_record(bad)
    assert_intact(log, written)


def test_invalid_offset_in_segment_filler(make_log, body):
    log = make_log()
    written = fill(log, body, 10, size=1500)  # 2 records per segment, ~1000 bytes of filler
    segs = log.segments()
    assert len(segs) >= 4
    sealed = segs[1]
    last_end = max(o for o in written if o < sealed.start_offset + sealed.size) + HEADER_LEN + 1500
    assert last_end < sealed.start_offset + sealed.size
    for bad in (last_end, last_end + 8, sealed.start_offset + sealed.size - 1):
        with pytest.raises(InvalidOffsetError, match="not the start of a record"):
            log.read(bad)
    assert_intact(log, written)


# ---------------------------------------------------------------------------------------------
# MessageTooLargeError


def test_message_over_max_message_size(make_log, body):
    log = make_log(max_message_size=1000)
    written = fill(log, body, 3, size=500)
    with pytest.raises(MessageTooLargeError) as info:
        log.append(b"x" * 1001)
    assert isinstance(info.value, ValueError)
    assert "1001" in str(info.value) and "1000" in str(info.value)
    assert_intact(log, written)
    off = log.append(b"y" * 1000)  # the limit itself is accepted
    written[off] = b"y" * 1000
    assert_intact(log, written)


def test_message_larger_than_a_segment(make_log, body):
    log = make_log()
    written = fill(log, body, 3, size=500)
    for size in (5000, SEG - HEADER_LEN + 1):
        with pytest.raises(MessageTooLargeError, match="segment"):
            log.append(b"x" * size)
        with pytest.raises(MessageTooLargeError):
            log.append_batch([b"x" * size])
    assert_intact(log, written)
    off = log.append(b"z" * (SEG - HEADER_LEN))  # exactly one full segment
    assert off % SEG == 0
    written[off] = b"z" * (SEG - HEADER_LEN)
    assert_intact(log, written)


@pytest.mark.parametrize("where", [0, 1, 5])
def test_batch_with_one_oversize_body_writes_nothing(make_log, body, where):
    log = make_log(max_message_size=1000)
    written = fill(log, body, 4, size=600)
    end, segs = log.max_offset, log.segments()
    batch = [body(100 + i, 900) for i in range(6)]
    batch.insert(where, b"x" * 1001)
    with pytest.raises(MessageTooLargeError):
        log.append_batch(batch)
    with pytest.raises(MessageTooLargeError):
        log.append_batch(iter(batch))
    assert log.max_offset == end
    assert log.segments() == segs
    assert_intact(log, written)
    nxt = log.append(b"after")
    assert nxt == end


# ---------------------------------------------------------------------------------------------
# StoreLockedError


def test_second_writer_is_refused(make_log, dirs, body):
    first = make_log()
    written = fill(first, body, 8)
    for paths in (dirs, [dirs[1]], [dirs[2], dirs[0]]):
        with pytest.raises(StoreLockedError) as info:
            make_log(paths)
        assert "rmqlog.lock" in str(info.value)
        assert not isinstance(info.value, (OSError, ValueError))
    # the refused opens changed nothing; the first writer goes on
    off = first.append(body(50))
    written[off] = body(50)
    assert_intact(first, written)
    # a reader needs no lock
    reader = make_log([dirs[0]], read_only=True)
    assert reader.max_offset == first.max_offset
    first.close()
    again = make_log()
    assert_intact(again, written)
    written[again.append(b"x")] = b"x"
    assert_intact(again, written)


# ---------------------------------------------------------------------------------------------
# ReadOnlyError


def test_read_only_errors(make_log, dirs, body):
    writer = make_log()
    written = fill(writer, body, 6)
    writer.close()
    reader = make_log(dirs, read_only=True)
    with pytest.raises(ReadOnlyError, match="read-only"):
        reader.append(b"x")
    with pytest.raises(ReadOnlyError):
        reader.append_batch([b"x"])
    with pytest.raises(CommitLogError):
        reader.append(memoryview(b"x"))
    assert_intact(reader, written)
    assert reader.refresh() == reader.max_offset


# ---------------------------------------------------------------------------------------------
# ClosedError


CLOSED_CALLS = {
    "append": lambda log: log.append(b"x"),
    "append_batch": lambda log: log.append_batch([b"x"]),
    "append_batch_empty": lambda log: log.append_batch([]),
    "read": lambda log: log.read(0),
    "read_record": lambda log: log.read_record(0),
    "scan": lambda log: log.scan(),
    "scan_range": lambda log: log.scan(0, 10),
    "iter": lambda log: iter(log),
    "offset_for_timestamp": lambda log: log.offset_for_timestamp(0),
    "min_offset": lambda log: log.min_offset,
    "max_offset": lambda log: log.max_offset,
    "flushed_offset": lambda log: log.flushed_offset,
    "flush": lambda log: log.flush(),
    "segments": lambda log: log.segments(),
    "refresh": lambda log: log.refresh(),
    "enter": lambda log: log.__enter__(),
}


@pytest.mark.parametrize(
    ("call", "read_only"),
    [
        (call, read_only)
        for call in sorted(CLOSED_CALLS)
        for read_only in (False, True)
        # a read-only log refuses appends as read-only, closed or not
        if not (read_only and call.startswith("append"))
    ],
)
def test_closed_log_refuses_everything(make_log, dirs, body, call, read_only):
    writer = make_log()
    fill(writer, body, 3)
    if read_only:
        writer.close()
    log = make_log([dirs[0]], read_only=True) if read_only else writer
    log.close()
    with pytest.raises(ClosedError, match="closed") as info:
        CLOSED_CALLS[call](log)
    assert isinstance(info.value, ValueError)
    assert log.closed
    log.close()
    assert log.closed
    assert log.read_only is read_only
    assert len(log.paths) == 3


def test_iterator_created_before_close(make_log, body):
    log = make_log()
    written = fill(log, body, 10)
    it = log.scan()
    first = next(it)
    assert first[0] == 0
    it2 = iter(log)
    log.close()
    with pytest.raises(ClosedError):
        next(it)
    with pytest.raises(ClosedError):
        next(it2)
    assert bytes(first[1]) == written[0]
    again = make_log()
    assert_intact(again, written)


# ---------------------------------------------------------------------------------------------
# CorruptionError


def flip_body_byte(seg_path, seg_start, offset, at=5):
    pos = offset - seg_start + HEADER_LEN + at
    with open(seg_path, "r+b") as f:
        f.seek(pos)
        old = f.read(1)
        f.seek(pos)
        f.write(bytes([old[0] ^ 0xFF]))


def test_corrupt_body_is_detected(make_log, body):
    log = make_log(flush="sync")
    written = fill(log, body, 30, size=300)
    offsets = list(written)
    victim = offsets[3]
    seg = next(s for s in log.segments() if s.start_offset <= victim < s.start_offset + s.size)
    end = log.max_offset
    log.close()
    flip_body_byte(seg.path, seg.start_offset, victim)

    log2 = make_log(flush="sync")
    assert log2.max_offset == end  # below the flushed offset: recovery keeps it
    with pytest.raises(CorruptionError) as info:
        log2.read(victim)
    assert str(victim) in str(info.value)
    assert seg.path in str(info.value)
    assert not isinstance(info.value, (ValueError, OSError))
    with pytest.raises(CorruptionError):
        log2.read_record(victim)
    for off in offsets:
        if off != victim:
            assert bytes(log2.read(off)) == written[off]
    got = []
    with pytest.raises(CorruptionError):
        for off, view in log2.scan():
            got.append((off, bytes(view)))
    assert got == [(o, written[o]) for o in offsets[:3]]
    with pytest.raises(CorruptionError):
        log2.scan(start=victim)
    after = [(o, bytes(v)) for o, v in log2.scan(start=offsets[4])]
    assert after == [(o, written[o]) for o in offsets[4:]]
    assert [o for o, _ in log2.scan(end=victim)] == offsets[:3]
    # the log still takes appends after the damage
    nxt = log2.append(b"still writable")
    assert nxt == end
    assert bytes(log2.read(nxt)) == b"still writable"
