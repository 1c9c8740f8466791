"""The remote tier when things go wrong (issue 15, item 5), on both stores: the store unreachable
(appends go on, uploads wait, local copies stay, the backlog drains once it is back), objects
damaged or deleted by hand (CorruptionError naming the object, verify finds exactly it), and a
writer killed at random points and mid-upload (every acknowledged record readable once, a clean
tier)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _tier import (
    SEGMENT,
    append_records,
    check_reads,
    exists,
    flip_byte,
    listed,
    object_name,
    objects,
    payload,
    remote_only,
    tier_kwargs,
    uploaded,
    wait_for,
)
from _writer import body

from rmqlog import HEADER_LEN, CommitLog, CorruptionError, TierError


@contextlib.contextmanager
def outage(tier):
    """The store fails every request inside the block. S3: moto's server stopped (connection
    refused). file://: the tier directory replaced by a regular file (ENOTDIR for every object;
    a mode such as 0o500 would not do, the tests run as root); both restored after."""
    if tier.kind == "s3":
        with tier.server.stopped():
            yield
        return
    away = tier.path.with_name(tier.path.name + ".away")
    tier.path.rename(away)
    tier.path.write_bytes(b"the tier directory is gone\n")
    try:
        yield
    finally:
        tier.path.unlink()
        away.rename(tier.path)


def timed_append(log, i: int, times: list[float]) -> int:
    t = time.perf_counter()
    off = log.append(payload(i))
    times.append(time.perf_counter() - t)
    return off


def test_unreachable_store(make_log, tier):
    events = []
    log = make_log(
        segment_size=SEGMENT,
        local_retention_bytes=SEGMENT,
        on_dir_event=lambda *e: events.append(e),
        **tier_kwargs(tier),
    )
    recs = append_records(log, 200)
    remote_only(log)
    before = log.tier_status()
    sealed_before = sum(s.sealed for s in log.segments())
    times: list[float] = []
    with outage(tier):
        # Appends while passes fail, until the failure is reported.
        i = 200
        deadline = time.monotonic() + 30
        while not (events and log.tier_status()["upload_errors"] >= before["upload_errors"] + 2):
            assert time.monotonic() < deadline, f"no failure reported: {log.tier_status()}"
            timed_append(log, i, times)
            i += 1
            time.sleep(0.005)
        # Then enough to seal several segments that cannot be uploaded.
        while sum(s.sealed for s in log.segments()) < sealed_before + 4:
            timed_append(log, i, times)
            i += 1
        st = log.tier_status()
        assert st["last_error"] and tier.url in st["last_error"], st
        assert events[0][:3] == (tier.url, "writable", "offline")
        assert tier.url in events[0][3]
        new = log.segments()[sealed_before:]  # the active one at the outage, and those after
        # Local copies of segments not uploaded stay, whatever local_retention_bytes says.
        assert all(s.local and not s.remote for s in new), new
        assert st["pending_segments"] == sum(s.sealed for s in new) >= 4
        assert st["local_deleted"] == before["local_deleted"]
        assert log.stats()["tier_last_error"] == st["last_error"]
        with pytest.raises(TierError) as info:
            log.read(recs[0].offset)
        assert object_name(0) in str(info.value)
        assert isinstance(info.value, OSError)
    # A failing pass takes about 0.3 s (three refused attempts): an append waiting on one would
    # show it. Measured here: at most 0.03 s, under load.
    assert max(times) < 0.25, f"an append took {max(times):.3f} s while the store was down"
    assert len(times) > 20
    st = uploaded(log, timeout=60)
    assert st["upload_errors"] >= before["upload_errors"] + 2
    wait_for(lambda: len(events) >= 2, "the recovery event")
    assert events[1][:3] == (tier.url, "offline", "writable")
    # Local retention resumes: every sealed segment is remote only again.
    remote_only(log)
    assert listed(tier) == [s.start_offset for s in log.segments() if s.sealed]
    check_reads(log, recs)


class HungStore:
    """An S3 endpoint that accepts connections and never answers: each request hangs until the
    client's request timeout (120 s), or until this closes its connections on exit."""

    def __enter__(self) -> HungStore:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.accepted: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()
        port = self.server.getsockname()[1]
        self.options = {
            "endpoint": f"http://127.0.0.1:{port}",
            "allow_http": "true",
            "access_key_id": "x",
            "secret_access_key": "x",
            "region": "us-east-1",
        }
        return self

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.accepted.append(self.server.accept()[0])

    def __exit__(self, *exc) -> None:
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self.server.close()
        self.thread.join(timeout=10)
        for c in self.accepted:
            c.close()


