"""Named consumers (``CommitLog.consumer``): positions the store keeps for each name, a poll that
waits for the next records (appended by any process), durable commits that a crash never undoes,
one holder per name across processes (released by ``close()`` or the holder's death), and what a
poll does when records it had not read were deleted.

The tests of one open of a name at a time run twice (the ``exclusive`` fixture): with the name
held alone (``exclusive=True``) and held shared (``exclusive=False``, the default) with no other
open, where the promises are the same. Several shared opens of one name at once are not tested
here: two simultaneous opens of a name always involve an ``exclusive=True`` one.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import os
import random
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _procs import child, expect_line, finish, sigkill, sleeps_in_futex, wait_for

import rmqlog
from rmqlog import (
    ClosedError,
    CommitLog,
    CommitLogError,
    ConsumerBusyError,
    DataLossError,
    InvalidOffsetError,
    OffsetOutOfRangeError,
)

SEGMENT = 64 * 1024
POSITIONS = "rmqlog.consumers"


def rec(i: int, size: int = 100) -> bytes:
    """Record ``i``'s body: recognisable, ``size`` bytes (children compute the same)."""
    head = b"r-%d-" % i
    return (head * (size // len(head) + 1))[:size]


def fill(log: CommitLog, n: int, start: int = 0, size: int = 100) -> list[int]:
    """Appends records ``start`` .. ``start + n - 1``; their offsets."""
    return log.append_batch([rec(i, size) for i in range(start, start + n)])


def got(records) -> list[tuple[int, bytes]]:
    return [(off, bytes(body)) for off, body in records]


def offsets(records) -> list[int]:
    return [off for off, _ in records]


def drain(consumer) -> list[tuple[int, bytes]]:
    """Everything from the consumer's position to the log's end, without waiting."""
    out: list[tuple[int, bytes]] = []
    while batch := consumer.poll(timeout=0):
        out += got(batch)
    return out


def listed(log: CommitLog, name: str) -> dict:
    [entry] = [c for c in log.consumers() if c["name"] == name]
    return entry


def str_dirs(dirs) -> list[str]:
    return [str(d) for d in dirs]


@pytest.fixture
def log(make_log):
    return make_log(segment_size=SEGMENT)


@pytest.fixture(params=[True, False], ids=["exclusive", "shared"])
def exclusive(request):
    """A test of one open of a name runs with the name held alone and held shared (the default):
    with one open at a time, both keep the same promises."""
    return request.param


# 1. Resume ----------------------------------------------------------------------------------------


def test_a_reopened_log_resumes_each_consumer_exactly_at_its_commit(make_log, dirs, exclusive):
    log = make_log(segment_size=SEGMENT)
    offs = fill(log, 50)
    with log.consumer("billing", exclusive=exclusive) as c:
        assert offsets(c.poll(20)) == offs[:20]
        assert c.commit() == offs[20]
        assert offsets(c.poll(10)) == offs[20:30]  # received, never committed
        assert c.position == offs[30] and c.committed == offs[20]
    with log.consumer("idle", start=offs[5], exclusive=exclusive):
        pass  # created, never committed
    log.close()

    again = make_log(segment_size=SEGMENT)
    # A known name ignores start.
    with again.consumer("billing", start="latest", exclusive=exclusive) as c:
        assert (c.position, c.committed) == (offs[20], offs[20])
        rest = drain(c)
    assert offsets(rest) == offs[20:]  # the uncommitted ones again, none before the commit
    assert [b for _, b in rest] == [rec(i) for i in range(20, 50)]
    with again.consumer("idle", exclusive=exclusive) as c:
        assert c.position == offs[5]
        assert offsets(drain(c)) == offs[5:]


def test_a_consumer_resumes_after_a_commit_then_more_appends(log, exclusive):
    offs = fill(log, 10)
    with log.consumer("c", exclusive=exclusive) as c:
        drain(c)
        c.commit()
    offs += fill(log, 10, start=10)
    with log.consumer("c", exclusive=exclusive) as c:
        assert got(drain(c)) == [(o, rec(i)) for i, o in enumerate(offs) if i >= 10]


# 2. Where a new name starts --------------------------------------------------------------------


def timestamps(log: CommitLog, offs: list[int]) -> list[int]:
    return [log.read_record(o).timestamp_ms for o in offs]


def three_groups(log: CommitLog) -> list[list[int]]:
    """Three batches of 5 records, each with its own millisecond timestamp."""
    groups = []
    for g in range(3):
        if g:
            time.sleep(0.02)
        groups.append(fill(log, 5, start=5 * g))
    stamps = [timestamps(log, grp) for grp in groups]
    assert stamps[0][-1] < stamps[1][0] and stamps[1][-1] < stamps[2][0]
    return groups


def aware(ms: int, hours: int = 0) -> dt.datetime:
    tz = dt.timezone(dt.timedelta(hours=hours))
    return dt.datetime.fromtimestamp(ms / 1000, tz=tz)


def test_every_start_form_for_a_new_name(log):
    old = fill(log, 70, size=1000)  # over two segments: the first goes
    assert log.truncate_before(old[-1]) > 0
    low = log.min_offset
    assert low > 0
    groups = three_groups(log)
    offs = [o for o, _ in log.scan()]
    stamps = timestamps(log, offs)
    t1 = log.read_record(groups[1][0]).timestamp_ms

    cases = [
        ("earliest", low),
        ("latest", log.max_offset),
        (groups[1][2], groups[1][2]),  # a record's start
        (log.max_offset, log.max_offset),  # the end is accepted
        (aware(t1), groups[1][0]),  # the first record at or after it
        (aware(t1, hours=5), groups[1][0]),  # any time zone: the same instant
        (aware(stamps[0] - 60_000), low),  # before every record
        (aware(stamps[-1] + 60_000), log.max_offset),  # after every record
    ]
    for n, (start, want) in enumerate(cases):
        with log.consumer(f"new-{n}", start=start) as c:
            assert (c.position, c.committed) == (want, want), start
    with log.consumer("default") as c:
        assert c.position == low  # "earliest" by default
    # Every one was created at its start, durably: listed, and a known name ignores start.
    assert {c["name"]: c["position"] for c in log.consumers()} == {
        "default": low,
        **{f"new-{n}": want for n, (_, want) in enumerate(cases)},
    }
    fill(log, 3, start=100)
    for n, (_, want) in enumerate(cases):
        with log.consumer(f"new-{n}", start="latest" if n == 0 else "earliest") as c:
            assert c.position == want


@pytest.mark.parametrize(
    "start, error, words",
    [
        ("newest", ValueError, '"earliest", "latest", an offset'),
        ("", ValueError, '"earliest", "latest"'),
        (1.5, TypeError, "got float"),
        (True, TypeError, "got bool"),
        (b"earliest", TypeError, "got bytes"),
        ([0], TypeError, "got list"),
        (dt.datetime(2024, 1, 1), ValueError, "naive datetime"),
        (dt.date(2024, 1, 1), TypeError, "aware datetime"),
        (-1, ValueError, "offset from 0"),
        (2**64, ValueError, "offset from 0"),
    ],
)
def test_a_bad_start_is_refused_saying_what_is_accepted(log, start, error, words):
    fill(log, 5)
    with pytest.raises(error, match=re.escape(words)):
        log.consumer("x", start=start)
    c = log.consumer("y")
    with pytest.raises(error, match=re.escape(words)):
        c.seek(start)
    assert c.position == 0
    assert [x["name"] for x in log.consumers()] == ["y"]  # nothing created for "x"


def test_a_start_offset_off_a_record_or_past_the_end_is_refused(log):
    offs = fill(log, 5)
    with pytest.raises(InvalidOffsetError):
        log.consumer("x", start=offs[1] + 1)
    with pytest.raises(OffsetOutOfRangeError):
        log.consumer("x", start=log.max_offset + 132)
    assert log.consumers() == []


def test_a_seek_off_a_record_or_past_the_end_is_refused(log):
    offs = fill(log, 5)
    c = log.consumer("y", exclusive=True)
    with pytest.raises(InvalidOffsetError):
        c.seek(offs[2] + 3)
    with pytest.raises(OffsetOutOfRangeError):
        c.seek(log.max_offset + 132)
    assert c.position == 0
    assert offsets(c.poll(timeout=0)) == offs


def test_a_datetime_start_inside_a_millisecond_skips_the_records_before_it(log):
    """A record's timestamp is whole milliseconds: a start 0.5 ms after a record's timestamp is
    after that record, so the first record at or after it is the next millisecond's."""
    groups = three_groups(log)
    t1 = log.read_record(groups[1][0]).timestamp_ms
    start = aware(t1) + dt.timedelta(microseconds=500)
    with log.consumer("sub-ms", start=start) as c:
        assert c.position == groups[2][0], (c.position, groups)


# 3. Waiting -------------------------------------------------------------------------------------


def test_poll_returns_nothing_after_its_timeout_and_at_once_with_zero(log, exclusive):
    offs = fill(log, 3)
    c = log.consumer("c", exclusive=exclusive)
    assert offsets(c.poll(timeout=0)) == offs  # records there: no wait
    t = time.monotonic()
    assert c.poll(timeout=0) == []
    assert time.monotonic() - t < 0.1
    t = time.monotonic()
    assert c.poll(timeout=0.3) == []
    took = time.monotonic() - t
    assert 0.28 <= took < 2.0, took
    assert c.position == log.max_offset  # an empty poll moves nothing
    off = log.append(b"late")
    assert got(c.poll(timeout=0.3)) == [(off, b"late")]


def test_a_waiting_poll_uses_no_cpu_and_releases_the_gil(log, exclusive):
    fill(log, 1)
    c = log.consumer("c", start="latest", exclusive=exclusive)
    spins = 0
    stop = threading.Event()

    def spin():
        nonlocal spins
        while not stop.is_set():
            spins += 1
            time.sleep(0.001)

    t = threading.Thread(target=spin)
    t.start()
    before = resource.getrusage(resource.RUSAGE_THREAD)
    assert c.poll(timeout=1.0) == []
    after = resource.getrusage(resource.RUSAGE_THREAD)
    stop.set()
    t.join()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu < 0.1, f"{cpu} s of CPU in 1 s of waiting"
    assert spins > 100  # the other thread ran meanwhile


def test_a_poll_waiting_in_another_thread_is_woken_by_an_append(log, exclusive):
    fill(log, 2)
    c = log.consumer("c", start="latest", exclusive=exclusive)
    out = []
    t = threading.Thread(target=lambda: out.append(got(c.poll(timeout=30))))
    t.start()
    time.sleep(0.2)
    off = log.append(b"wake")
    t.join(10)
    assert not t.is_alive() and out == [[(off, b"wake")]]


APPENDER = """
import sys
from rmqlog import CommitLog
dirs, mode, n = sys.argv[1].split("|"), sys.argv[2], int(sys.argv[3])
log = CommitLog(dirs, segment_size=65536, exclusive=mode != "shared")
print("ready", flush=True)
sys.stdin.readline()  # "go": the parent's poll waits by then
i = 0
while i < n:
    k = min(1 + i % 7, n - i)
    log.append_batch([b"w-%d-" % j + bytes(j % 900) for j in range(i, i + k)])
    i += k
print("done", flush=True)
log.close()
"""


def appended(j: int) -> bytes:
    return b"w-%d-" % j + bytes(j % 900)


@pytest.mark.parametrize("mode", ["read_only", "shared"])
def test_a_waiting_poll_is_woken_by_appends_of_another_process(tmp_path, mode, exclusive):
    """The consumer's log is a read-only open (the writer, another process, opens after it) or a
    shared writer beside a shared writer process; either way the poll wakes for the other
    process's appends and gets every record, in order."""
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    n = 400
    if mode == "read_only":
        CommitLog(dirs, segment_size=SEGMENT).close()
        log = CommitLog(dirs, read_only=True)
    else:
        log = CommitLog(dirs, segment_size=SEGMENT, exclusive=False)
    writer = child(APPENDER, "|".join(dirs), mode, str(n))
    try:
        c = log.consumer("follower", start="latest", exclusive=exclusive)
        expect_line(writer, "ready")
        go = threading.Timer(0.3, lambda: (writer.stdin.write("go\n"), writer.stdin.flush()))
        go.start()
        t = time.monotonic()
        seen = got(c.poll(timeout=30))
        waited = time.monotonic() - t
        go.join()
        assert seen, "the poll timed out: the other process's append did not wake it"
        assert 0.25 <= waited < 15, waited
        while len(seen) < n:
            # A shared open claims what each poll returns until it commits, and a name keeps
            # at most 120 claims: under load each poll may get only a record or two.
            c.commit()
            more = got(c.poll(timeout=15))
            assert more, f"{len(seen)} of {n} records came"
            seen += more
        expect_line(writer, "done")
        assert writer.wait(30) == 0, writer.stderr.read()
        assert len(seen) == n and c.poll(timeout=0) == []
        assert [b for _, b in seen] == [appended(j) for j in range(n)]
        assert seen == got(log.scan(seen[0][0]))  # every record once, in log order
        assert c.commit() == log.max_offset
        c.close()
    finally:
        finish(writer)
        log.close()


INTERRUPTED = """
import sys
from rmqlog import CommitLog
log = CommitLog(sys.argv[1], read_only=True)
c = log.consumer("waiter", start="latest", exclusive=sys.argv[2] == "1")
print("ready", flush=True)
try:
    c.poll(timeout=60)
    print("returned", flush=True)
except KeyboardInterrupt:
    print("interrupted", c.position == log.max_offset, c.poll(timeout=0), flush=True)
"""


def test_ctrl_c_interrupts_a_waiting_poll(tmp_path, exclusive):
    d = str(tmp_path / "d")
    with CommitLog(d, segment_size=SEGMENT) as log:
        log.append(b"x")
        w = child(INTERRUPTED, d, "1" if exclusive else "0")
        try:
            expect_line(w, "ready")
            if os.uname().machine == "x86_64":
                assert wait_for(lambda: sleeps_in_futex(w.pid), 30), "the poll never slept"
            else:
                time.sleep(0.5)
            t = time.monotonic()
            w.send_signal(signal.SIGINT)
            out, err = w.communicate(timeout=30)
            took = time.monotonic() - t
        finally:
            finish(w)
    assert out.strip() == "interrupted True []", err
    assert took < 10


# 4. Commit ----------------------------------------------------------------------------------------


def test_commit_refuses_an_offset_past_the_records_received(log, exclusive):
    offs = fill(log, 10)
    c = log.consumer("c", exclusive=exclusive)
    c.poll(3)
    with pytest.raises(ValueError, match="past the records it received"):
        c.commit(offs[4])
    with pytest.raises(ValueError, match="past the records it received"):
        c.commit(log.max_offset)
    assert c.committed == 0
    assert listed(log, "c")["position"] == 0  # nothing written


def test_commit_refuses_an_offset_off_a_record_boundary(log, exclusive):
    offs = fill(log, 10)
    c = log.consumer("c", exclusive=exclusive)
    c.poll(5)
    c.commit()
    for bad in (offs[1] + 1, offs[3] - 1, 1):
        with pytest.raises(InvalidOffsetError):
            c.commit(bad)
    with pytest.raises(ValueError):
        c.commit(-1)
    with pytest.raises(TypeError):
        c.commit("0")
    assert (c.committed, c.position) == (offs[5], offs[5])


def test_a_shared_open_refuses_seek_and_commits_never_go_back(log):
    """A shared name's position is every open's: seek() is refused (saying how to seek), and a
    commit below the committed position changes nothing."""
    offs = fill(log, 10)
    c = log.consumer("s")
    for to in ("earliest", "latest", offs[2]):
        with pytest.raises(CommitLogError, match="exclusive=True to seek"):
            c.seek(to)
    c.poll(6)
    assert c.commit() == offs[6]
    assert c.commit(offs[2]) == offs[6] == c.committed
    assert listed(log, "s")["position"] == offs[6]
    assert offsets(c.poll(2)) == offs[6:8]


def test_commit_defaults_to_the_position_and_may_go_back_to_an_earlier_record(log):
    exclusive = True  # shared: see test_a_shared_open_refuses_seek_and_commits_never_go_back
    offs = fill(log, 10)
    c = log.consumer("c", exclusive=exclusive)
    assert c.commit() == 0 and c.committed == 0  # nothing polled: commits the start
    c.poll(6)
    assert c.commit() == offs[6] == c.committed
    assert c.commit(offs[2]) == offs[2]  # back to an earlier record
    assert (c.committed, c.position) == (offs[2], offs[6])  # the position stays
    assert listed(log, "c")["position"] == offs[2]
    assert c.commit(offs[4]) == offs[4]  # forward again, up to the position
    assert c.commit(offs[4]) == offs[4]  # the same one again
    assert offsets(c.poll(2)) == offs[6:8]
    c.close()
    with log.consumer("c", exclusive=exclusive) as again:
        assert again.position == offs[4]


def test_a_reopened_consumer_commits_only_the_records_it_was_given(log, exclusive):
    """An open that polled and closed without committing: the next open of the name gets those
    records again, and its commit after a short poll covers what that poll returned, not the
    rest of what the first open had been given."""
    offs = fill(log, 20)
    with log.consumer("c", exclusive=exclusive) as c:
        assert offsets(c.poll(10)) == offs[:10]
    with log.consumer("c", exclusive=exclusive) as c:
        assert offsets(c.poll(3)) == offs[:3]
        assert c.commit() == offs[3]  # what it was given, not the first open's ten
        assert c.position == offs[3]  # the next record a poll returns
        assert offsets(c.poll(2)) == offs[3:5]
    with log.consumer("c", exclusive=exclusive) as c:
        assert c.position == offs[3]
        assert offsets(drain(c)) == offs[3:]


# 5. Seek and lag --------------------------------------------------------------------------------


def test_seek_moves_the_position_and_the_commit_follows_only_when_made(log):
    exclusive = True  # a shared name's position is every open's: see the next test
    groups = three_groups(log)
    offs = [o for g in groups for o in g]
    c = log.consumer("c", exclusive=exclusive)
    c.poll(4)
    c.commit()
    assert c.seek("latest") == log.max_offset == c.position
    assert c.poll(timeout=0) == []
    assert c.seek(offs[7]) == offs[7]
    assert offsets(c.poll(2)) == offs[7:9]
    assert c.seek("earliest") == 0
    assert offsets(c.poll(1)) == offs[:1]
    t2 = log.read_record(groups[2][0]).timestamp_ms
    assert c.seek(aware(t2, hours=-3)) == groups[2][0]
    assert c.seek(log.max_offset) == log.max_offset
    assert c.committed == offs[4]  # seeks never commit
    assert listed(log, "c")["position"] == offs[4]
    c.seek(offs[2])
    assert c.commit() == offs[2]  # the commit follows the seek
    c.close()
    with log.consumer("c", exclusive=exclusive) as again:
        assert again.position == offs[2]


def test_lag_counts_records_and_bytes_from_the_committed_position(log, exclusive):
    offs = fill(log, 20, size=333)
    c = log.consumer("c", exclusive=exclusive)
    assert c.lag == {"records": 20, "bytes": log.max_offset}
    c.poll(7)
    assert c.lag == {"records": 20, "bytes": log.max_offset}  # polled is not committed
    c.commit()
    assert c.lag == {"records": 13, "bytes": log.max_offset - offs[7]}
    offs += fill(log, 5, start=20)
    assert c.lag == {"records": 18, "bytes": log.max_offset - offs[7]}
    c.poll(4)
    c.commit()
    assert c.lag == {"records": 14, "bytes": log.max_offset - offs[11]}
    drain(c)
    c.commit()
    assert c.lag == {"records": 0, "bytes": 0}
    assert listed(log, "c")["lag_bytes"] == 0


# 6. Listing and dropping ------------------------------------------------------------------------


def test_consumers_lists_every_name_sorted_with_its_state(log):
    assert log.consumers() == []
    offs = fill(log, 10)
    before = int(time.time() * 1000)
    held = log.consumer("zeta")
    with log.consumer("alpha") as a:
        a.poll(4)
        time.sleep(0.01)
        a.commit()
    mid = log.consumer("Mid", start=offs[2])
    after = int(time.time() * 1000)
    listing = log.consumers()
    assert [c["name"] for c in listing] == ["Mid", "alpha", "zeta"]
    by = {c["name"]: c for c in listing}
    assert set(by["alpha"]) >= {  # the keys every entry has (later ones may add more)
        "name",
        "position",
        "lag_bytes",
        "committed_ms",
        "created_ms",
        "open",
    }
    assert by["alpha"]["position"] == offs[4]
    assert by["alpha"]["lag_bytes"] == log.max_offset - offs[4]
    assert by["Mid"]["position"] == offs[2]
    assert by["zeta"]["position"] == 0 and by["zeta"]["lag_bytes"] == log.max_offset
    for c in listing:
        assert before <= c["created_ms"] <= c["committed_ms"] <= after, c
    assert by["alpha"]["committed_ms"] > by["alpha"]["created_ms"]
    assert {n: c["open"] for n, c in by.items()} == {"Mid": True, "alpha": False, "zeta": True}
    held.close()
    mid.poll(1)  # polled, not committed: the listing shows the committed position
    assert listed(log, "zeta")["open"] is False
    assert listed(log, "Mid")["position"] == offs[2]
    mid.close()
    assert not any(c["open"] for c in log.consumers())


def test_drop_consumer_forgets_a_name_and_refuses_an_open_or_unknown_one(log):
    offs = fill(log, 10)
    for name, n in (("a", 3), ("b", 5)):
        with log.consumer(name) as c:
            c.poll(n)
            c.commit()
    c = log.consumer("a")
    with pytest.raises(ConsumerBusyError, match='"a"'):
        log.drop_consumer("a")
    assert [x["name"] for x in log.consumers()] == ["a", "b"]
    c.close()
    with pytest.raises(ValueError, match=r'no consumer named "nope".*it has: a, b'):
        log.drop_consumer("nope")
    log.drop_consumer("a")
    assert [(x["name"], x["position"]) for x in log.consumers()] == [("b", offs[5])]
    with pytest.raises(ValueError, match=r'"a".*it has: b'):
        log.drop_consumer("a")  # gone
    with log.consumer("a", start=offs[8]) as c:  # a fresh name, at its start
        assert (c.position, c.committed) == (offs[8], offs[8])
    with log.consumer("a", start="earliest") as c:  # known again
        assert c.position == offs[8]
    log.drop_consumer("a")
    with log.consumer("a", start="latest") as c:
        assert c.position == log.max_offset
    with log.consumer("b") as c:  # untouched by the other's drops
        assert c.position == offs[5]
    with pytest.raises(ValueError, match="1 to 200 bytes"):
        log.drop_consumer("")


def test_a_name_made_again_after_a_drop_polls_from_its_new_start(log, exclusive):
    offs = fill(log, 20)
    for _ in range(3):  # a first life of a few polls and commits
        with log.consumer("again", exclusive=exclusive) as c:
            c.poll(3)
            c.commit()
    assert listed(log, "again")["position"] == offs[9]
    log.drop_consumer("again")
    with log.consumer("again", start=offs[1], exclusive=exclusive) as c:
        assert c.position == offs[1]
        assert offsets(c.poll(2)) == offs[1:3]
        assert c.commit() == offs[3]
    with log.consumer("again", exclusive=exclusive) as c:
        assert offsets(c.poll(2)) == offs[3:5]


def test_each_open_resumes_at_the_last_commit_whichever_mode_made_it(log):
    """Opens of one name one after the other, held alone or shared: each resumes at the commit
    of the one before, also when that one committed back to an earlier record."""
    offs = fill(log, 30)
    for _ in range(3):
        with log.consumer("m") as c:  # shared
            c.poll(3)
            c.commit()
    with log.consumer("m", exclusive=True) as c:
        assert c.position == offs[9]
        c.poll(5)
        assert c.commit(offs[2]) == offs[2]  # back: records 2.. are to be done again
    with log.consumer("m") as c:
        assert (c.position, c.committed) == (offs[2], offs[2])
        assert offsets(c.poll(2)) == offs[2:4]
        assert c.commit() == offs[4]
    with log.consumer("m", exclusive=True) as c:
        assert offsets(c.poll(1)) == offs[4:5]


def test_drop_consumer_names_no_known_names_in_an_empty_store(log):
    with pytest.raises(ValueError, match=r"it has: none"):
        log.drop_consumer("x")


HOLDER = """
import os, sys
from rmqlog import CommitLog
dirs, name, exclusive, n = sys.argv[1].split("|"), sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
log = CommitLog(dirs[::-1], read_only=True)  # the directories in another order
c = log.consumer(name, exclusive=exclusive)
c.poll(n, timeout=0)
print("held", c.commit(), flush=True)
sys.stdin.readline()
c.close()
print("closed", flush=True)
sys.stdin.readline()
"""


def holder(dirs, name: str, exclusive: bool = True, n: int = 3) -> tuple[subprocess.Popen, int]:
    """A child holding ``name`` (read-only open), after polling and committing ``n`` records."""
    p = child(HOLDER, "|".join(str_dirs(dirs)), name, "1" if exclusive else "0", str(n))
    return p, int(expect_line(p, "held").split()[1])


def test_a_name_held_by_another_process_is_listed_open_until_it_is_killed(log, dirs):
    offs = fill(log, 10)
    p, committed = holder(dirs, "remote", exclusive=False)
    try:
        assert committed == offs[3]
        entry = listed(log, "remote")
        assert (entry["open"], entry["position"]) == (True, offs[3])
        with pytest.raises(ConsumerBusyError):
            log.drop_consumer("remote")
        sigkill(p)
        assert listed(log, "remote")["open"] is False
        log.drop_consumer("remote")  # let go: it may be dropped now
        assert log.consumers() == []
    finally:
        finish(p)


def test_a_name_closed_by_another_process_is_listed_closed(log, dirs):
    offs = fill(log, 10)
    p, _ = holder(dirs, "remote")
    try:
        assert listed(log, "remote")["open"] is True
        p.stdin.write("\n")
        p.stdin.flush()
        expect_line(p, "closed")
        assert listed(log, "remote")["open"] is False  # the process lives on, the name is free
        with log.consumer("remote") as c:
            assert c.position == offs[3]
    finally:
        finish(p)


# 7. Exclusive ownership -------------------------------------------------------------------------


def test_an_exclusive_consumer_refuses_a_second_open_in_its_process(log):
    offs = fill(log, 10)
    c = log.consumer("solo", exclusive=True)
    c.poll(4)
    c.commit()
    for exclusive in (True, False):
        with pytest.raises(ConsumerBusyError, match='"solo"'):
            log.consumer("solo", exclusive=exclusive)
    with log.consumer("other", exclusive=True):  # other names are free
        pass
    c.close()
    with log.consumer("solo", exclusive=True) as again:
        assert again.position == offs[4]
        with pytest.raises(ConsumerBusyError):
            log.consumer("solo")
    # The other way round: a name held shared refuses an exclusive open.
    with log.consumer("solo") as shared, pytest.raises(ConsumerBusyError):
        log.consumer("solo", exclusive=True)
    assert shared.closed


def test_an_exclusive_consumer_is_refused_through_another_open_of_the_store(log, dirs):
    fill(log, 5)
    ro = CommitLog(str_dirs(dirs)[::-1], read_only=True)
    try:
        with log.consumer("solo", exclusive=True):
            with pytest.raises(ConsumerBusyError):
                ro.consumer("solo")
        with ro.consumer("solo", exclusive=True), pytest.raises(ConsumerBusyError):
            log.consumer("solo")
    finally:
        ro.close()


TRY_OPEN = """
import sys
from rmqlog import CommitLog, ConsumerBusyError
log = CommitLog(sys.argv[1].split("|"), read_only=True)
try:
    c = log.consumer(sys.argv[2], exclusive=sys.argv[3] == "1")
except ConsumerBusyError as e:
    print("busy", type(e).__name__)
else:
    print("opened", c.position)
"""


def try_open(dirs, name: str, exclusive: bool) -> str:
    p = child(TRY_OPEN, "|".join(str_dirs(dirs)), name, "1" if exclusive else "0")
    out, err = p.communicate(timeout=30)
    finish(p)
    assert p.returncode == 0, err
    return out.strip()


def test_an_exclusive_consumer_in_another_process_holds_the_name_until_killed(log, dirs):
    offs = fill(log, 10)
    p, committed = holder(dirs, "solo", exclusive=True, n=6)
    try:
        assert committed == offs[6]
        for exclusive in (True, False):
            with pytest.raises(ConsumerBusyError, match='"solo"'):
                log.consumer("solo", exclusive=exclusive)
        sigkill(p)
        with log.consumer("solo", exclusive=True) as c:  # let go, at the dead one's commit
            assert c.position == offs[6]
    finally:
        finish(p)


def test_an_exclusive_consumer_refuses_another_process_until_closed(log, dirs):
    offs = fill(log, 10)
    c = log.consumer("solo", exclusive=True)
    c.poll(2)
    c.commit()
    assert try_open(dirs, "solo", exclusive=False) == "busy ConsumerBusyError"
    assert try_open(dirs, "solo", exclusive=True) == "busy ConsumerBusyError"
    c.close()
    assert try_open(dirs, "solo", exclusive=True) == f"opened {offs[2]}"


# 8. Records deleted before they were read -------------------------------------------------------


def big_log(log: CommitLog) -> list[int]:
    """300 records of 1000 bytes: about 63 a segment, five segments."""
    offs = fill(log, 300, size=1000)
    assert len(log.segments()) >= 4
    return offs


def test_a_shared_name_behind_a_truncation_raises_data_loss_once_and_goes_on(log):
    """Shared: the open that finds the loss raises DataLossError naming the range and saying
    the name goes on; the name's position moves to the first record left, durably, and the
    next poll (of any open) reads from there."""
    offs = big_log(log)
    c = log.consumer("slow")
    c.poll(5)
    c.commit()
    log.truncate_before(offs[150])
    low = log.min_offset
    with pytest.raises(DataLossError, match=rf"\[{offs[5]}, {low}\).*goes on from {low}"):
        c.poll(timeout=0)
    assert listed(log, "slow")["position"] == low
    other = log.consumer("slow")
    assert offsets(other.poll(2)) == [o for o in offs if o >= low][:2]


def test_a_consumer_behind_a_truncation_raises_data_loss_until_it_seeks(log):
    exclusive = True  # shared: see the test before
    offs = big_log(log)
    c = log.consumer("slow", exclusive=exclusive)
    c.poll(5)
    c.commit()
    fast = log.consumer("fast", exclusive=exclusive)
    fast.poll(200)
    log.truncate_before(offs[150])
    low = log.min_offset
    assert offs[5] < low <= offs[150]
    for _ in range(3):  # at every poll, not only the first
        with pytest.raises(DataLossError) as e:
            c.poll(timeout=0)
        assert f"[{offs[5]}, {low})" in str(e.value)
        assert '"slow"' in str(e.value)
        assert listed(log, "slow")["position"] == offs[5]  # a raise commits nothing
    assert isinstance(e.value, CommitLogError)
    with pytest.raises(DataLossError, match=rf"\[{offs[5]}, {low}\)"):
        c.poll_batches(timeout=0)
    assert (c.position, c.committed) == (offs[5], offs[5])
    assert offsets(fast.poll(3)) == offs[200:203]  # a consumer past the deletion goes on
    assert c.seek("earliest") == low
    first = c.poll(2)
    assert offsets(first) == [o for o in offs if o >= low][:2]
    assert c.commit() > low


def test_a_reopened_consumer_behind_a_truncation_raises_data_loss(log, exclusive):
    offs = big_log(log)
    with log.consumer("slow", exclusive=exclusive) as c:
        c.poll(5)
        c.commit()
    log.truncate_before(offs[150])
    low = log.min_offset
    with (
        log.consumer("slow", exclusive=exclusive) as c,
        pytest.raises(DataLossError, match=rf"\[{offs[5]}, {low}\)"),
    ):
        c.poll(timeout=0)
    with log.consumer("slow", on_loss="skip", exclusive=exclusive) as c:
        assert offsets(c.poll(1)) == [low]


def rmqlog_warnings(caplog, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "rmqlog" and r.levelno == logging.WARNING and text in r.getMessage()
    ]


def test_a_consumer_with_on_loss_skip_warns_of_the_range_and_goes_on(log, caplog, exclusive):
    caplog.set_level(logging.WARNING, logger="rmqlog")
    offs = big_log(log)
    c = log.consumer("lossy", on_loss="skip", exclusive=exclusive)
    c.poll(5)
    c.commit()
    log.truncate_before(offs[150])
    low = log.min_offset
    first = c.poll(3)
    assert offsets(first) == [o for o in offs if o >= low][:3]
    rmqlog._native._flush_logging()
    rng = f"[{offs[5]}, {low})"
    assert wait_for(lambda: rmqlog_warnings(caplog, rng)), caplog.text
    assert '"lossy"' in rmqlog_warnings(caplog, rng)[0]
    assert offsets(c.poll(2)) == [o for o in offs if o >= low][3:5]  # on, no more warnings
    rmqlog._native._flush_logging()
    time.sleep(0.1)
    assert len(rmqlog_warnings(caplog, "were deleted")) == 1
    assert c.commit() > low


def test_on_loss_must_be_raise_or_skip(log):
    with pytest.raises(ValueError, match=r'"raise".*"skip"'):
        log.consumer("x", on_loss="ignore")
    with pytest.raises(TypeError):
        log.consumer("x", on_loss=1)
    assert log.consumers() == []


# 9. Names, and a closed consumer ----------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["billing", "x" * 200, "é" * 100, "with spaces/and:punctuation", "日本語", "a.b-c_d"],
)
def test_a_good_name_is_kept_exactly(log, make_log, name):
    offs = fill(log, 3)
    with log.consumer(name) as c:
        assert c.name == name
        c.poll(2)
        c.commit()
    assert [(x["name"], x["position"]) for x in log.consumers()] == [(name, offs[2])]
    log.close()
    with make_log(segment_size=SEGMENT).consumer(name) as c:
        assert c.position == offs[2]


@pytest.mark.parametrize(
    "name", ["", "x" * 201, "é" * 101, "a\nb", "tab\there", "nul\0", "del\x7f", "c1\x85"]
)
def test_a_bad_name_is_refused_saying_what_is_accepted(log, name):
    with pytest.raises(ValueError, match="1 to 200 bytes of UTF-8 with no control characters"):
        log.consumer(name)
    assert log.consumers() == []


@pytest.mark.parametrize("name", [None, 5, b"billing"])
def test_a_name_that_is_no_str_is_a_type_error(log, name):
    with pytest.raises(TypeError, match="name"):
        log.consumer(name)


def test_a_closed_consumer_refuses_everything_with_a_clear_error(log, exclusive):
    fill(log, 5)
    c = log.consumer("c", exclusive=exclusive)
    c.poll(2)
    assert not c.closed
    c.close()
    assert c.closed
    c.close()  # again: nothing
    calls = {
        "poll": lambda: c.poll(),
        "poll_batches": lambda: c.poll_batches(),
        "commit": lambda: c.commit(),
        "seek": lambda: c.seek("earliest"),
        "lag": lambda: c.lag,
        "position": lambda: c.position,
        "committed": lambda: c.committed,
    }
    for what, call in calls.items():
        with pytest.raises(CommitLogError, match="closed"):
            call()
        assert c.closed, what
    assert c.name == "c" and "closed" in repr(c)
    with log.consumer("c", exclusive=exclusive) as d:  # the name is free; the commit was never made
        assert d.position == 0
    assert d.closed


def test_a_consumer_of_a_closed_log_raises_closed_error(log):
    fill(log, 5)
    c = log.consumer("c")
    c.poll(1)
    log.close()
    for call in (lambda: c.poll(timeout=0), lambda: c.commit(), lambda: c.seek(0)):
        with pytest.raises(ClosedError):
            call()
    with pytest.raises(ClosedError):
        log.consumer("d")
    with pytest.raises(ClosedError):
        log.consumers()
    with pytest.raises(ClosedError):
        log.drop_consumer("c")
    c.close()


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-3, ValueError), (1.5, TypeError)])
def test_max_records_must_be_a_positive_int(log, bad, error):
    fill(log, 3)
    c = log.consumer("c")
    with pytest.raises(error, match="max_records"):
        c.poll(bad, timeout=0)
    assert c.position == 0


