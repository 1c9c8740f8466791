"""``rmqlog bench``: append, read and scan throughput and latency percentiles."""

from __future__ import annotations

import argparse
import logging
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Sequence
from typing import Any, Literal, TextIO

from rmqlog import CommitLog, CommitLogError
from rmqlog.cli.common import (
    EXIT_OK,
    UsageError,
    _emit_json,
    human_bytes,
    plural,
    progress,
    split_paths,
)

FlushMode = Literal["async", "sync", "none"]

log = logging.getLogger("rmqlog.cli")


def percentile(sorted_ns: Sequence[int], q: float) -> float:
    """The ``q`` quantile (0 < q <= 1, nearest rank) of sorted nanoseconds, in microseconds."""
    if not sorted_ns:
        return math.nan
    rank = min(len(sorted_ns), max(1, math.ceil(q * len(sorted_ns))))
    return sorted_ns[rank - 1] / 1000


def _phase(name: str, records: int, nbytes: int, ns: int, lat: list[int] | None) -> dict[str, Any]:
    """One benchmark phase's results: time, throughput and, if timed per call, latencies."""
    secs = ns / 1e9
    row: dict[str, Any] = {
        "phase": name,
        "records": records,
        "seconds": secs,
        "records_per_s": records / secs if secs else None,  # None: too fast for the clock
        "mib_per_s": nbytes / (1 << 20) / secs if secs else None,
    }
    if lat is not None:
        lat.sort()
        row.update(
            p50_us=percentile(lat, 0.5),
            p99_us=percentile(lat, 0.99),
            p999_us=percentile(lat, 0.999),
        )
    return row


def run_bench(
    dirs: list[str],
    records: int,
    size: int,
    flush: FlushMode,
    segment_size: int,
    batch: int = 1000,
) -> list[dict[str, Any]]:
    """Appends ``records`` single records then ``records`` more in batches, reads ``records``
    random offsets and scans everything; returns one result dict per phase."""
    pc = time.perf_counter_ns
    rng = random.Random(0)
    pool = [rng.randbytes(size) for _ in range(16)]
    results = []
    with CommitLog(dirs, segment_size=segment_size, flush=flush) as clog:
        append = clog.append
        offsets: list[int] = []
        lat = [0] * records
        with progress(records, "append", "rec") as bar:
            t0 = pc()
            for i in range(records):
                a = pc()
                off = append(pool[i & 15])
                lat[i] = pc() - a
                offsets.append(off)
                if i & 1023 == 1023:
                    bar.update(1024)
            clog.flush()
            elapsed = pc() - t0
        results.append(_phase("append", records, records * size, elapsed, lat))

        with progress(records, "append_batch", "rec") as bar:
            t0 = pc()
            for start in range(0, records, batch):
                chunk = [pool[i & 15] for i in range(start, min(start + batch, records))]
                offsets += clog.append_batch(chunk)
                bar.update(len(chunk))
            clog.flush()
            elapsed = pc() - t0
        results.append(_phase(f"append_batch({batch})", records, records * size, elapsed, None))

        picks = [rng.choice(offsets) for _ in range(records)] if offsets else []
        read = clog.read
        lat = [0] * len(picks)
        nbytes = 0
        with progress(len(picks), "read", "rec") as bar:
            t0 = pc()
            for i, off in enumerate(picks):
                a = pc()
                view = read(off)
                lat[i] = pc() - a
                nbytes += len(view)
                if i & 1023 == 1023:
                    bar.update(1024)
            elapsed = pc() - t0
        results.append(_phase("read (random)", len(picks), nbytes, elapsed, lat))

        count = nbytes = 0
        with progress(len(offsets), "scan", "rec") as bar:
            t0 = pc()
            for _off, body in clog.scan():
                count += 1
                nbytes += len(body)
                if count & 1023 == 0:
                    bar.update(1024)
            elapsed = pc() - t0
        if count != len(offsets):
            raise CommitLogError(f"scan returned {count} records, {len(offsets)} were appended")
        results.append(_phase("scan", count, nbytes, elapsed, None))
    return results


def _fmt(x: float | None, spec: str) -> str:
    """Formats a number, ``-`` when absent."""
    return "-" if x is None or math.isnan(x) else format(x, spec)


def cmd_bench(args: argparse.Namespace, out: TextIO) -> int:
    """``rmqlog bench``: append, read and scan throughput and latency percentiles."""
    tmp = None
    if args.dirs:
        dirs = split_paths(args.dirs)
        for d in dirs:
            if os.path.isdir(d) and os.listdir(d):
                raise UsageError(f"bench directory {d} is not empty (bench needs a fresh store)")
    else:
        tmp = tempfile.mkdtemp(prefix="rmqlog-bench-")
        dirs = [os.path.join(tmp, "store")]
    try:
        log.info("bench: %d records of %d B into %s", args.records, args.size, dirs)
        results = run_bench(dirs, args.records, args.size, args.flush, args.segment_size)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        _emit_json(
            {
                "records": args.records,
                "size": args.size,
                "flush": args.flush,
                "segment_size": args.segment_size,
                "dirs": dirs,
                "phases": results,
            },
            out,
        )
        return EXIT_OK
    where = "a temporary directory" if tmp else os.pathsep.join(dirs)
    print(
        f"rmqlog bench: {plural(args.records, 'record', commas=True)} of {args.size} B, "
        f"flush={args.flush}, "
        f"segment {human_bytes(args.segment_size)}, in {where}",
        file=out,
    )
    print(
        f"  {'phase':<20}{'seconds':>9}{'rec/s':>13}{'MiB/s':>10}"
        f"{'p50 us':>10}{'p99 us':>10}{'p999 us':>10}",
        file=out,
    )
    for r in results:
        print(
            f"  {r['phase']:<20}{r['seconds']:>9.3f}{_fmt(r['records_per_s'], ',.0f'):>13}"
            f"{_fmt(r['mib_per_s'], ',.1f'):>10}{_fmt(r.get('p50_us'), '.2f'):>10}"
            f"{_fmt(r.get('p99_us'), '.2f'):>10}{_fmt(r.get('p999_us'), '.2f'):>10}",
            file=out,
        )
    return EXIT_OK
