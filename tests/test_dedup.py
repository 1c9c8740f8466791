"""Appends that happen once (docs/messages.md): ``msg_id=`` / ``msg_ids=``, the window by time
and by count recorded with the store, and producer processes that retry after a SIGKILL."""

from __future__ import annotations

import collections
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest

from rmqlog import DEFAULTS, MAX_ID_LEN, Appended, CommitLog, CommitLogError

SEGMENT = 64 * 1024


def test_a_second_append_with_an_id_writes_nothing_and_returns_the_first(tmp_path):
    with CommitLog(str(tmp_path), segment_size=SEGMENT) as log:
        first = log.append(b"order 4711 paid", msg_id="evt-1", key="4711")
        end = log.max_offset
        assert log.append(b"order 4711 paid (retry)", msg_id=b"evt-1") == first
        assert log.max_offset == end
        rec = log.read_record(first)
        assert (rec.msg_id, rec.key, bytes(rec.body)) == (b"evt-1", b"4711", b"order 4711 paid")
        assert log.read_record(log.append(b"plain")).msg_id is None
        # Ids are not keys: the id is not found by lookup, the key is.
        assert log.lookup("evt-1") == [] and log.lookup("4711") == [first]


def test_a_batch_says_which_records_were_already_there(tmp_path):
    with CommitLog(str(tmp_path), segment_size=SEGMENT) as log:
        a = log.append(b"a", msg_id="a")
        got = log.append_batch(
            [b"a again", b"b", b"b again", b"plain", b"c"], msg_ids=["a", "b", "b", None, b"c"]
        )
        assert isinstance(got, Appended) and isinstance(got, list)
        assert got[0] == a and got[2] == got[1] and got.duplicates == [0, 2]
        assert len(set(got)) == 4 and "duplicates=[0, 2]" in repr(got)
        assert [bytes(b) for _, b in log.scan(0)] == [b"a", b"b", b"plain", b"c"]
        # Without msg_ids: a plain list, as before.
        assert type(log.append_batch([b"x"])) is list
        assert log.append_batch([b"y"], msg_ids=["a"], offsets=False) is None


def test_bad_ids_are_refused_before_anything_is_written(tmp_path):
    with CommitLog(str(tmp_path), segment_size=SEGMENT) as log:
        log.append(b"x")
        end = log.max_offset
        with pytest.raises(TypeError, match="msg_id"):
            log.append(b"x", msg_id=5)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="message id is 1 to"):
            log.append(b"x", msg_id=b"")
        with pytest.raises(ValueError, match="message id is 1 to"):
            log.append(b"x", msg_id=b"i" * (MAX_ID_LEN + 1))
        with pytest.raises(TypeError, match=r"msg_id\[1\]"):
            log.append_batch([b"x", b"y"], msg_ids=["a", 2])  # type: ignore[list-item]
        with pytest.raises(ValueError, match="msg_ids has 1 items for 2 bodies"):
            log.append_batch([b"x", b"y"], msg_ids=["a"])
        with pytest.raises(TypeError, match="msg_ids must be a sequence"):
            log.append_batch([b"x", b"y"], msg_ids={"a", "b"})  # type: ignore[arg-type]
        assert log.max_offset == end


def test_the_window_by_time_and_by_count_is_recorded_with_the_store(tmp_path):
    d = str(tmp_path)
    assert DEFAULTS["dedup_window_ms"] == 120_000 and DEFAULTS["dedup_window_records"] is None
    with pytest.raises(
        (CommitLogError, ValueError), match="dedup_window_records must be at least 1"
    ):
        CommitLog(d, dedup_window_records=0)
    with CommitLog(d, segment_size=SEGMENT, dedup_window_ms=1000, dedup_window_records=3) as log:
        first = log.append(b"a", msg_id="x")
        log.append_batch([b"1", b"2"])
        assert log.append(b"a", msg_id="x") == first  # three records from it to the end
        log.append(b"3")
        by_count = log.append(b"a", msg_id="x")
        assert by_count > first
        assert log.append(b"a", msg_id="x") == by_count
        # In a batch, the records written before one count as if appended alone.
        log.append_batch([b"1", b"2"])
        got = log.append_batch([b"3", b"a"], msg_ids=[None, "x"])
        assert got.duplicates == [] and got[1] > by_count
        by_count = got[1]
    # A later open that names neither keeps both.
    with CommitLog(d) as log:
        s = log.recorded_settings()
        assert s is not None
        assert (s["dedup_window_ms"], s["dedup_window_records"]) == (1000, 3)
        time.sleep(1.05)
        assert log.append(b"a", msg_id="x") > by_count  # older than the window
    with CommitLog(d, dedup_window_records=None) as log:
        s = log.recorded_settings()
        assert s is not None and s["dedup_window_records"] is None