# 10. Crashes --------------------------------------------------------------------------------------


# Appends batches of 1 to 5 records until a line on stdin, then says how many and where it ended.
PRODUCER = """
import sys, threading, time
from rmqlog import CommitLog
log = CommitLog(sys.argv[1].split("|"), segment_size=65536)
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
i = 0
while not stop.is_set() or i < 200:
    k = 1 + i % 5
    log.append_batch([b"c-%d-" % j + bytes(j % 700) for j in range(i, i + k)])
    i += k
    time.sleep(0.004)
print("done", i, log.max_offset, flush=True)
log.close()
"""

# Polls a random number of records, checks and prints them with the offset after the last one,
# "processes" them, commits, prints the commit: each line is written and flushed before the
# consumer goes on. Runs until killed, or (given an end) until its commit reaches it.
WORKER = """
import random, sys, time
from rmqlog import CommitLog
dirs, end, seed = sys.argv[1].split("|"), int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
log = CommitLog(dirs, read_only=True)
c = log.consumer("worker", exclusive=sys.argv[4] == "1")
out = sys.stdout
out.write("start %d\\n" % c.position)
out.flush()
committed = c.committed
while end < 0 or committed < end:
    recs = c.poll(rng.randint(1, 40), timeout=20)
    if not recs:
        continue
    for off, body in recs:
        b = bytes(body)
        j = int(b[2 : b.index(b"-", 2)])
        assert b == b"c-%d-" % j + bytes(j % 700), off
    after = log.read_record(recs[-1][0]).next_offset
    out.write("polled %s %d\\n" % (",".join(str(o) for o, _ in recs), after))
    out.flush()
    time.sleep(rng.random() * 0.01)
    committed = c.commit()
    out.write("committed %d\\n" % committed)
    out.flush()
    time.sleep(rng.random() * 0.005)
out.write("end\\n")
out.flush()
"""


