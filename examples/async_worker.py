"""An asyncio service that consumes a log while it answers requests: the shape of a FastAPI app
whose lifespan starts worker tasks, with nothing but asyncio.

    make demo
    .venv/bin/python examples/async_worker.py

Two producer processes append orders to one store (``exclusive=False``). The service, one
process and one event loop, opens the store read-only and runs two worker tasks under the one
consumer name ``"billing"`` (the opens of a name share its records: each poll claims the next
ones). Each worker handles a batch, then commits it, with ``async for batch in consumer``: its
waits are awaited in the event loop (one thread per log sleeps on the store's futex for every
waiting coroutine), and the commit, which syncs to the disk, runs in a thread. Meanwhile the
service answers HTTP requests (``GET /stats``, as a FastAPI route would), and a client asks every
10 ms and times each answer: the event loop never blocks on the workers' waits.

At the end the example prints how many orders were handled (each once: no worker died), the
answers' latencies, and where the name's committed position is.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from rmqlog import CommitLog, Consumer

PRODUCERS = 2
ORDERS = 5_000  # per producer
WORKERS = 2


def produce(dirs: list[str], producer: int) -> None:
    with CommitLog(dirs, exclusive=False) as log:
        for n in range(0, ORDERS, 50):
            orders = [{"producer": producer, "order": i} for i in range(n, n + 50)]
            log.append_batch([json.dumps(o).encode() for o in orders])
            time.sleep(0.002)


class App:
    """What FastAPI keeps in ``app.state``: the log, and what the workers did."""

    def __init__(self, dirs: list[str]) -> None:
        self.dirs = dirs
        self.log: CommitLog | None = None
        self.handled: dict[tuple[int, int], int] = {}  # (producer, order) -> times handled
        self.batches = 0


async def commit(consumer: Consumer) -> int:
    """The consumer's commit (it syncs to the disk) in a thread: the loop goes on meanwhile. A
    cancellation (the service stopping) lets it finish first, so that the consumer closes after
    it."""
    done = asyncio.ensure_future(asyncio.to_thread(consumer.commit))
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        await done
        raise


async def worker(app: App, name: str) -> None:
    assert app.log is not None
    with app.log.consumer("billing", start="earliest") as billing:
        async for batch in billing.stream(200, body="bytes"):
            for _offset, body in batch:
                order = json.loads(body)
                key = (order["producer"], order["order"])
                app.handled[key] = app.handled.get(key, 0) + 1  # the side effect
            app.batches += 1
            await commit(billing)  # at least once: commit after the batch is handled


@contextlib.asynccontextmanager
async def lifespan(app: App) -> AsyncIterator[None]:
    """What FastAPI's ``lifespan=`` takes: start the workers, stop them at shutdown."""
    app.log = CommitLog(app.dirs, read_only=True, wait_for_store_ms=30_000)
    tasks = [asyncio.create_task(worker(app, f"worker-{w}")) for w in range(WORKERS)]
    try:
        yield
    finally:
        for t in tasks:
            t.cancel()  # ends each worker's awaited poll at once
        await asyncio.gather(*tasks, return_exceptions=True)
        app.log.close()


async def serve(app: App, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """``GET /stats``: the route of the service."""
    request = await reader.readline()
    while await reader.readline() not in (b"\r\n", b""):
        pass  # the headers
    if request.split()[1:2] == [b"/stats"]:
        body = json.dumps({"handled": len(app.handled), "batches": app.batches}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
    else:
        body = b"{}"
        writer.write(b"HTTP/1.1 404 Not Found\r\n")
    writer.write(b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    writer.close()


async def get(port: int, path: str) -> dict[str, int]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nhost: localhost\r\n\r\n".encode())
    response = await reader.read()
    writer.close()
    return json.loads(response.split(b"\r\n\r\n", 1)[1])


async def service(dirs: list[str]) -> int:
    app = App(dirs)
    total = PRODUCERS * ORDERS
    server = await asyncio.start_server(lambda r, w: serve(app, r, w), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    latencies: list[float] = []
    async with server, lifespan(app):
        deadline = time.monotonic() + 60
        while True:  # a client of the service
            t = time.monotonic()
            stats = await get(port, "/stats")
            latencies.append(time.monotonic() - t)
            if stats["handled"] >= total or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.01)
    twice = sum(1 for n in app.handled.values() if n > 1)
    print(f"{len(app.handled)} of {total} orders handled ({twice} twice), in {app.batches} batches")
    ms = sorted(x * 1000 for x in latencies)
    print(
        f"GET /stats answered {len(ms)} times meanwhile: median {statistics.median(ms):.2f} ms, "
        f"max {ms[-1]:.2f} ms"
    )
    with CommitLog(dirs, read_only=True) as log:
        (billing,) = [c for c in log.consumers() if c["name"] == "billing"]
        print(f"billing committed up to {billing['position']} of {log.max_offset}")
    return 0 if len(app.handled) == total else 1


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        dirs = [str(Path(tmp) / "d0"), str(Path(tmp) / "d1")]
        ctx = mp.get_context("spawn")
        producers = [ctx.Process(target=produce, args=(dirs, p)) for p in range(PRODUCERS)]
        for p in producers:
            p.start()
        code = asyncio.run(service(dirs))
        for p in producers:
            p.join()
        return code


if __name__ == "__main__":
    sys.exit(main())
