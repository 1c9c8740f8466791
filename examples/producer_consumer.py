"""Several producer processes appending to one log, and consumers in other processes that wait
for each record.

    make demo                                   # .venv with rmqlog
    .venv/bin/python examples/producer_consumer.py

Three producer processes open the store with ``exclusive=False`` and append JSON events at their
own pace (single appends and batches); two consumer processes follow the log with
``scan(follow=True)``, each woken by the append that publishes the next record, whichever
producer made it (no polling), and a third waits for durable records only. Each consumer checks
that it saw every producer's events once, each producer's in its order, and prints how many it
got. Everything goes to a temporary directory, removed at the end.
"""

import json
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

from rmqlog import CommitLog

PRODUCERS = 3
EVENTS = 1_000  # per producer


def produce(dirs: list[str], producer: int, ready) -> None:
    """One of several writers: appends EVENTS events, some alone, some in batches of 10."""
    opts = {"segment_size": 1 << 20, "flush": "async", "flush_interval_ms": 50}
    with CommitLog(dirs, exclusive=False, **opts) as log:
        ready.wait()
        n = 0
        while n < EVENTS:
            if n % 100 < 50:
                log.append(json.dumps({"p": producer, "n": n, "at": time.time()}).encode())
                n += 1
            else:
                log.append_batch(
                    [
                        json.dumps({"p": producer, "n": i, "at": time.time()}).encode()
                        for i in range(n, n + 10)
                    ]
                )
                n += 10
            time.sleep(0.0005)
        log.flush()


def consume(dirs: list[str], name: str, durable: bool, ready, out) -> None:
    """A follower: every event from the start of the log, as it arrives."""
    with CommitLog(dirs[-1], read_only=True) as log:
        ready.wait()
        expected = [0] * PRODUCERS  # each producer's next event
        # Ends after 5 s without a new record (the producers are done), or at close().
        for _offset, body in log.scan(follow=True, timeout=5.0, durable=durable):
            event = json.loads(bytes(body))
            p = event["p"]
            if event["n"] != expected[p]:
                out.put(f"{name}: expected producer {p}'s event {expected[p]}, got {event['n']}")
                return
            expected[p] += 1
            if sum(expected) == PRODUCERS * EVENTS:
                break
        out.put(f"{name}: {sum(expected)} events from {PRODUCERS} producers, in order")


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        dirs = [str(Path(tmp) / "d0"), str(Path(tmp) / "d1")]
        CommitLog(dirs).close()  # create the store, so that followers can open it first
        ctx = mp.get_context("spawn")
        ready = ctx.Barrier(PRODUCERS + 3)
        out = ctx.Queue()
        procs = [ctx.Process(target=produce, args=(dirs, p, ready)) for p in range(PRODUCERS)]
        for name, durable in [("consumer-1", False), ("consumer-2", False), ("durable", True)]:
            procs.append(ctx.Process(target=consume, args=(dirs, name, durable, ready, out)))
        for p in procs:
            p.start()
        results = [out.get(timeout=120) for _ in range(3)]
        for p in procs:
            p.join(timeout=60)
        for line in sorted(results):
            print(line)
        ok = all(line.endswith("in order") for line in results)
        ok = ok and all(p.exitcode == 0 for p in procs)
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