class Run:
    """What one worker process printed: where it started, each poll, each commit."""

    def __init__(self, line: str):
        kind, start = line.split()
        assert kind == "start", line
        self.start = int(start)
        self.delivered: list[int] = []
        self.processed: set[int] = set()  # delivered, then covered by a commit of this run
        self.events: list[tuple[str, int]] = []  # ("polled", end) / ("committed", offset)

    def take(self, line: str) -> str:
        if not line.endswith("\n"):
            return ""  # cut short by the kill (never: each line is one write)
        kind, *rest = line.split()
        if kind == "polled":
            self.delivered += [int(o) for o in rest[0].split(",")]
            self.events.append(("polled", int(rest[1])))
        elif kind == "committed":
            value = int(rest[0])
            # A commit covers what this run was given, all of it, and nothing more.
            assert self.events and self.events[-1][0] == "polled", self.events
            assert value == self.events[-1][1], (value, self.events[-1])
            self.processed.update(o for o in self.delivered if o < value)
            self.events.append(("committed", value))
        return kind

    def landed(self, resumed_at: int) -> None:
        """The next run resumed at ``resumed_at``: past this run's last returned commit, its
        commit in flight reached the store before the kill (its write done, the sync or the
        print not), so this run processed what it was given below it."""
        if resumed_at > self.last_commit():
            self.processed.update(o for o in self.delivered if o < resumed_at)

    def last_commit(self) -> int:
        return max((v for kind, v in self.events if kind == "committed"), default=self.start)

    def next_starts(self) -> set[int]:
        """Where the next run may resume: the last commit that returned, or the one in flight
        (the end of a poll printed after it, whose commit may have been made)."""
        ok = {self.last_commit()}
        if self.events and self.events[-1][0] == "polled":
            ok.add(self.events[-1][1])
        return ok


