"""Shared consumer names as a work queue, with real processes (the ``driver`` children of
``_consumer_child.py``) and SIGKILL:

- ``nack()`` hands records back: a worker waiting in another process gets them at once, or after
  ``delay``; an exclusive consumer's position moves back.
- Every delivery is counted (``poll(with_deliveries=True)``, a ``deliveries`` column), across the
  death of every worker and a reopen of the store.
- ``max_deliveries``: a poison record that kills each worker it reaches is dead-lettered, with its
  origin, to the store ``dead_letter`` names, while the other records flow.
- A commit of records whose claim lapsed to another open raises ``ClaimLostError`` naming them and
  the process that has them; ``in_progress()`` keeps a slow task's claim.
- ``ack()`` marks records done out of order; the position moves over the acknowledged prefix
  only, also when the worker is killed between acks.
"""

from __future__ import annotations

import os
import random
import time

import pytest
from test_consumer_sharing import Driver, fill, listed, two_dirs

import rmqlog
from rmqlog import ClaimLostError, CommitLog, CommitLogError

SEGMENT = 64 * 1024


@pytest.fixture
def drivers():
    made: list[Driver] = []

    def make(dirs, **log_kwargs) -> Driver:
        made.append(Driver(dirs, **log_kwargs))
        return made[-1]

    yield make
    for d in made:
        d.close()


@pytest.fixture
def store(tmp_path):
    dirs = two_dirs(tmp_path)
    log = CommitLog(dirs, segment_size=SEGMENT, clean_interval_ms=0)
    yield dirs, log
    log.close()


def test_a_nacked_record_goes_at_once_to_a_worker_waiting_in_another_process(store, drivers):
    dirs, log = store
    offs = fill(log, 10)
    a, b = drivers(dirs), drivers(dirs)
    a.ok("open", "q")
    b.ok("open", "q")
    got = a.ok("poll", "q", max=10)
    assert got["offsets"] == offs and got["deliveries"] == [1] * 10
    b.send("poll", "q", max=10, timeout=20)  # waits: a holds every record
    time.sleep(0.3)
    handed = time.time()
    a.ok("nack", "q")
    got = b.reply()
    assert got["ok"] and got["offsets"] == offs, got
    assert got["deliveries"] == [2] * 10
    # At once: woken by the nack, not by the redelivery timeout (30 s) nor a look every 100 ms.
    assert got["at"] - handed < 1.0, got["at"] - handed
    assert listed(log, "q")["redelivered"] == 10
    assert a.ok("commit", "q")["committed"] == 0  # a holds nothing now
    assert b.ok("commit", "q")["committed"] == log.max_offset


def test_a_nack_with_a_delay_hands_records_back_after_it(store, drivers):
    dirs, log = store
    offs = fill(log, 5)
    a = drivers(dirs)
    a.ok("open", "q")
    assert a.ok("poll", "q", max=5)["offsets"] == offs
    handed = time.monotonic()
    a.ok("nack", "q", offsets=[offs[1], offs[3]], delay=0.6)
    b = log.consumer("q")
    assert b.poll(10, timeout=0.2) == []  # not before the delay; the rest is still a's
    first = b.poll(10, timeout=5, with_deliveries=True)
    waited = time.monotonic() - handed
    assert [(o, d) for o, _, d in first] == [(offs[1], 2)]
    assert 0.55 <= waited < 5, waited
    second = b.poll(10, timeout=1, with_deliveries=True)
    assert [(o, d) for o, _, d in second] == [(offs[3], 2)]
    # a commits the three it kept: the name stops at b's first record.
    assert a.ok("commit", "q")["committed"] == offs[1]
    assert b.commit() == log.max_offset
    info = listed(log, "q")
    assert (info["pending"], info["waiting"], info["redelivered"]) == (0, 0, 0)
    b.close()


def test_a_poison_record_is_dead_lettered_after_max_deliveries_while_the_others_flow(
    tmp_path, store, drivers
):
    dirs, log = store
    dead = [str(tmp_path / "dlq")]
    bodies = [b"job-%d" % i for i in range(20)]
    bodies[7] = b"poison"
    offs = log.append_batch(bodies)
    done, kills, seen = [], 0, []
    worker = None
    while True:
        if worker is None:
            worker = drivers(dirs)
            worker.ok("open", "q", max_deliveries=3, dead_letter=dead)
        got = worker.ok("poll", "q", max=5, timeout=0.2)
        if not got["offsets"]:
            break
        for off, text, deliveries in zip(
            got["offsets"], got["bodies"], got["deliveries"], strict=True
        ):
            seen.append((off, deliveries))
            if text == "poison":
                worker.kill()  # the record crashes every worker it reaches
                worker, kills = None, kills + 1
                break
            done.append(off)
            worker.ok("ack", "q", offsets=[off])
        assert kills <= 3, seen
    assert kills == 3
    assert [d for o, d in seen if o == offs[7]] == [1, 2, 3]
    # Its last try came alone: the records polled with it were handled, not dead-lettered.
    assert sorted(set(done)) == [o for i, o in enumerate(offs) if i != 7]
    info = listed(log, "q")
    assert info["position"] == log.max_offset and info["dead_lettered"] == 1
    assert info["max_deliveries"] == 3

    dlq = CommitLog(dead, read_only=True)
    [(_at, letter)] = [(o, bytes(v)) for o, v in dlq.scan()]
    origin, body = rmqlog.dead_letter_origin(letter)
    assert bytes(body) == b"poison"
    assert origin["offset"] == offs[7] and origin["consumer"] == "q"
    assert origin["deliveries"] == 3 and origin["paths"] == dirs
    assert origin["timestamp_ms"] == log.read_record(offs[7]).timestamp_ms
    assert rmqlog.dead_letter_origin(b"job-1") is None
    dlq.close()


