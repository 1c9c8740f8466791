"""asyncio: ``wait_async``, ``Consumer.poll_async``, ``async for`` over a consumer and over a
following scan (docs/producers-consumers.md, "asyncio"). One thread per log, in Rust, sleeps on
the store's futex for every waiting coroutine of every event loop; the loop never blocks."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _procs import child, expect_line, finish, wait_for

from rmqlog import ClosedError, CommitLog, CommitLogError, _aio


def aio_threads() -> int:
    """The threads of this process that wake coroutines (``rmqlog-aio``)."""
    n = 0
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                n += f.read().strip() == "rmqlog-aio"
        except OSError:
            pass  # ended meanwhile
    return n


# The writer of the store, in a process of its own: appends one record per line read on stdin
# and prints its offset; ends at EOF.
APPENDER = """
import sys
from rmqlog import CommitLog
with CommitLog(sys.argv[1]) as log:
    print("ready", flush=True)
    for line in sys.stdin:
        print(log.append(line.strip().encode()), flush=True)
"""


@pytest.fixture
def store(tmp_path) -> str:
    d = str(tmp_path / "store")
    with CommitLog(d) as log:
        log.append(b"first")
    return d


def test_wait_async_wakes_on_an_append_in_another_process(store):
    follower = CommitLog(store, read_only=True)
    writer = child(APPENDER, store)
    try:
        expect_line(writer, "ready")

        async def main() -> tuple[int, float]:
            end = follower.max_offset
            waiting = asyncio.create_task(follower.wait_async(end, timeout=30))
            await asyncio.sleep(0.2)  # asleep: nothing to wake it but the other process
            assert not waiting.done()
            t = time.monotonic()
            writer.stdin.write("wake\n")
            writer.stdin.flush()
            new = await waiting
            return new - end, time.monotonic() - t

        grown, took = asyncio.run(main())
        assert grown > 0
        assert took < 2.0, f"woken after {took:.3f} s"
        assert bytes(follower.read(int(writer.stdout.readline()))) == b"wake"
    finally:
        follower.close()
        finish(writer)


def test_many_waiters_in_two_event_loops_share_one_thread(make_log):
    log = make_log()
    log.append(b"a")
    end = log.max_offset
    other_ready, other_done = threading.Event(), []

    def other_loop() -> None:
        async def waiters() -> None:
            tasks = [asyncio.create_task(log.wait_async(end, timeout=30)) for _ in range(50)]
            await asyncio.sleep(0.05)
            other_ready.set()
            other_done.extend(await asyncio.gather(*tasks))

        asyncio.run(waiters())

    thread = threading.Thread(target=other_loop)
    thread.start()

    async def main() -> list[int]:
        tasks = [asyncio.create_task(log.wait_async(end, timeout=30)) for _ in range(200)]
        await asyncio.sleep(0.05)
        assert other_ready.wait(10)
        assert aio_threads() == 1, "one thread wakes every waiter of the log, in every loop"
        assert all(not t.done() for t in tasks)
        log.append(b"b")
        return await asyncio.gather(*tasks)

    woke = asyncio.run(main())
    thread.join(10)
    assert woke == [log.max_offset] * 200
    assert other_done == [log.max_offset] * 50
    assert not _aio._subscriptions, "every loop let go of its subscription"
    assert wait_for(lambda: aio_threads() == 0, 5.0), "the thread ends once no one waits"


def test_a_cancelled_wait_ends_at_once_and_lets_go(make_log):
    log = make_log()

    async def main() -> float:
        waiting = asyncio.create_task(log.wait_async(log.max_offset))
        await asyncio.sleep(0.05)
        assert _aio._subscriptions
        t = time.monotonic()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        took = time.monotonic() - t
        assert not _aio._subscriptions
        # The log is as it was: the next wait is woken as before.
        again = asyncio.create_task(log.wait_async(log.max_offset, timeout=10))
        await asyncio.sleep(0.02)
        log.append(b"x")
        assert await again == log.max_offset
        return took

    assert asyncio.run(main()) < 0.1
    # A timeout through asyncio (cancelling the task) as well.
    with pytest.raises(TimeoutError):
        asyncio.run(asyncio.wait_for(log.wait_async(log.max_offset), 0.1))
    assert not _aio._subscriptions


def test_close_ends_a_wait_at_once_with_closed_error(make_log):
    log = make_log()

    async def main() -> float:
        waiting = asyncio.create_task(log.wait_async(log.max_offset))
        await asyncio.sleep(0.05)
        assert aio_threads() == 1
        t = time.monotonic()
        log.close()
        with pytest.raises(ClosedError):
            await waiting
        return time.monotonic() - t

    assert asyncio.run(main()) < 0.5
    assert aio_threads() == 0, "close() joins the thread"
    with pytest.raises(ClosedError):
        asyncio.run(log.wait_async(0))


def test_a_timeout_returns_the_end_and_waiting_costs_no_cpu(make_log):
    log = make_log()
    log.append(b"a")
    end = log.max_offset

    async def main() -> tuple[int, float, float]:
        cpu, t = time.process_time(), time.monotonic()
        got = await log.wait_async(end, timeout=0.5)
        return got, time.monotonic() - t, time.process_time() - cpu

    got, took, cpu = asyncio.run(main())
    assert got == end, "not past the offset: timed out"
    assert 0.45 <= took < 2.0
    assert cpu < 0.1, f"{cpu:.3f} s of CPU in a 0.5 s wait"
    assert asyncio.run(log.wait_async(end, timeout=0)) == end
    assert asyncio.run(log.wait_async(0, timeout=0)) == end, "past the offset: at once"


def test_the_event_loop_keeps_running_while_coroutines_wait(make_log):
    log = make_log()

    async def main() -> tuple[int, float]:
        waits = [asyncio.create_task(log.wait_async(log.max_offset, timeout=0.6)) for _ in range(5)]
        ticks, worst, last = 0, 0.0, time.monotonic()
        while not all(w.done() for w in waits):
            await asyncio.sleep(0.01)
            now = time.monotonic()
            ticks, worst, last = ticks + 1, max(worst, now - last), now
        return ticks, worst

    ticks, worst = asyncio.run(main())
    assert ticks >= 20, f"{ticks} ticks of 10 ms in 0.6 s"
    assert worst < 0.3, f"the loop stalled {worst:.3f} s"


# A worker of the name "w" in a process of its own: `async for` over its consumer, printing the
# offsets of each batch (a JSON list) and committing, until the line on stdin that ends it.
WORKER = """
import asyncio, json, sys
from rmqlog import CommitLog