def test_ids_are_found_after_a_restart_and_without_index_files(tmp_path):
    d = tmp_path / "d"
    with CommitLog(str(d), segment_size=SEGMENT) as log:
        offsets = log.append_batch(
            [b"%d" % i * 300 for i in range(400)], msg_ids=[f"m{i}" for i in range(400)]
        )
        assert len(log.segments()) > 1
    for keys in d.glob("*.keys"):
        keys.unlink()
    with CommitLog(str(d), segment_size=SEGMENT) as log:
        again = log.append_batch([b"retry"] * 400, msg_ids=[f"m{i}" for i in range(400)])
        assert list(again) == list(offsets) and again.duplicates == list(range(400))


def test_a_writer_that_looked_up_before_mending_a_damaged_index_finds_every_id(tmp_path):
    """The active segment's index lost pages (as a power loss leaves it), and the first call of
    the next writer is a lookup, which maps the damaged file: the append that follows rebuilds
    the index, and looks the ids up in the new one, not in the map of the old."""
    d = str(tmp_path / "d")
    with CommitLog(d, segment_size=1 << 20) as log:
        offsets = {f"a{i}": log.append(b"x", msg_id=f"a{i}") for i in range(1000)}
    keys = tmp_path / "d" / "00000000000000000000.keys"
    with open(keys, "r+b") as f:
        f.seek(4096)
        f.write(bytes(keys.stat().st_size - 4096))
    with CommitLog(d) as log:
        log.lookup(b"anything")
        again = {i: log.append(b"retry", msg_id=i) for i in offsets}
        assert again == offsets and len(log) == 1000


def test_a_batch_is_as_the_same_appends_one_by_one_under_a_count_window(tmp_path):
    """Random batches of ids from a small pool (repeats in a batch, ids without, ids that left
    the 3-record window) on one store, the same records one by one on another: the two logs and
    every offset returned are the same."""
    rng = random.Random(5)
    batched = CommitLog(str(tmp_path / "a"), segment_size=SEGMENT, dedup_window_records=3)
    single = CommitLog(str(tmp_path / "b"), segment_size=SEGMENT, dedup_window_records=3)
    for _ in range(150):
        ids = [rng.choice(["a", "b", "c", None]) for _ in range(rng.randint(1, 6))]
        bodies = [b"%d" % rng.randrange(1000) for _ in ids]
        got = batched.append_batch(bodies, msg_ids=ids)
        one = [single.append(b, msg_id=i) for b, i in zip(bodies, ids, strict=True)]
        assert list(got) == one, (ids, got, one)
    assert batched.max_offset == single.max_offset
    batched.close()
    single.close()


def test_ids_beyond_a_lost_directory_are_still_found(tmp_path):
    """A directory lost (``accept_lost``) leaves holes in the log: the ids of the records on
    either side of them are still in the window."""
    dirs = [str(tmp_path / n) for n in "abc"]
    with CommitLog(dirs, segment_size=4096) as log:
        offsets = {f"id{i}": log.append(b"x" * 100, msg_id=f"id{i}") for i in range(200)}
    lost = dirs.pop(1)
    shutil.rmtree(lost)
    with CommitLog(dirs, accept_lost=lost) as log:
        kept = {}
        for i, o in offsets.items():
            try:
                assert log.read_record(o).msg_id == i.encode()
            except CommitLogError:
                continue  # in the hole
            kept[i] = o
        assert 0 < len(kept) < len(offsets) and min(kept.values()) == 0
        assert {i: log.append(b"again", msg_id=i) for i in kept} == kept