def test_appends_do_not_wait_for_a_hung_store(tmp_path):
    with HungStore() as hung:
        log = CommitLog(
            tmp_path / "d", segment_size=SEGMENT, tier_url="s3://b/log", tier_options=hung.options
        )
        wait_for(lambda: hung.accepted, "the tier thread's first request")
        times: list[float] = []
        for i in range(300):
            timed_append(log, i, times)
            if i % 20 == 0:
                time.sleep(0.01)
        t = time.perf_counter()
        st = log.tier_status()
        assert time.perf_counter() - t < 0.25
        assert st["pending_segments"] >= 3 and st["uploads"] == 0
        # A request hangs for 120 s: an append that waited on it would take that long.
        assert max(times) < 1.0, f"an append took {max(times):.3f} s while a request hung"
    log.close()  # the store's connections are closed: the request fails at once


def test_close_does_not_wait_for_a_hung_request(tmp_path):
    with HungStore() as hung:
        log = CommitLog(
            tmp_path / "d", segment_size=SEGMENT, tier_url="s3://b/log", tier_options=hung.options
        )
        append_records(log, 200)
        wait_for(lambda: hung.accepted, "the tier thread's first request")
        closer = threading.Thread(target=log.close, daemon=True)
        closer.start()
        closer.join(timeout=5)
        stuck = closer.is_alive()
    closer.join(timeout=30)  # the connections closed: the request fails, close() returns
    assert not closer.is_alive()
    assert not stuck, "close() still waits after 5 s for the tier thread's request"


def test_damaged_object_is_named_and_alone(make_log, tier, damage):
    log = make_log(segment_size=SEGMENT, local_retention_bytes=SEGMENT, **tier_kwargs(tier))
    recs = append_records(log, 400)
    remote_only(log)
    segs = log.segments()
    bad = segs[2]
    lo, hi = bad.start_offset, bad.start_offset + bad.size
    name = object_name(lo)
    url = f"{tier.url}/{name}"
    victim = [r for r in recs if lo <= r.offset < hi][10]
    if damage == "flipped":
        tier.write(name, flip_byte(tier.read(name), victim.offset - lo + HEADER_LEN + 100))
    else:
        tier.delete(name)
    with pytest.raises(CorruptionError) as info:
        log.read(victim.offset)
    assert url in str(info.value)
    with pytest.raises(CorruptionError) as info:
        list(log.scan(lo, hi))
    assert url in str(info.value)
    if damage == "deleted":
        assert "missing" in str(info.value)
    check_reads(log, [r for r in recs if r.offset < lo])
    check_reads(log, [r for r in recs if r.offset >= hi])
    bad_ranges = log.verify(remote=True)
    assert [(s, e) for s, e, _ in bad_ranges] == [(lo, hi)]
    assert url in bad_ranges[0][2]
    with CommitLog(tier.url, read_only=True, tier_options=tier.options or None) as remote:
        found = remote.verify()
        assert [(s, e) for s, e, _ in found] == [(lo, hi)] and url in found[0][2]
        check_reads(remote, [r for r in recs if hi <= r.offset < segs[-1].start_offset])


@pytest.fixture(params=["flipped", "deleted"])
def damage(request):
    return request.param


# ---------------------------------------------------------------------------------------------
# A writer killed with SIGKILL, at random points and while an upload is in flight.

WRITER = Path(__file__).with_name("_tier_writer.py")
KILL_SEGMENT = 1 << 20
KILL_LOCAL = 2 * KILL_SEGMENT