def test_a_killed_consumer_resumes_at_its_last_commit_and_skips_nothing(tmp_path, exclusive):
    """Consumer processes SIGKILLed right after a poll (before its commit) or right after a
    commit returned, while a producer process appends: each restart resumes at the last commit
    that returned (or the one in flight), every record is delivered in order from there, and
    every record is processed (delivered and committed by one process) at least once."""
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    joined = "|".join(dirs)
    flag = "1" if exclusive else "0"
    CommitLog(dirs, segment_size=SEGMENT).close()
    producer = child(PRODUCER, joined)
    runs: list[Run] = []
    workers: list[subprocess.Popen] = []
    rng = random.Random(7)
    allowed = {0}  # a new name, created at the store's start
    try:
        for k in range(16):
            w = child(WORKER, joined, "-1", str(k), flag)
            workers.append(w)
            run = Run(expect_line(w, "start") + "\n")
            assert run.start in allowed, (k, run.start, allowed)
            if runs:
                runs[-1].landed(run.start)
            target = "polled" if k % 2 == 0 else "committed"
            count = rng.randint(1, 4)
            while count:
                line = w.stdout.readline()
                assert line, w.stderr.read()
                if run.take(line) == target:
                    count -= 1
            sigkill(w)
            for line in w.stdout.read().splitlines(keepends=True):  # printed before it died
                run.take(line)
            runs.append(run)
            allowed = run.next_starts()
        producer.stdin.write("stop\n")
        producer.stdin.flush()
        _, n, end = expect_line(producer, "done").split()
        n, end = int(n), int(end)
        w = child(WORKER, joined, str(end), "99", flag)
        workers.append(w)
        out, err = w.communicate(timeout=60)
        assert w.returncode == 0, err
        lines = out.splitlines(keepends=True)
        run = Run(lines[0])
        assert run.start in allowed, (run.start, allowed)
        runs[-1].landed(run.start)
        for line in lines[1:-1]:
            run.take(line)
        assert lines[-1] == "end\n"
        runs.append(run)
    finally:
        finish(producer, *workers)

    with CommitLog(dirs, read_only=True) as log:
        every = [o for o, _ in log.scan()]
        assert len(every) == n and log.max_offset == end
        index = {o: i for i, o in enumerate(every)}
        for r in runs:  # from its start, in log order, none skipped
            i = index.get(r.start, len(every))
            assert r.delivered == every[i : i + len(r.delivered)], r.start
        missing = set(every) - set().union(*(r.processed for r in runs))
        assert not missing, f"{len(missing)} records never processed, from {min(missing)}"
        assert [(x["name"], x["position"]) for x in log.consumers()] == [("worker", end)]
        for prev, nxt in itertools.pairwise(runs):  # never before a commit that returned
            assert nxt.start >= prev.last_commit()
    # The kills did land between a poll and its commit, and right after a commit.
    assert any(r.events and r.events[-1][0] == "polled" for r in runs[:-1])
    assert any(r.events and r.events[-1][0] == "committed" for r in runs[:-1])


