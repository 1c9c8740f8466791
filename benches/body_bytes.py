"""What ``body="bytes"`` costs: a log of JSON records scanned with memoryview bodies and with
``bytes`` bodies, alternating in one run (median of ``--reps``), for 100-byte records (``--records``
of them) and larger ones (the same bytes in all); then the 100-byte records decoded with
``json.loads`` three ways. The numbers in docs/producers-consumers.md ("Bodies as bytes") come
from it:

    .venv/bin/python benches/body_bytes.py [--records 1000000] [--reps 5] [--sizes 100,1k,...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable

from rmqlog import CommitLog

SIZES = "100,1000,16000,256000"


def body(i: int, size: int) -> bytes:
    """A JSON object of ``size`` bytes."""
    head = b'{"user": "u%06d", "n": %d, "pad": "' % (i % 100_000, i)
    return head + b"x" * (size - 2 - len(head)) + b'"}'


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def medians(cases: dict[str, Callable[[], object]], reps: int) -> dict[str, float]:
    """Each case's median time, the cases alternating (after one warming pass of each): on a
    shared machine, a burst of other work lands in one repetition of one case, not in all."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for fn in cases.values():
        fn()
    for _ in range(reps):
        for name, fn in cases.items():
            times[name].append(timed(fn))
    return {name: statistics.median(t) for name, t in times.items()}


def scans(log: CommitLog) -> dict[str, Callable[[], object]]:
    def views() -> None:
        for _off, _b in log.scan():
            pass

    def copies() -> None:
        for _off, _b in log.scan(body="bytes"):
            pass

    return {"scan()": views, 'scan(body="bytes")': copies}


def decodes(log: CommitLog) -> dict[str, Callable[[], object]]:
    def copied_view() -> None:
        for _off, b in log.scan():
            json.loads(bytes(b))

    def decoded_view() -> None:
        for _off, b in log.scan():
            json.loads(str(b, "utf-8"))

    def as_bytes() -> None:
        for _off, b in log.scan(body="bytes"):
            json.loads(b)

    def bytes_decoded() -> None:
        for _off, b in log.scan(body="bytes"):
            json.loads(b.decode())

    return {
        "json.loads(bytes(view))": copied_view,
        'json.loads(str(view, "utf-8"))': decoded_view,
        'json.loads(b), scan(body="bytes")': as_bytes,
        'json.loads(b.decode()), body="bytes"': bytes_decoded,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000, help="of 100 B")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--sizes", default=SIZES, help="body sizes in bytes, comma-separated")
    a = ap.parse_args()
    total = a.records * 100
    print(
        f"median of {a.reps}; Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f} at the start"
    )
    for size in (int(s) for s in a.sizes.split(",")):
        n = max(total // size, 1)
        with tempfile.TemporaryDirectory(prefix="rmqlog-body-bytes-") as d:
            with CommitLog(os.path.join(d, "log"), segment_size=256 << 20) as log:
                for start in range(0, n, 1000):
                    log.append_batch([body(i, size) for i in range(start, min(start + 1000, n))])
                assert len(body(n - 1, size)) == size and json.loads(body(n - 1, size))
                med = medians({**scans(log), **(decodes(log) if size == 100 else {})}, a.reps)
        print(f"{n} records of {size} B:")
        for name, t in med.items():
            print(f"  {name:36} {t:7.3f} s  {n / t / 1e6:6.2f} M records/s")
        view, copy = med["scan()"], med['scan(body="bytes")']
        print(
            f'  scan(body="bytes") / scan(): {copy / view:.2f} ({(copy - view) / n * 1e9:+.0f} ns '
            f"a record)"
        )
    print(f"load {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