def test_without_a_dead_letter_store_a_poison_record_is_skipped_with_a_warning(store, caplog):
    _dirs, log = store
    offs = fill(log, 3)
    for _ in range(2):
        c = log.consumer("q", max_deliveries=2)
        assert [o for o, _ in c.poll(1)] == offs[:1]
        c.close()  # as a worker's death: its claim is delivered again
    c = log.consumer("q")
    assert c.max_deliveries == 2  # recorded with the name
    with caplog.at_level("WARNING", logger="rmqlog"):
        got = c.poll(10, timeout=1, with_deliveries=True)
        rmqlog._native._flush_logging()  # the Rust side's records reach Python's logging queued
    assert [(o, d) for o, _, d in got] == [(o, 1) for o in offs[1:]]
    assert "delivered 2 times without a commit" in caplog.text
    assert c.commit() == log.max_offset
    assert listed(log, "q")["dead_lettered"] == 1
    c.close()


def test_a_lapsed_claim_raises_claim_lost_at_commit_and_in_progress_keeps_a_slow_one(
    store, drivers
):
    dirs, log = store
    offs = fill(log, 10)
    slow = drivers(dirs)
    slow.ok("open", "q", redelivery_timeout=0.6)
    assert slow.ok("poll", "q", max=5)["offsets"] == offs[:5]  # lapses
    assert slow.ok("poll", "q", max=5)["offsets"] == offs[5:]  # kept alive
    other = log.consumer("q", redelivery_timeout=60)
    started = time.monotonic()
    got = []
    while time.monotonic() - started < 1.8:
        slow.ok("in_progress", "q", offsets=[offs[5]])
        got += other.poll(10, timeout=0.2, with_deliveries=True)
    # The lapsed claim went to the other open, delivered a second time; the extended one did not.
    assert [(o, d) for o, _, d in got] == [(o, 2) for o in offs[:5]]
    lost = slow.refused("commit", "q")
    assert lost["error"] == "ClaimLostError"
    assert lost["lost"] == [[offs[0], offs[5], os.getpid()]]
    assert lost["committed"] == 0  # its own records are done, behind the other's
    assert f"now held by process {os.getpid()}" in lost["message"]
    assert other.commit() == log.max_offset
    other.close()


def test_out_of_order_acks_survive_a_sigkill_and_the_position_never_passes_an_unacked_record(
    store, drivers
):
    dirs, log = store
    offs = fill(log, 10)
    end = log.max_offset
    a = drivers(dirs)
    a.ok("open", "q")
    assert a.ok("poll", "q", max=10)["offsets"] == offs
    assert a.ok("ack", "q", offsets=offs[2:][::-1])["committed"] == 0
    assert listed(log, "q")["position"] == 0
    assert a.ok("ack", "q", offsets=[offs[1]])["committed"] == 0
    a.kill()
    b = log.consumer("q")
    # Only the record never acknowledged comes again.
    got = b.poll(10, timeout=1, with_deliveries=True)
    assert [(o, d) for o, _, d in got] == [(offs[0], 2)]
    assert b.poll(10, timeout=0.2) == []
    assert b.ack([offs[0]]) == end
    with pytest.raises(ValueError, match="not a record consumer"):
        b.ack([offs[3]])
    b.close()


def test_delivery_counts_survive_the_death_of_every_worker_and_a_reopen(tmp_path, drivers):
    dirs = two_dirs(tmp_path)
    log = CommitLog(dirs, segment_size=SEGMENT, clean_interval_ms=0)
    offs = fill(log, 4)
    log.close()
    for deliveries in (1, 2):
        w = drivers(dirs)
        w.ok("open", "q")
        got = w.ok("poll", "q", max=4)
        assert got["offsets"] == offs and got["deliveries"] == [deliveries] * 4
        w.kill()
    log = CommitLog(dirs, segment_size=SEGMENT, clean_interval_ms=0)  # no process had it open
    c = log.consumer("q")
    got = c.poll(4, timeout=1, with_deliveries=True)
    assert [d for _, _, d in got] == [3] * 4
    info = listed(log, "q")
    assert info["pending"] == 4 and info["redelivered"] == 4 and info["members"] == [os.getpid()]
    c.commit()
    c.close()
    log.close()