# 11. Where positions are kept ---------------------------------------------------------------------


def two_dirs(tmp_path) -> list[str]:
    return [str(tmp_path / "p0"), str(tmp_path / "p1")]


def test_every_writable_directory_keeps_the_positions(make_log, dirs):
    log = make_log(segment_size=SEGMENT)
    fill(log, 5)
    with log.consumer("c") as c:
        c.poll(2)
        c.commit()
    for d in dirs:
        assert (d / POSITIONS).stat().st_size > 0, d


@pytest.mark.parametrize("lost", [0, 1])
def test_positions_survive_the_loss_of_one_directorys_file(make_log, tmp_path, lost):
    paths = two_dirs(tmp_path)
    log = make_log(paths, segment_size=SEGMENT)
    offs = fill(log, 30)
    for name, n in (("a", 10), ("b", 20)):
        with log.consumer(name) as c:
            c.poll(n)
            c.commit()
    log.close()
    os.remove(os.path.join(paths[lost], POSITIONS))
    log = make_log(paths, segment_size=SEGMENT)
    assert [(x["name"], x["position"]) for x in log.consumers()] == [
        ("a", offs[10]),
        ("b", offs[20]),
    ]
    with log.consumer("a") as c:
        assert c.position == offs[10]
        c.poll(5)
        c.commit()
    # The directory that lost its file has the name's next commit: it alone now suffices.
    log.close()
    os.remove(os.path.join(paths[1 - lost], POSITIONS))
    log = make_log(paths, segment_size=SEGMENT)
    with log.consumer("a") as c:
        assert c.position == offs[15]


