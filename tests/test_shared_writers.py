"""Several producer processes on one store (exclusive=False), with a follower waiting for their
records: the shape of docs/producers-consumers.md's example, with real processes."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from rmqlog import CommitLog, ConfigurationError, StoreLockedError

SEGMENT = 64 * 1024
PRODUCERS = 3
EACH = 2000


def producer(dirs: list[str], n: int, k: int) -> subprocess.Popen:
    script = f"""
        from rmqlog import CommitLog
        with CommitLog({dirs!r}, segment_size={SEGMENT}, exclusive=False) as log:
            for i in range({k}):
                if i % 10 == 9:
                    log.append_batch([b"p{n}-%d-b%d" % (i, j) for j in range(3)])
                else:
                    log.append(b"p{n}-%d-" % i + bytes(i % 200))
        print("done", flush=True)
        """
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE, text=True
    )


def test_producer_processes_append_to_one_log_a_follower_waits_for_all(tmp_path):
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    # The parent is a shared writer too; a follower in this process waits on the records.
    log = CommitLog(dirs, segment_size=SEGMENT, exclusive=False)
    follower = CommitLog(dirs, read_only=True)
    procs = [producer(dirs, n, EACH) for n in range(PRODUCERS)]
    seen: list[tuple[int, bytes]] = []
    expected = PRODUCERS * (EACH + EACH // 10 * 2)  # a batch of 3 replaces every 10th single
    for off, body in follower.scan(follow=True, timeout=60):
        seen.append((off, bytes(body)))
        if len(seen) == expected:
            break
    for p in procs:
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0 and out.strip() == "done"
    assert len(seen) == expected
    # Dense offsets, each producer's records in its own order.
    offsets = [o for o, _ in seen]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    # The follower saw every record of the store (a scan walks record to record).
    assert [(o, bytes(b)) for o, b in log.scan()] == seen
    for n in range(PRODUCERS):
        mine = [b for _, b in seen if b.startswith(b"p%d-" % n)]
        numbers = [int(b.split(b"-")[1]) for b in mine]
        assert numbers == sorted(numbers)
        assert len(mine) == EACH + EACH // 10 * 2
    # The parent's own writer sees them all too.
    assert log.max_offset == follower.max_offset
    log.close()
    follower.close()
    with CommitLog(dirs) as again:  # exclusive: the store is whole after the last one left
        assert sum(1 for _ in again.scan()) == expected


def test_exclusive_is_the_default_and_excludes_shared_writers(tmp_path):
    d = str(tmp_path / "s")
    with CommitLog(d, segment_size=SEGMENT):
        with pytest.raises(StoreLockedError):
            CommitLog(d, segment_size=SEGMENT, exclusive=False)
    with CommitLog(d, segment_size=SEGMENT, exclusive=False) as a:
        with pytest.raises(StoreLockedError):
            CommitLog(d, segment_size=SEGMENT)
        with CommitLog(d, segment_size=SEGMENT, exclusive=False) as b:
            x = a.append(b"from a")
            y = b.append(b"from b")
            assert y > x
            assert bytes(a.read(y)) == b"from b"


def test_shared_writers_refuse_a_bad_exclusive_and_a_strategy_unlike_theirs(tmp_path):
    d = str(tmp_path / "s")
    with pytest.raises(TypeError, match="exclusive"):
        CommitLog(d, exclusive="no")
    # A custom strategy is shared (each process calls its own); a joiner must give one too.
    with CommitLog(d, exclusive=False, strategy=lambda dirs, start: 0) as log:
        log.append(b"x")
        with pytest.raises(ConfigurationError, match="strategy is custom there, round_robin"):
            CommitLog(d, exclusive=False)
        with CommitLog(d, exclusive=False, strategy=lambda dirs, start: 0) as joiner:
            assert bytes(joiner.read(0)) == b"x"


def test_a_producer_killed_mid_stream_loses_nothing_it_was_told(tmp_path):
    """A producer SIGKILLed while it appends: every record whose append returned in it is in the
    log (it prints each offset after the call returns), and the others go on appending."""
    dirs = [str(tmp_path / "d0")]
    script = f"""
        import sys
        from rmqlog import CommitLog
        log = CommitLog({dirs!r}, segment_size={SEGMENT}, exclusive=False)
        i = 0
        while True:
            off = log.append(b"k-%d" % i)
            sys.stdout.write("%d %d\\n" % (off, i))
            sys.stdout.flush()
            i += 1
        """
    with CommitLog(dirs, segment_size=SEGMENT, exclusive=False) as log:
        p = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE, text=True
        )
        assert p.stdout is not None
        told = [p.stdout.readline() for _ in range(500)]
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        told = [tuple(map(int, line.split())) for line in told]
        after = log.append(b"after")
        for off, i in told:
            assert bytes(log.read(off)) == b"k-%d" % i
        assert bytes(log.read(after)) == b"after"


def test_the_docs_example_runs():
    """examples/producer_consumer.py: three producer processes, three waiting consumers."""
    example = os.path.join(os.path.dirname(__file__), "..", "examples", "producer_consumer.py")
    r = subprocess.run([sys.executable, example], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3 and all("3000 events from 3 producers, in order" in x for x in lines)