async def main():
    log = CommitLog(sys.argv[1], read_only=True)
    consumer = log.consumer("w")
    loop = asyncio.get_running_loop()
    stop = loop.run_in_executor(None, sys.stdin.readline)
    stop.add_done_callback(lambda _: consumer.close())  # ends the async for at once
    print("ready", flush=True)
    async for batch in consumer.stream(10, body="bytes"):
        print(json.dumps([off for off, _ in batch]), flush=True)
        consumer.commit()
    print("end", flush=True)

asyncio.run(main())
"""


def test_poll_async_shares_a_name_with_a_worker_in_another_process(store):
    with CommitLog(store) as log:
        log.consumer("w").close()  # the name starts at the earliest record
        worker = child(WORKER, store)
        try:
            expect_line(worker, "ready")

            async def main() -> tuple[list[int], list[int]]:
                mine: list[int] = []
                theirs: list[int] = []
                written = [log.min_offset]
                appended = asyncio.Event()
                loop = asyncio.get_running_loop()

                async def read_theirs() -> None:
                    while True:
                        line = await loop.run_in_executor(None, worker.stdout.readline)
                        if line in ("", "end\n"):
                            return
                        theirs.extend(json.loads(line))

                async def work() -> None:
                    with log.consumer("w") as c:
                        while not appended.is_set() or len(mine) + len(theirs) < len(written):
                            batch = await c.poll_async(10, timeout=0.2)
                            mine.extend(off for off, _ in batch)
                            c.commit()

                reader = asyncio.create_task(read_theirs())
                worker_task = asyncio.create_task(work())
                for i in range(50):
                    written.extend(log.append_batch([b"r%d-%d" % (i, j) for j in range(20)]))
                    await asyncio.sleep(0.005)
                appended.set()
                await asyncio.wait_for(worker_task, 30)
                worker.stdin.write("stop\n")
                worker.stdin.flush()
                await asyncio.wait_for(reader, 30)
                assert sorted(mine + theirs) == sorted(written), "every record, once"
                return mine, theirs

            mine, theirs = asyncio.run(main())
            assert mine and theirs, "both workers of the name got records"
            assert worker.wait(10) == 0
        finally:
            finish(worker)


def test_async_for_over_a_consumer_yields_batches_until_it_closes(make_log):
    log = make_log()
    written = log.append_batch([b"a", b"b", b"c"])

    async def main() -> list[list[tuple[int, bytes]]]:
        c = log.consumer("c", exclusive=True)
        got: list[list[tuple[int, bytes]]] = []

        async def later() -> None:
            await asyncio.sleep(0.05)
            log.append(b"d")
            await asyncio.sleep(0.05)
            c.close()  # ends the loop below at once

        closer = asyncio.create_task(later())
        async for batch in c:
            got.append([(off, bytes(body)) for off, body in batch])
        await closer
        return got

    got = asyncio.run(main())
    assert got[0] == list(zip(written, [b"a", b"b", b"c"], strict=True))
    assert [body for batch in got[1:] for _, body in batch] == [b"d"]


def test_closing_a_consumer_ends_its_awaited_poll_at_once(make_log):
    log = make_log()

    async def main() -> float:
        c = log.consumer("c")
        polling = asyncio.create_task(c.poll_async())
        await asyncio.sleep(0.05)
        t = time.monotonic()
        c.close()
        with pytest.raises(CommitLogError, match="closed"):
            await polling
        return time.monotonic() - t

    assert asyncio.run(main()) < 0.5


def test_poll_async_times_out_with_no_records_and_checks_its_arguments(make_log):
    log = make_log()
    c = log.consumer("c")
    assert asyncio.run(c.poll_async(timeout=0.1)) == []
    with pytest.raises(TypeError):
        c.poll_async("ten")
    with pytest.raises(ValueError):
        c.poll_async(body="text")
    with pytest.raises(ValueError):
        log.wait_async(0, timeout=-1)
    with pytest.raises(TypeError, match="no timeout"):
        c.stream(timeout=1)
    log.append(b"x")
    assert asyncio.run(c.poll_async(timeout=0, body="bytes")) == [(0, b"x")]


def test_async_for_over_a_following_scan(store):
    follower = CommitLog(store, read_only=True)
    writer = child(APPENDER, store)
    try:
        expect_line(writer, "ready")

        async def main() -> list[bytes]:
            got: list[bytes] = []

            async def append_later() -> None:
                for word in ("one", "two", "three"):
                    await asyncio.sleep(0.03)
                    writer.stdin.write(word + "\n")
                    writer.stdin.flush()

            appending = asyncio.create_task(append_later())
            async for _off, body in follower.scan(0, follow=True, timeout=1.0, body="bytes"):
                got.append(body)  # ends 1 s after the last record (idle)
            await appending
            return got

        t = time.monotonic()
        assert asyncio.run(main()) == [b"first", b"one", b"two", b"three"]
        assert time.monotonic() - t < 10

        # A following scan ends at its end, and at the log's close.
        async def until_end() -> list[int]:
            return [off async for off, _ in follower.scan(0, follower.max_offset, follow=True)]

        assert len(asyncio.run(until_end())) == 4

        async def until_close() -> list[int]:
            asyncio.get_running_loop().call_later(0.1, follower.close)
            return [off async for off, _ in follower.scan(follower.max_offset, follow=True)]

        assert asyncio.run(until_close()) == []
    finally:
        follower.close()
        finish(writer)


def test_an_awaiting_follower_follows_a_new_writers_control_page(tmp_path):
    """The next writer opens the store with its directories in another order: its control page
    goes to the other directory and the old one is retired. The log's thread moves to the new
    page, so the new writer's first append wakes the coroutine at once."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    with CommitLog([a, b]) as log:
        log.append(b"first")
    follower = CommitLog([a, b], read_only=True)
    writer = None
    try:

        async def main() -> tuple[bytes, float]:
            nonlocal writer
            loop = asyncio.get_running_loop()
            end = follower.max_offset
            waiting = asyncio.create_task(follower.wait_async(end, timeout=20))
            await asyncio.sleep(0.1)
            writer = child(APPENDER, os.pathsep.join([b, a]))
            assert (await loop.run_in_executor(None, writer.stdout.readline)).strip() == "ready"
            await asyncio.sleep(0.2)
            assert not waiting.done()
            t = time.monotonic()
            writer.stdin.write("moved\n")
            writer.stdin.flush()
            await waiting
            return bytes(follower.read(end)), time.monotonic() - t

        body, took = asyncio.run(main())
        assert body == b"moved"
        assert took < 0.5, f"woken {took:.3f} s after the append (the page was not followed)"
        assert (Path(b) / "rmqlog.ctl").exists()
    finally:
        follower.close()
        if writer is not None:
            finish(writer)