def test_a_recreated_positions_file_holds_every_name_again(make_log, tmp_path):
    """A directory's lost file is made again (at the next open of a consumer): from then on it
    must hold every name's position, so that losing the other directory's file later, the only
    loss at that time, loses nothing."""
    paths = two_dirs(tmp_path)
    log = make_log(paths, segment_size=SEGMENT)
    offs = fill(log, 30)
    for name, n in (("a", 10), ("b", 20)):
        with log.consumer(name) as c:
            c.poll(n)
            c.commit()
    log.close()
    os.remove(os.path.join(paths[0], POSITIONS))
    log = make_log(paths, segment_size=SEGMENT)
    with log.consumer("a") as c:  # remakes p0's file; "b" is not opened
        c.poll(1)
        c.commit()
    log.close()
    assert os.path.exists(os.path.join(paths[0], POSITIONS))
    os.remove(os.path.join(paths[1], POSITIONS))
    log = make_log(paths, segment_size=SEGMENT)
    assert [(x["name"], x["position"]) for x in log.consumers()] == [
        ("a", offs[11]),
        ("b", offs[20]),
    ]


def test_a_held_name_stays_held_when_its_directorys_positions_file_is_lost(make_log, tmp_path):
    """Losing the first directory's file (by path) while a name is open neither frees the name
    nor hides that it is open."""
    paths = two_dirs(tmp_path)
    log = make_log(paths, segment_size=SEGMENT)
    fill(log, 10)
    held = log.consumer("solo", exclusive=True)
    held.poll(3)
    held.commit()
    os.remove(os.path.join(paths[0], POSITIONS))
    assert listed(log, "solo")["open"] is True
    second = None
    try:
        with pytest.raises(ConsumerBusyError):
            second = log.consumer("solo")
    finally:
        if second is not None:
            second.close()
        held.close()