class Child:
    """tests/_tier_writer.py with its stdout drained by a thread (a full pipe would stall it)."""

    def __init__(self, dirs: str, tier, seed: int, tmp: Path) -> None:
        args = [sys.executable, str(WRITER), dirs, str(KILL_SEGMENT), str(KILL_LOCAL)]
        args += [str(seed), tier.url] + ([json.dumps(tier.options)] if tier.options else [])
        # TMPDIR: the tier cache directory a killed writer leaves behind goes into tmp.
        env = {**os.environ, "TMPDIR": str(tmp)}
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env)
        self.out: list[str] = []
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.out.append(line)

    def wait_first(self) -> None:
        wait_for(lambda: self.out or self.proc.poll() is not None, "the writer's first append")
        assert self.out, f"the writer exited ({self.proc.returncode}) before appending"

    def kill(self) -> list[tuple[int, int, int]]:
        """SIGKILL; the records it acknowledged (complete lines only)."""
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(timeout=30) == -signal.SIGKILL
        self.thread.join(timeout=30)
        return [tuple(map(int, x.split())) for x in self.out if x.endswith("\n")]


def unlisted_objects(tier) -> set[str]:
    """Objects the current manifest does not list: an upload the writer had not finished."""
    known = {object_name(s) for s in listed(tier)}
    return set(objects(tier)) - known


def next_object_appears(tier) -> None:
    """Returns as soon as the next segment's object appears: the writer is then between the put
    and the manifest that lists it (the read back, the manifest's two puts), unless it is quicker
    than this poll. Every sealed segment is listed when a round starts (check_after_kill), and
    segments are uploaded in order, so the next object is the one after the last listed."""
    starts = listed(tier)
    name = object_name(starts[-1] + KILL_SEGMENT if starts else 0)
    deadline = time.monotonic() + 30
    while not exists(tier, name):  # no pause: the window is a few milliseconds
        assert time.monotonic() < deadline, f"{name} was not uploaded in 30 s"


def check_after_kill(dirs: str, tier, acked: list[tuple[int, int, int]]) -> None:
    with CommitLog(
        dirs,
        segment_size=KILL_SEGMENT,
        max_message_size=64 * 1024,
        local_retention_bytes=KILL_LOCAL,
        **tier_kwargs(tier),
    ) as log:
        uploaded(log, timeout=60)
        for i, off, size in acked:
            assert bytes(log.read(off)) == body(i, size), f"record {i} at {off}"
        indexes = [int.from_bytes(bytes(b[:8]), "little") for _, b in log.scan()]
        assert len(indexes) == len(set(indexes)), "a record is in the log twice"
        assert {i for i, _, _ in acked} <= set(indexes)
        assert log.verify(remote=True) == []
        sealed = [s.start_offset for s in log.segments() if s.sealed]
        assert listed(tier) == sealed
        assert objects(tier) == [object_name(s) for s in sealed]


def test_writer_killed_mid_upload(tmp_path, tier):
    """Rounds of a child writer killed: at random points, and every other round as soon as an
    upload's object appears. At least one kill must have left an object the manifest does not
    list (checked after the kill, the child being dead): killed mid-upload."""
    dirs = os.pathsep.join(str(tmp_path / f"d{i}") for i in range(3))
    rng = random.Random(tier.kind)
    acked: list[tuple[int, int, int]] = []
    mid_upload = 0
    rounds = 0
    while rounds < 6 or (mid_upload == 0 and rounds < 16):
        rounds += 1
        child = Child(dirs, tier, rounds, tmp_path)
        try:
            child.wait_first()
            if rounds % 2 == 0:
                next_object_appears(tier)
            else:
                time.sleep(0.2 + rng.random())
        finally:
            got = child.kill()
        mid_upload += bool(unlisted_objects(tier))
        assert got, "the writer acknowledged nothing"
        acked += got
        check_after_kill(dirs, tier, acked)
    assert mid_upload >= 1, f"no kill landed mid-upload in {rounds} rounds"