def test_a_follower_that_cannot_be_woken_looks_every_100_ms(tmp_path):
    """No control page (here: a directory in its place, so the writer keeps a private page):
    the thread wakes the coroutines every 100 ms, and they list the store."""
    d = tmp_path / "store"
    d.mkdir()
    (d / "rmqlog.ctl").mkdir()
    with CommitLog(str(d)) as writer:
        writer.append(b"a")
        follower = CommitLog(str(d), read_only=True)
        try:

            async def main() -> float:
                end = follower.max_offset
                waiting = asyncio.create_task(follower.wait_async(end, timeout=10))
                await asyncio.sleep(0.15)
                t = time.monotonic()
                writer.append(b"b")
                assert await waiting > end
                return time.monotonic() - t

            assert asyncio.run(main()) < 1.0
        finally:
            follower.close()


def test_a_forked_child_forgets_the_parents_subscriptions(make_log, tmp_path):
    log = make_log()
    started, woke = threading.Event(), []

    def parent_loop() -> None:
        async def wait() -> None:
            task = asyncio.create_task(log.wait_async(log.max_offset, timeout=30))
            await asyncio.sleep(0.02)
            started.set()
            woke.append(await task)

        asyncio.run(wait())

    thread = threading.Thread(target=parent_loop)
    thread.start()
    assert started.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: the parent's log is closed here, a log of its own waits as usual
        code = 1
        try:
            assert not _aio._subscriptions
            try:
                asyncio.run(log.wait_async(0, timeout=5))
            except ClosedError:
                own = CommitLog(str(tmp_path / "child"))

                async def own_wait() -> int:
                    asyncio.get_running_loop().call_later(0.05, own.append, b"c")
                    return await own.wait_async(0, timeout=5)

                code = 0 if asyncio.run(own_wait()) > 0 else 2
                own.close()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    log.append(b"after the fork")  # still wakes the parent's waiter
    thread.join(10)
    assert woke == [log.max_offset]


def test_the_example_runs():
    """examples/async_worker.py: an asyncio service whose worker tasks consume with
    ``async for`` while it answers requests."""
    example = Path(__file__).parents[1] / "examples" / "async_worker.py"
    r = subprocess.run([sys.executable, example], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "10000 of 10000 orders handled" in r.stdout, r.stdout


def test_an_exclusive_consumers_awaited_poll_sees_a_nack_delay_end(make_log):
    """A nack's delay ends without a store event: the awaited poll of an exclusive consumer
    looks again (it used to wait for the next append)."""
    log = make_log()
    offs = log.append_batch([b"a", b"b", b"c"])
    log.flush()  # nothing left for the flusher to wake anyone with
    c = log.consumer("x", exclusive=True)
    assert [o for o, _ in c.poll(10)] == offs
    c.nack(delay=0.2)

    async def go():
        started = time.monotonic()
        got = await c.poll_async(timeout=5)
        return got, time.monotonic() - started

    got, took = asyncio.run(go())
    assert [o for o, _ in got] == offs
    assert 0.15 <= took < 2, took
    c.close()