def test_a_read_only_open_consumes_and_commits(make_log, dirs, exclusive):
    log = make_log(segment_size=SEGMENT)
    offs = fill(log, 20)
    ro = CommitLog(str_dirs(dirs), read_only=True)
    try:
        with ro.consumer("ro", exclusive=exclusive) as c:
            assert offsets(c.poll(7)) == offs[:7]
            assert c.commit() == offs[7]
        assert listed(log, "ro")["position"] == offs[7]  # the writer's open sees it
        with log.consumer("ro", exclusive=exclusive) as c:
            assert c.position == offs[7]
    finally:
        ro.close()
    log.close()
    with CommitLog(str_dirs(dirs), read_only=True) as alone:  # no writer at all
        assert listed(alone, "ro")["position"] == offs[7]
        with alone.consumer("ro", exclusive=exclusive) as c:
            assert offsets(c.poll(3)) == offs[7:10]
            c.commit()
        with alone.consumer("new", start="latest", exclusive=exclusive) as c:
            assert c.position == alone.max_offset
        end = alone.max_offset
    with CommitLog(str_dirs(dirs), read_only=True) as again:
        assert [(x["name"], x["position"]) for x in again.consumers()] == [
            ("new", end),
            ("ro", offs[10]),
        ]


# 12. Arrow batches ------------------------------------------------------------------------------


@pytest.fixture
def pa():
    return pytest.importorskip("pyarrow")


def as_rows(pa, batches) -> dict:
    table = pa.Table.from_batches(batches)
    return {name: table.column(name).to_pylist() for name in table.column_names}


def test_poll_batches_gives_what_scan_batches_gives_and_moves_the_position(log, pa, exclusive):
    offs = fill(log, 40, size=200)
    c = log.consumer("arrow", exclusive=exclusive)
    [batch] = c.poll_batches(max_records=7)
    assert isinstance(batch, pa.RecordBatch)
    assert batch.schema.names == ["offset", "timestamp", "body"]
    assert batch.num_rows == 7
    assert as_rows(pa, [batch]) == as_rows(pa, list(log.scan_batches(0, offs[7])))
    assert batch.column("offset").to_pylist() == offs[:7]
    assert c.position == offs[7] and c.committed == 0
    assert c.commit() == offs[7]
    assert offsets(c.poll(3)) == offs[7:10]  # poll and poll_batches share the position
    [rest] = c.poll_batches()
    assert rest.column("offset").to_pylist() == offs[10:]
    assert [bytes(b) for b in rest.column("body").to_pylist()] == [
        rec(i, 200) for i in range(10, 40)
    ]
    assert c.position == log.max_offset
    t = time.monotonic()
    assert c.poll_batches(timeout=0.2) == []
    assert 0.18 <= time.monotonic() - t < 2
    assert c.poll_batches(timeout=0) == []
    c.commit()
    assert c.lag == {"records": 0, "bytes": 0}


