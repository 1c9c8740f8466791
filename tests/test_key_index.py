"""``lookup(key)`` from Python and ``rmqlog lookup``; the key index across power cuts on the
FUSE fault filesystem (docs/messages.md). The Rust side (tests/key_index.rs) covers collisions,
damaged and deleted indexes, a writer killed between publishing and indexing, moves and
cleaning."""

from __future__ import annotations

import datetime
import json
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rmqlog import CommitLog


def model_of(log: CommitLog) -> dict[bytes, list[int]]:
    """What a full read of the log says: each key's offsets, in order."""
    want: dict[bytes, list[int]] = {}
    for off, _ in log.scan():
        key = log.read_record(off).key
        if key is not None:
            want.setdefault(key, []).append(off)
    return want


def test_lookup_matches_a_full_read_and_takes_time_bounds(tmp_path):
    rng = random.Random(7)
    with CommitLog(str(tmp_path), segment_size=1 << 16) as log:
        for i in range(3000):
            key = None if i % 7 == 0 else f"order-{rng.randrange(60)}".encode()
            log.append(rng.randbytes(rng.randrange(10, 200)), key=key)
        want = model_of(log)
        for key, offsets in want.items():
            assert log.lookup(key) == offsets
        assert log.lookup(b"order-60") == []
        assert log.lookup("order-5") == want[b"order-5"]  # a str key is its UTF-8 bytes
        offsets = want[b"order-5"]
        ts = [log.read_record(o).timestamp_ms for o in offsets]
        lo, hi = ts[len(ts) // 4], ts[-len(ts) // 4]
        inside = [o for o, t in zip(offsets, ts, strict=True) if lo <= t < hi]
        assert log.lookup(b"order-5", start=lo, end=hi) == inside
        as_dt = datetime.datetime.fromtimestamp(lo / 1000, datetime.UTC)
        assert log.lookup(b"order-5", start=as_dt) == [
            o for o, t in zip(offsets, ts, strict=True) if t >= lo
        ]
        with pytest.raises(TypeError, match="key must be bytes-like or a str"):
            log.lookup(5)
        with pytest.raises(TypeError, match="start must be milliseconds"):
            log.lookup(b"k", start="yesterday")


def test_rmqlog_lookup_prints_each_record_with_the_key(tmp_path):
    with CommitLog(str(tmp_path)) as log:
        offs = [
            log.append(b"x" * i, key=b"k1" if i % 2 else b"k2", headers=[("h", b"v")])
            for i in range(6)
        ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "python")}
    cmd = [sys.executable, "-m", "rmqlog", "lookup", str(tmp_path), "k1", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["offset"] for r in rows] == offs[1::2]
    assert [r["size"] for r in rows] == [1, 3, 5] and all(r["headers"] == 1 for r in rows)
    proc = subprocess.run(
        [*cmd[:-2], b"k2".hex(), "--hex-key"], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert [int(line.split()[1]) for line in proc.stdout.splitlines()] == offs[0::2]


WRITER = textwrap.dedent(
    """
    import sys, time
    from rmqlog import CommitLog
    dirs, first, seg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    log = CommitLog(dirs, segment_size=seg, flush_interval_ms=50, clean_interval_ms=0)
    for i in range(first, first + 200_000):
        log.append(b"%d" % i * (1 + i % 40), key=b"k%d" % (i % 97))
        if i % 500 == 0:
            print(log.flush(), flush=True)
    """
)


def test_lookups_agree_with_the_records_after_power_cuts(faultfs):
    """Each round a writer appends keyed records and is cut off mid-stream: the records past the
    durable point go, the index may keep entries for them (or lose its own pages), and the next
    round writes other records at those offsets. After every cut, every key's lookup is exactly
    what a full read of the surviving records says."""
    faultfs.lazy()
    dirs = str(faultfs.path / "d0")
    for round_ in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, dirs, str(round_ * 1_000_000), str(64 * 1024)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        flushes = 0
        deadline = time.monotonic() + 0.6 + 0.3 * round_
        while time.monotonic() < deadline and proc.stdout.readline():
            flushes += 1
        faultfs.power_cut(proc)
        proc.stdout.close()
        assert flushes > 3, "the writer barely ran"
        log = faultfs.log(dirs, segment_size=64 * 1024, clean_interval_ms=0)
        want = model_of(log)
        assert len(want) == 97
        for k in range(98):
            key = b"k%d" % k
            assert log.lookup(key) == want.get(key, []), (round_, key)
        log.close()