def test_close_lets_go_of_the_index_files(tmp_path):
    d = tmp_path / "d"
    log = CommitLog(str(d), segment_size=4096)
    for i in range(125):
        log.append(b"x" * 100, msg_id=f"id{i}")
    log.lookup(b"k")  # maps the sealed segments' indexes
    log.close()
    with open("/proc/self/maps") as maps:
        assert [line for line in maps if str(d) in line] == []


PRODUCER = """
import random, sys
from rmqlog import CommitLog
d, k, start, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
log = CommitLog(d, segment_size=65536, exclusive=False)
rnd = random.Random(k * 7919 + start)
i, dups = start, 0
while i < n:
    m = min(rnd.randint(1, 6), n - i)
    ids = [f"p{k}-{j}" for j in range(i, i + m)]
    got = log.append_batch([i.encode() * 40 for i in ids], msg_ids=ids)
    dups += len(got.duplicates)
    i += m
    print("acked", i, flush=True)
print("dups", dups, flush=True)
log.close()
"""


def _producer(d: str, k: int, start: int, n: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PRODUCER, d, str(k), str(start), str(n)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_producers_that_retry_after_a_sigkill_write_each_message_once(tmp_path):
    """Three shared producer processes; one is SIGKILLed mid-run and started again from well
    before its last acknowledgement (a retry of what it may or may not have written): every
    message is in the log once, none is lost."""
    d = str(tmp_path / "d")
    CommitLog(d, segment_size=SEGMENT).close()
    n = 400
    procs = [_producer(d, k, 0, n) for k in range(3)]
    assert procs[0].stdout is not None
    acked = 0
    for line in procs[0].stdout:
        acked = int(line.split()[1])
        if acked >= 150:
            break
    os.kill(procs[0].pid, signal.SIGKILL)
    procs[0].wait()
    # What the killed process printed last is its last known progress; it may have appended more.
    restart = max(0, acked - 60)
    procs[0] = _producer(d, 0, restart, n)
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    retry_dups = int(outs[0][0].split()[-1])
    assert retry_dups >= acked - restart, outs[0][0][-200:]
    with CommitLog(d, read_only=True) as log:
        ids = [log.read_record(o).msg_id for o, _ in log.scan(0)]
    counts = collections.Counter(ids)
    assert [i for i, c in counts.items() if c > 1] == []
    assert set(counts) == {f"p{k}-{j}".encode() for k in range(3) for j in range(n)}


SYNC_PRODUCER = """
import sys
from rmqlog import CommitLog
d, first = sys.argv[1], int(sys.argv[2])
log = CommitLog(d, segment_size=64 * 1024, flush="sync", clean_interval_ms=0)
for i in range(first, first + 100_000):
    off = log.append(b"%d" % i * (1 + i % 30), msg_id=b"m%d" % i)
    print(i, off, flush=True)  # acknowledged: synced
"""


def test_an_acknowledged_id_survives_a_power_cut(faultfs):
    """flush="sync" acknowledges an append once it is durable. A producer is cut off (the FUSE
    fault filesystem drops every unsynced write: of the segment and of its key index), then
    sends everything again from well before its last acknowledgement: each acknowledged id comes
    back with its offset and is not written again; none is in the log twice."""
    faultfs.lazy()
    d = str(faultfs.path / "d")
    acked: dict[int, int] = {}
    for round_ in range(2):
        first = round_ * 1_000
        proc = subprocess.Popen(
            [sys.executable, "-c", SYNC_PRODUCER, d, str(first)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        deadline = time.monotonic() + 0.8
        for line in proc.stdout:
            i, off = map(int, line.split())
            acked[i] = off
            if time.monotonic() > deadline and i - first > 50:
                break
        faultfs.power_cut(proc)
        proc.stdout.close()
        log = faultfs.log(d, segment_size=64 * 1024, clean_interval_ms=0)
        last = max(i for i in acked if i >= first)
        retry = {i: log.append(b"again", msg_id=b"m%d" % i) for i in range(first, last + 20)}
        assert {i: retry[i] for i in acked if i >= first} == {
            i: o for i, o in acked.items() if i >= first
        }, round_
        ids = [log.read_record(o).msg_id for o, _ in log.scan(0)]
        assert len(ids) == len(set(ids)), round_
        log.close()