def test_poll_batches_takes_the_options_of_scan_batches(log, pa, exclusive):
    offs = fill(log, 20, size=1000)
    c = log.consumer("opts", exclusive=exclusive)
    [b] = c.poll_batches(columns=["body", "offset"], body="binary", max_bytes=2500)
    assert b.schema.names == ["body", "offset"]
    assert b.schema.field("body").type == pa.binary()
    assert b.num_rows == 2  # at most 2500 bytes of bodies
    assert b.column("offset").to_pylist() == offs[:2]
    [b] = c.poll_batches(columns=["offset"], max_records=3)
    assert b.schema.names == ["offset"] and b.column("offset").to_pylist() == offs[2:5]
    assert c.position == offs[5]
    [b] = c.poll_batches(max_bytes=1)  # one record at least
    assert b.column("offset").to_pylist() == [offs[5]]
    with pytest.raises(ValueError):
        c.poll_batches(columns=["nope"])
    with pytest.raises(ValueError):
        c.poll_batches(max_records=0)
    assert c.position == offs[6]


def test_poll_batches_waits_for_an_append(log, pa, exclusive):
    fill(log, 2)
    c = log.consumer("c", start="latest", exclusive=exclusive)
    later = threading.Timer(0.2, lambda: fill(log, 3, start=50))
    later.start()
    t = time.monotonic()
    [b] = c.poll_batches(timeout=30)
    assert 0.15 <= time.monotonic() - t < 15
    later.join()
    # One append_batch: all three or none, so the woken poll gets the three.
    assert [bytes(x) for x in b.column("body").to_pylist()] == [rec(i) for i in range(50, 53)]


def test_closing_the_log_lets_its_consumers_names_go(make_log, dirs):
    """A consumer left open past its log's close holds its name no more: the next open of the
    store takes the name, and the stale consumer's calls fail with ClosedError."""
    log = make_log(segment_size=SEGMENT)
    offs = fill(log, 5)
    stale = log.consumer("held", exclusive=True)
    stale.poll(2)
    stale.commit()
    log.close()
    again = make_log(segment_size=SEGMENT)
    with again.consumer("held", exclusive=True) as c:
        assert c.position == offs[2]
    with pytest.raises(ClosedError):
        stale.poll(timeout=0)


def test_the_docs_example_runs():
    """examples/named_consumers.py: two producers, two workers under one name, one SIGKILLed."""
    example = Path(__file__).parents[1] / "examples" / "named_consumers.py"
    r = subprocess.run([sys.executable, example], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "40000 of 40000 orders handled" in r.stdout, r.stdout


# Found by the docs-only hostile review ------------------------------------------------------------


def test_a_loss_under_a_dead_claim_never_hands_a_live_opens_records_to_another(make_log, tmp_path):
    """Shared: a dead open's claim deleted by retention is the loss; a live open's uncommitted
    records past it stay its own (they are not handed to the next poll), and records it
    committed never come again."""
    d = str(tmp_path / "s")
    log = make_log(d, segment_size=4096, retention_bytes=8192, clean_interval_ms=0)
    for _ in range(6):
        log.append_batch([b"x" * 500] * 5)
    dead = child(
        "import sys, time\nfrom rmqlog import CommitLog\n"
        "c = CommitLog(sys.argv[1], read_only=True).consumer('b', redelivery_timeout=600)\n"
        "c.poll(4, timeout=0)\nprint('claimed', flush=True)\ntime.sleep(100)\n",
        d,
    )
    try:
        expect_line(dead, "claimed")
        b = log.consumer("b", redelivery_timeout=600)
        held = offsets(b.poll(20, timeout=0))
        sigkill(dead)
    finally:
        finish(dead)
    assert log.clean(force=True) > 0
    c = log.consumer("b", redelivery_timeout=600, on_loss="skip")
    got = offsets(c.poll(50, timeout=0))
    assert got and not set(got) & set(held), (held, got)
    assert min(got) >= max(held)


def test_a_store_opened_under_another_spelling_of_its_paths_keeps_names_exclusive(tmp_path):
    """A process that names a directory through a symlink sorting first uses the same claims
    file and locks (they live in the writable directory with the smallest identity)."""
    a, b = tmp_path / "a", tmp_path / "b"
    with CommitLog([str(a), str(b)], segment_size=SEGMENT) as log:
        log.append_batch([b"x" * 1000] * 100)
    (tmp_path / "0b").symlink_to(b)
    with CommitLog([str(a), str(b)], segment_size=SEGMENT) as w:
        held = w.consumer("billing", exclusive=True)
        with CommitLog([str(tmp_path / "0b"), str(a)], read_only=True) as other:
            with pytest.raises(ConsumerBusyError):
                other.consumer("billing", exclusive=True)
            c1, c2 = w.consumer("s"), other.consumer("s")  # both alive: one claims table
            mine = offsets(c1.poll(3, timeout=0))
            theirs = offsets(c2.poll(3, timeout=0))
            assert mine and theirs and not set(mine) & set(theirs)
            c1.close()
            c2.close()
        held.close()


def test_a_damaged_copy_in_one_directory_is_set_aside_and_made_again(tmp_path, caplog):
    paths = two_dirs(tmp_path)
    with CommitLog(paths, segment_size=SEGMENT) as log:
        offs = fill(log, 10)
        with log.consumer("billing") as c:
            c.poll(4)
            c.commit()
    with open(os.path.join(paths[0], POSITIONS), "r+b") as f:
        f.write(b"garbage!")
    with CommitLog(paths, segment_size=SEGMENT) as log:
        assert [(x["name"], x["position"]) for x in log.consumers()] == [("billing", offs[4])]
        assert "consumers" in log.stats()
        with log.consumer("billing") as c:  # sets the damaged copy aside, makes it again
            assert c.position == offs[4]
    assert os.path.exists(os.path.join(paths[0], POSITIONS + ".damaged"))
    os.remove(os.path.join(paths[1], POSITIONS))
    with CommitLog(paths, segment_size=SEGMENT) as log:
        assert [(x["name"], x["position"]) for x in log.consumers()] == [("billing", offs[4])]


def test_a_full_table_of_a_dead_opens_claims_drains_with_small_polls(log):
    offs = fill(log, 400)
    x = log.consumer("n")
    for _ in range(120):
        x.poll(2, timeout=0)
    x.close()  # its 120 claims go to the next polls
    y = log.consumer("n")
    got = []
    while batch := y.poll(1, timeout=0):
        got += offsets(batch)
        y.commit()
    assert sorted(got) == offs