def test_an_exclusive_nack_moves_the_position_back_and_counts_each_delivery(store):
    dirs, log = store
    offs = fill(log, 6)
    c = log.consumer("e", exclusive=True)
    assert [o for o, _ in c.poll(6)] == offs
    c.nack()
    assert c.position == 0
    got = c.poll(10, with_deliveries=True)
    assert [(o, d) for o, _, d in got] == [(o, 2) for o in offs]
    c.nack([offs[4], offs[5]], delay=0.3)
    assert c.position == offs[4]
    started = time.monotonic()
    got = c.poll(10, timeout=5, with_deliveries=True)
    assert time.monotonic() - started >= 0.25
    assert [(o, d) for o, _, d in got] == [(offs[4], 3), (offs[5], 3)]
    with pytest.raises(CommitLogError, match="holds its name alone"):
        c.ack([offs[0]])
    c.in_progress()  # nothing lapses for an exclusive consumer
    c.close()
    with pytest.raises(ValueError, match="shared name"):
        log.consumer("e", exclusive=True, max_deliveries=3)
    elsewhere = os.path.join(os.path.dirname(dirs[0]), "dlq")
    with pytest.raises(ValueError, match="shared name"):
        log.consumer("e", exclusive=True, dead_letter=elsewhere)
    assert not os.path.exists(elsewhere)  # refused before anything was made


def test_poll_batches_has_a_deliveries_column(store):
    pytest.importorskip("pyarrow")
    _dirs, log = store
    fill(log, 5)
    c = log.consumer("q")
    [batch] = c.poll_batches(5, with_deliveries=True)
    assert batch.column_names[-1] == "deliveries"
    assert batch.column("deliveries").to_pylist() == [1] * 5
    c.nack()
    [batch] = c.poll_batches(5, with_deliveries=True)
    assert batch.column("deliveries").to_pylist() == [2] * 5
    c.close()


def test_bad_arguments_get_typed_errors(store, tmp_path):
    dirs, log = store
    offs = fill(log, 2)
    c = log.consumer("q")
    c.poll(2)
    with pytest.raises(TypeError, match="list of offsets"):
        c.ack(offs[0])
    with pytest.raises(ValueError, match="non-negative"):
        c.nack(delay=-1)
    with pytest.raises(ValueError, match="not a record consumer"):
        c.nack([offs[1] + 10**6])
    with pytest.raises(ValueError, match="max_deliveries"):
        log.consumer("r", max_deliveries=-1)
    with pytest.raises(ValueError, match="a directory of this store"):
        log.consumer("r", dead_letter=dirs[1])
    assert issubclass(ClaimLostError, CommitLogError)
    c.close()


def test_thousands_of_acks_in_random_order_take_the_position_to_the_end(store):
    """More gaps between acknowledged records than the claims table holds: the position never
    passes a record not acknowledged, reaches the end with the last ack, and nothing comes again;
    a worker that closes with acks it could not record yet has only those delivered again."""
    _, log = store
    offs = log.append_batch([b"%d" % i for i in range(3000)])
    end = log.max_offset
    c = log.consumer("q")
    got = [o for _ in range(3) for o, _ in c.poll(1000)]
    assert got == offs
    order = offs[:]
    random.Random(35).shuffle(order)
    acked: set[int] = set()
    first_open = 0  # index of the first record not acknowledged
    for o in order:
        committed = c.ack([o])
        acked.add(o)
        while first_open < len(offs) and offs[first_open] in acked:
            first_open += 1
        assert committed <= (offs[first_open] if first_open < len(offs) else end), committed
    assert committed == end and listed(log, "q")["pending"] == 0
    c.close()
    again = log.consumer("q")
    assert again.poll(10, timeout=0) == []
    again.close()

    more = log.append_batch([b"x"] * 1500)
    c = log.consumer("q")
    assert [o for _ in range(2) for o, _ in c.poll(1000)] == more
    keep = set(random.Random(36).sample(more, 10))
    for o in random.Random(37).sample(more, len(more)):
        if o not in keep:
            c.ack([o])
    c.close()  # acks it had no room to record are lost with it: at least once
    w = log.consumer("q")
    redelivered = [o for _ in range(20) for o, _ in w.poll(1000, timeout=0)]
    assert keep <= set(redelivered) and len(redelivered) < len(more)
    assert min(redelivered) >= listed(log, "q")["position"]
    w.commit()
    assert listed(log, "q")["position"] == log.max_offset
    w.close()
