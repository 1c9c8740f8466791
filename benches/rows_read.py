"""Rows py_read_100, py_read_100_vs_seek, py_scan_100: random reads and a full scan of one log of
100 B records against the pure-Python framed log's readers (benches/pylog.py)."""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable

from harness import BODY_100, SEGMENT, Row, Sizes, Workdir, alternate, say, throughput, timed
from pylog import PyLog, PyMmapReader, PySeekReader

NAMES = ("py_read_100", "py_read_100_vs_seek", "py_scan_100")


def run(s: Sizes, wd: Workdir) -> list[Row]:
    from rmqlog import CommitLog

    n = s.records_100
    d = wd.new()
    log = CommitLog(os.path.join(d, "log"), segment_size=SEGMENT)
    py = PyLog(os.path.join(d, "py.log"))
    batch = [BODY_100] * s.batch
    ours_offsets: list[int] = []
    base_offsets: list[int] = []
    for _ in range(n // s.batch):
        ours_offsets.extend(log.append_batch(batch))
        base_offsets.extend(py.append_batch(batch))
    py.close()
    n = len(ours_offsets)
    rng = random.Random(42)
    picks = [rng.randrange(n) for _ in range(s.reads)]
    ours_sel = [ours_offsets[i] for i in picks]
    base_sel = [base_offsets[i] for i in picks]
    mm = PyMmapReader(os.path.join(d, "py.log"))
    sk = PySeekReader(os.path.join(d, "py.log"))
    assert bytes(log.read(ours_sel[0])) == bytes(mm.read(base_sel[0])) == sk.read(base_sel[0])

    def reader(read: Callable[[int], object], sel: list[int]) -> Callable[[], float]:
        def go() -> None:
            for o in sel:
                read(o)

        return lambda: timed(go)

    say(f"random reads ({s.reads} of {n} records of 100 B)")
    to, tm, ts = alternate(
        s.reps, reader(log.read, ours_sel), reader(mm.read, base_sel), reader(sk.read, base_sel)
    )
    k = s.reads
    ours_desc = "CommitLog.read(offset) -> memoryview (header and body CRC checked)"
    rows = [
        throughput(
            "py_read_100",
            k,
            to,
            tm,
            ours_desc,
            "pure-Python log, own mmap + memoryview: struct.unpack_from + zlib.crc32 check",
        ),
        throughput(
            "py_read_100_vs_seek",
            k,
            to,
            ts,
            ours_desc,
            "pure-Python log, os.pread of header and body (one call for small records) + "
            "zlib.crc32 check",
        ),
    ]

    def ours_scan() -> float:
        count = 0

        def go() -> None:
            nonlocal count
            for _off, _body in log.scan():
                count += 1

        t = timed(go)
        assert count == n, count
        return t

    def base_scan() -> float:
        count = 0

        def go() -> None:
            nonlocal count
            for _off, _body in sk.scan():
                count += 1

        t = timed(go)
        assert count == n, count
        return t

    say(f"scan ({n} records of 100 B)")
    to, tb = alternate(s.reps, ours_scan, base_scan)
    rows.append(
        throughput(
            "py_scan_100",
            n,
            to,
            tb,
            "for offset, body in CommitLog.scan() (memoryviews, CRCs checked)",
            "pure-Python log, generator reading it back sequentially (1 MiB buffered reads, "
            "unpack_from + crc32; faster here than its mmap + memoryview generator)",
        )
    )
    mm.close()
    sk.close()
    log.close()
    shutil.rmtree(d)
    return rows
