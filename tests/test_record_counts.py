"""``len(log)`` and ``records_between``: the log's record count without a scan, through rolls,
``truncate_before``, reopens and a follower; ``verify_counted``; consumers' ``lag_records``."""

from __future__ import annotations

import pytest

from rmqlog import ClosedError, CommitLog, _native

SEG = 4096


def offsets(log):
    return [off for off, _ in log.scan()]


def check(log):
    """``len(log)`` and ``records_between`` over a few ranges are what a scan finds."""
    offs = offsets(log)
    assert len(log) == len(offs)
    points = [*offs[:: max(1, len(offs) // 5)], 0, log.max_offset, 2**64 + 5, -3]
    for a in points:
        for b in points:
            expected = sum(1 for o in offs if a <= o < b)
            assert log.records_between(a, b) == expected, (a, b)
    assert log.records_between() == len(offs)
    return len(offs)


def fill(log, n, start=0):
    for i in range(start, start + n, 4):
        log.append(b"r%d-" % i * (1 + i % 40))
        log.append_batch([b"b%d" % i * (1 + k * 11) for k in range(3)])


def test_len_through_rolls_truncation_and_reopens(tmp_path):
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    with CommitLog(dirs, segment_size=SEG) as log:
        assert len(log) == 0 and log  # an empty log is still true
        fill(log, 200)
        assert len(log.segments()) > 3
        assert check(log) == 200
        with CommitLog(dirs, read_only=True) as ro:  # a follower counts too
            assert check(ro) == 200
            fill(log, 40, start=200)
            ro.refresh()
            assert check(ro) == 240
        log.truncate_before(log.segments()[3].start_offset)
        left = check(log)
        assert left < 240
    with CommitLog(dirs, read_only=True) as ro:
        assert check(ro) == left
        records, damaged = ro.verify_counted()
        assert (records, damaged) == (left, [])
    with CommitLog(dirs, segment_size=SEG) as log:
        assert check(log) == left
        log.append(b"one more")
        assert len(log) == left + 1
    log2 = CommitLog(dirs, read_only=True)
    log2.close()
    with pytest.raises(ClosedError):
        len(log2)


def test_records_between_refuses_what_is_not_an_offset(tmp_path):
    with CommitLog(tmp_path / "s", segment_size=SEG) as log:
        log.append(b"x")
        for bad in ("0", 1.5, True):
            with pytest.raises(TypeError):
                log.records_between(bad)
        assert log.records_between(None, None) == 1


def test_consumers_lag_in_records(tmp_path):
    with CommitLog(tmp_path / "s", segment_size=SEG) as log:
        log.append_batch([b"x" * 300] * 30)
        with log.consumer("billing") as c:
            assert c.lag["records"] == 30
            got = len(c.poll(12))
            c.commit()
            lag = c.lag
            assert lag["records"] == 30 - got
        [info] = log.consumers()
        assert (info["lag_records"], info["lag_bytes"]) == (30 - got, lag["bytes"])
        assert log.stats()["consumers"]["billing"]["lag_records"] == 30 - got


def test_a_recorded_count_that_does_not_end_on_a_record_is_counted_again(tmp_path, caplog):
    """``rmqlog.counts`` is a cache: an entry whose position is not a record boundary (a file
    of another copy of the store) is not taken; the segment is counted from its start."""
    import struct
    import zlib

    d = tmp_path / "s"
    with CommitLog(d, segment_size=SEG) as log:
        fill(log, 200)
        truth = len(offsets(log))
    raw = bytearray((d / "rmqlog.counts").read_bytes())
    head, entry = 88, 32
    assert (len(raw) - head) // entry >= 2
    start, size, _, _ = struct.unpack_from("<4Q", raw, head)
    struct.pack_into("<4Q", raw, head, start, size, 7, 3)  # 7: inside the first record
    struct.pack_into("<I", raw, 12, zlib.crc32(bytes(raw[16:])))
    (d / "rmqlog.counts").write_bytes(bytes(raw))
    with caplog.at_level("WARNING", logger="rmqlog"), CommitLog(d, read_only=True) as log:
        assert check(log) == truth
        _native._flush_logging()  # the Rust side's records reach Python's logging queued
    assert "does not end on a record" in caplog.text
