"""Rows py_append_100, py_append_100_shared, py_append_batch_100, py_append_1k: rmqlog appends
against the pure-Python framed log (benches/pylog.py), a fresh log per repetition, open and close
outside the clock. ``py_append_100_shared`` is a lone shared writer (``exclusive=False``): the
append lock and the catch-up through the control page, uncontended."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

from harness import (
    BODY_1K,
    BODY_100,
    SEGMENT,
    Row,
    Sizes,
    Workdir,
    alternate,
    say,
    throughput,
    timed,
)
from pylog import PyLog

NAMES = ("py_append_100", "py_append_100_shared", "py_append_batch_100", "py_append_1k")


def run(s: Sizes, wd: Workdir) -> list[Row]:
    from rmqlog import CommitLog

    def ours_single(body: bytes, n: int, exclusive: bool = True) -> Callable[[], float]:
        def run() -> float:
            d = wd.new()
            # flush="async" (the default)
            log = CommitLog(os.path.join(d, "log"), segment_size=SEGMENT, exclusive=exclusive)
            append = log.append

            def go() -> None:
                for _ in range(n):
                    append(body)

            t = timed(go)
            log.close()
            shutil.rmtree(d)
            return t

        return run

    def base_single(body: bytes, n: int) -> Callable[[], float]:
        def run() -> float:
            d = wd.new()
            log = PyLog(os.path.join(d, "py.log"))
            append = log.append

            def go() -> None:
                for _ in range(n):
                    append(body)
                log._f.flush()

            t = timed(go)
            log.close()
            shutil.rmtree(d)
            return t

        return run

    batch = [BODY_100] * s.batch
    nbatches = s.records_100 // s.batch

    def ours_batch() -> float:
        d = wd.new()
        log = CommitLog(os.path.join(d, "log"), segment_size=SEGMENT)
        append_batch = log.append_batch

        def go() -> None:
            for _ in range(nbatches):
                append_batch(batch)

        t = timed(go)
        log.close()
        shutil.rmtree(d)
        return t

    def base_batch() -> float:
        d = wd.new()
        log = PyLog(os.path.join(d, "py.log"))
        append_batch = log.append_batch

        def go() -> None:
            for _ in range(nbatches):
                append_batch(batch)
            log._f.flush()

        t = timed(go)
        log.close()
        shutil.rmtree(d)
        return t

    rows = []
    say("appends (100 B, single)")
    to, tb = alternate(
        s.reps, ours_single(BODY_100, s.records_100), base_single(BODY_100, s.records_100)
    )
    ours_desc = "CommitLog(path, segment_size=1 GiB) (flush='async'), append(bytes)"
    rows.append(
        throughput(
            "py_append_100",
            s.records_100,
            to,
            tb,
            ours_desc + ", 100 B",
            "pure-Python framed log: struct header + zlib.crc32 + buffered write, 100 B",
        )
    )
    say("appends (100 B, single, a lone shared writer)")
    to, tb = alternate(
        s.reps,
        ours_single(BODY_100, s.records_100, exclusive=False),
        base_single(BODY_100, s.records_100),
    )
    rows.append(
        throughput(
            "py_append_100_shared",
            s.records_100,
            to,
            tb,
            ours_desc + ", 100 B, exclusive=False (alone)",
            "pure-Python framed log: struct header + zlib.crc32 + buffered write, 100 B",
        )
    )
    say("appends (100 B, batches)")
    to, tb = alternate(s.reps, ours_batch, base_batch)
    rows.append(
        throughput(
            "py_append_batch_100",
            nbatches * s.batch,
            to,
            tb,
            f"CommitLog.append_batch, batches of {s.batch} x 100 B, defaults",
            f"pure-Python framed log, batches of {s.batch}: headers + bodies joined, one write",
            batch=s.batch,
        )
    )
    say("appends (1 KiB, single)")
    to, tb = alternate(
        s.reps, ours_single(BODY_1K, s.records_1k), base_single(BODY_1K, s.records_1k)
    )
    rows.append(
        throughput(
            "py_append_1k",
            s.records_1k,
            to,
            tb,
            ours_desc + ", 1 KiB",
            "pure-Python framed log: struct header + zlib.crc32 + buffered write, 1 KiB",
        )
    )
    return rows
