"""Producers, and a consumer service whose workers share one consumer name and resume after a
crash.

    make demo                                   # .venv with rmqlog
    .venv/bin/python examples/named_consumers.py

Two producer processes append orders to one store (``exclusive=False``). The store keeps what a
consumer has not committed (``retain_unconsumed=True``) while its size retention
(``retention_bytes``) deletes what every consumer is done with: settings the producers give and
the store keeps (docs/options.md). Two worker processes, started before the store exists, open
it read-only (``wait_for_store_ms``) and consume under the one name ``"billing"``: each poll
claims the next records for that worker, and each worker records what it handled, then commits.
One worker is killed (SIGKILL) in the middle of the stream, between a poll and its commit (it
says when it holds a handled poll not yet committed); a new worker takes its place. The records
the dead one had claimed and not committed go to the next poll (at least once), delivered a
second time (``poll(with_deliveries=True)`` says so), and no record is lost.
At the end the example prints how many orders were handled, how many twice (exactly the records
the dead worker held) and how many a worker got on a second delivery, and where the name's
committed position is.
"""

import multiprocessing as mp
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from rmqlog import CommitLog

PRODUCERS = 2
ORDERS = 20_000  # per producer
STORE = {"segment_size": 256 << 10, "retention_bytes": 512 << 10, "retain_unconsumed": True}


def produce(dirs: list[str], producer: int) -> None:
    with CommitLog(dirs, exclusive=False, **STORE) as log:
        for n in range(0, ORDERS, 100):
            log.append_batch([b"order %d-%d" % (producer, i) for i in range(n, n + 100)])
            time.sleep(0.001)


def work(dirs: list[str], worker: str, handled_dir: str, holding=None) -> None:
    """A worker of the billing service: handle, record, then commit. Ends when idle for 2 s.
    With ``holding``, it sets that event once it holds a handled poll not yet committed, and
    stops there (to be killed)."""
    with (
        CommitLog(dirs, read_only=True, wait_for_store_ms=30_000) as log,
        log.consumer("billing", start="earliest", redelivery_timeout=10.0) as billing,
        open(Path(handled_dir) / worker, "a") as handled,
    ):
        polls = 0
        while batch := billing.poll(200, timeout=2.0, with_deliveries=True):
            for offset, _body, deliveries in batch:
                handled.write(f"{offset} {deliveries}\n")  # the side effect, before the commit
            handled.flush()
            os.fsync(handled.fileno())
            polls += 1
            if holding is not None and polls == 5:
                holding.set()  # killed here, between its poll and its commit
                time.sleep(60)
            billing.commit()


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        dirs = [str(Path(tmp) / "d0"), str(Path(tmp) / "d1")]
        handled_dir = Path(tmp) / "handled"
        handled_dir.mkdir()
        ctx = mp.get_context("spawn")
        producers = [ctx.Process(target=produce, args=(dirs, p)) for p in range(PRODUCERS)]
        holding = ctx.Event()
        workers = [
            ctx.Process(target=work, args=(dirs, "worker-1", str(handled_dir), holding)),
            ctx.Process(target=work, args=(dirs, "worker-2", str(handled_dir))),
        ]
        for p in workers + producers:  # the workers wait for the store the producers make
            p.start()
        if not holding.wait(60):
            raise SystemExit("worker-1 never held a poll")
        os.kill(workers[0].pid, signal.SIGKILL)  # mid-stream, between its poll and its commit
        workers[0].join()
        replacement = ctx.Process(target=work, args=(dirs, "worker-3", str(handled_dir)))
        replacement.start()
        for p in [*producers, workers[1], replacement]:
            p.join()

        seen: dict[int, int] = {}
        again = 0  # records a worker got on their second delivery
        for f in handled_dir.iterdir():
            for line in f.read_text().splitlines():
                offset, deliveries = map(int, line.split())
                seen[offset] = seen.get(offset, 0) + 1
                again += deliveries > 1
        with CommitLog(dirs, exclusive=False) as log:  # the store's settings: STORE
            [billing] = log.consumers()
            deleted = log.clean()  # retention: only what billing is done with may go
            twice = sum(1 for n in seen.values() if n > 1)
            print(
                f"{len(seen)} of {PRODUCERS * ORDERS} orders handled, {twice} twice (the killed "
                f"worker's uncommitted poll), {again} of them on a second delivery; billing "
                f"committed {billing['position']} of {log.max_offset}; retention deleted "
                f"{deleted} segments, the log now starts at {log.min_offset}"
            )
            ok = (
                len(seen) == PRODUCERS * ORDERS
                and billing["position"] == log.max_offset
                and 0 < twice == again
            )
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
