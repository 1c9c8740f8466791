"""rmqlog against what its users would otherwise use: one command, one table, one JSON file.

    python benches/compare.py                      # full run (minutes): bench-results.json
    python benches/compare.py --quick --out /tmp/x.json   # tiny sizes, every row, no assertion

Every row times rmqlog ("ours") and exactly one baseline in this process run, alternating them,
and keeps the median of several repetitions. ``ratio`` is ours/baseline (higher is better), except
``lookup_10k_vs_10_segments`` and ``recovery_1000_vs_10_segments``, the ratios of latencies and
times (lower is better). The Rust rows come from ``cargo bench --bench rust_rows``
(benches/rust_rows.rs), which prints them as JSON. Baselines and parameters: docs/benchmarks.md.

Needs the built extension (``import rmqlog``); ``persist-queue`` for its row (``pip install
'rmqlog[bench]'``); pyspark, pyarrow and java for the Spark row (``rmqlog[spark]``); cargo for the
Rust rows. A missing piece skips its row with a reason instead of failing the run.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import mmap
import os
import platform
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# name -> (comparison, target); "<=" rows are ratios of latencies or times.
TARGETS: dict[str, tuple[str, float]] = {
    "py_append_100": (">=", 3),
    "py_append_batch_100": (">=", 12),
    "py_append_1k": (">=", 3),
    "py_read_100": (">=", 1.5),
    "py_read_100_vs_seek": (">=", 3),
    "py_scan_100": (">=", 4),
    "py_vs_persistqueue_append_100": (">=", 100),
    "rust_append_1k_vs_memcpy": (">=", 0.6),
    "rust_append_100_vs_commitlog": (">=", 2),
    "rust_read_vs_commitlog": (">=", 2),
    "sync_append_64k_vs_fdatasync": (">=", 0.8),
    "lookup_10k_vs_10_segments": ("<=", 1.3),
    "recovery_1000_vs_10_segments": ("<=", 2),
    "spark_scan_vs_parquet": (">=", 0.35),
}
RUST_ROWS = (
    "rust_append_1k_vs_memcpy",
    "rust_append_100_vs_commitlog",
    "rust_read_vs_commitlog",
    "sync_append_64k_vs_fdatasync",
    "lookup_10k_vs_10_segments",
    "recovery_1000_vs_10_segments",
)


@dataclass(frozen=True)
class Sizes:
    """Fixed parameters of a run (docs/benchmarks.md); --quick shrinks the counts only."""

    quick: bool
    reps: int
    records_100: int  # appends, reads and scan of 100 B records
    records_1k: int
    batch: int  # append_batch batch size
    reads: int  # random reads
    pq_puts: int  # persist-queue puts per repetition
    pq_reps: int
    spark_rows: int
    spark_reps: int

    @staticmethod
    def make(quick: bool, reps: int | None) -> Sizes:
        if quick:
            return Sizes(True, reps or 1, 20_000, 5_000, 1_000, 5_000, 100, 1, 20_000, 1)
        return Sizes(
            False, reps or 5, 1_000_000, 1_000_000, 1_000, 200_000, 20_000, 3, 1_000_000, 3
        )


BODY_100 = bytes(range(100))
BODY_1K = bytes(i % 251 for i in range(1024))


# ------------------------------------------------------------------------------------------------
# The baseline: a framed log in pure Python, as a competent user writes it without rmqlog.
#
# Same 32-byte little-endian header fields as rmqlog (length, magic, body CRC32, -, offset,
# timestamp ms), body CRC with zlib.crc32, a buffered file (default buffering), offsets = file
# positions. It skips rmqlog's header CRC (one CRC per record: less work than rmqlog does).

MAGIC = 0x524D5101
HEADER = struct.Struct("<IIIIQQ")
HEAD3 = struct.Struct("<III")  # length, magic, body crc: what a reader needs
HEADER_LEN = HEADER.size
# The segment size of every rmqlog row: the broker preset's, with which the recorded numbers in
# docs/benchmarks.md were measured (the library's default is 64 MiB).
SEGMENT = 1 << 30
crc32 = zlib.crc32
time_ns = time.time_ns


class PyLog:
    """Append side of the pure-Python framed log, through a 1 MiB buffer (faster than the
    default 8 KiB, as for the scan)."""

    BUFFER = 1 << 20

    def __init__(self, path: str) -> None:
        self._f = open(path, "ab", buffering=self.BUFFER)
        self._write = self._f.write
        self._pack = HEADER.pack
        self.pos = self._f.tell()

    def append(self, body: bytes) -> int:
        pos = self.pos
        n = HEADER_LEN + len(body)
        self._write(self._pack(n, MAGIC, crc32(body), 0, pos, time_ns() // 1_000_000))
        self._write(body)
        self.pos = pos + n
        return pos

    def append_batch(self, bodies: list[bytes]) -> list[int]:
        pos = self.pos
        pack = self._pack
        ts = time_ns() // 1_000_000
        parts: list[bytes] = []
        add = parts.append
        offsets: list[int] = []
        off = offsets.append
        for body in bodies:
            n = HEADER_LEN + len(body)
            add(pack(n, MAGIC, crc32(body), 0, pos, ts))
            add(body)
            off(pos)
            pos += n
        self._write(b"".join(parts))
        self.pos = pos
        return offsets

    def close(self) -> None:
        self._f.close()


class PyMmapReader:
    """Read side with the log's own mmap + memoryview (zero-copy, like rmqlog's read)."""

    def __init__(self, path: str) -> None:
        self._f = open(path, "rb")
        self._mm = mmap.mmap(self._f.fileno(), 0, access=mmap.ACCESS_READ)
        self._mv = memoryview(self._mm)
        self.end = len(self._mm)

    def read(self, offset: int) -> memoryview:
        n, magic, crc = HEAD3.unpack_from(self._mv, offset)
        body = self._mv[offset + HEADER_LEN : offset + n]
        if magic != MAGIC or crc32(body) != crc:
            raise ValueError(f"bad record at {offset}")
        return body

    def scan(self) -> Iterator[tuple[int, memoryview]]:
        mv = self._mv
        unpack = HEAD3.unpack_from
        pos, end = 0, self.end
        while pos < end:
            n, magic, crc = unpack(mv, pos)
            body = mv[pos + HEADER_LEN : pos + n]
            if magic != MAGIC or crc32(body) != crc:
                raise ValueError(f"bad record at {pos}")
            yield pos, body
            pos += n

    def close(self) -> None:
        self._mv.release()
        self._mm.close()
        self._f.close()


class PySeekReader:
    """Read side without mmap: ``os.pread`` for random reads (not a buffered file, whose buffer
    would be refilled for every random record), a 1 MiB buffered file for scans."""

    SCAN_BUFFER = 1 << 20
    # One pread takes the header and a small body; a longer record costs a second one.
    GUESS = HEADER_LEN + 256

    def __init__(self, path: str) -> None:
        self._f = open(path, "rb", buffering=0)
        self._fd = self._f.fileno()

    def read(self, offset: int) -> bytes:
        got = os.pread(self._fd, self.GUESS, offset)
        n, magic, crc = HEAD3.unpack_from(got)
        if n <= len(got):
            body = got[HEADER_LEN:n]
        else:
            body = got[HEADER_LEN:] + os.pread(self._fd, n - len(got), offset + len(got))
        if magic != MAGIC or crc32(body) != crc:
            raise ValueError(f"bad record at {offset}")
        return body

    def scan(self) -> Iterator[tuple[int, bytes]]:
        """Sequential read-back through a 1 MiB buffer: the fastest pure-Python scan measured
        here (the mmap + memoryview generator of PyMmapReader.scan is 5-10% slower)."""
        with open(self._f.name, "rb", buffering=self.SCAN_BUFFER) as f:
            read = f.read
            unpack = HEAD3.unpack_from
            pos = 0
            while True:
                head = read(HEADER_LEN)
                if not head:
                    return
                n, magic, crc = unpack(head)
                body = read(n - HEADER_LEN)
                if magic != MAGIC or crc32(body) != crc:
                    raise ValueError(f"bad record at {pos}")
                yield pos, body
                pos += n

    def close(self) -> None:
        self._f.close()


# ------------------------------------------------------------------------------------------------
# Timing


_T0 = time.perf_counter()


def say(msg: str) -> None:
    """Progress on stderr, with the time since start."""
    print(f"[{time.perf_counter() - _T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def timed(fn: Callable[[], object]) -> float:
    """Seconds taken by ``fn()``, with the garbage collector off (as timeit does)."""
    gc.collect()
    gc.disable()
    try:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t
    finally:
        gc.enable()


def alternate(reps: int, *fns: Callable[[], float]) -> list[float]:
    """Runs each of ``fns`` ``reps`` times, rotating the order every repetition; each returns its
    own measured seconds. Returns the median per function."""
    times: list[list[float]] = [[] for _ in fns]
    for r in range(reps):
        order = list(range(len(fns)))
        k = r % len(fns)
        order = order[k:] + order[:k]
        for i in order:
            times[i].append(fns[i]())
    return [statistics.median(t) for t in times]


def row(
    name: str,
    ours_per_s: float | None,
    baseline_per_s: float | None,
    ratio: float | None,
    ours: str,
    baseline: str,
    **extra: object,
) -> dict[str, object]:
    cmp, target = TARGETS[name]
    met = None
    if ratio is not None:
        met = ratio >= target if cmp == ">=" else ratio <= target
    return {
        "name": name,
        "ours_per_s": ours_per_s,
        "baseline_per_s": baseline_per_s,
        "ratio": ratio,
        "target": f"{cmp} {target:g}",
        "met": met,
        "ours": ours,
        "baseline": baseline,
        **extra,
    }


def skipped(name: str, reason: str) -> dict[str, object]:
    say(f"  {name}: skipped: {reason}")
    return row(name, None, None, None, "", "", skip=reason)


def throughput(name: str, n: int, t_ours: float, t_base: float, ours: str, base: str, **kw):
    o, b = n / t_ours, n / t_base
    say(f"  {name}: ours {o:,.0f}/s, baseline {b:,.0f}/s, ratio {o / b:.2f}")
    return row(name, o, b, o / b, ours, base, items=n, **kw)


# ------------------------------------------------------------------------------------------------
# Python rows


class Workdir:
    """Fresh directories under one root, removed after use."""

    def __init__(self, root: str | None) -> None:
        self.root = tempfile.mkdtemp(prefix="rmqlog-compare-", dir=root)
        self._n = 0

    def new(self) -> str:
        self._n += 1
        path = os.path.join(self.root, f"d{self._n}")
        os.makedirs(path)
        return path

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def append_rows(s: Sizes, wd: Workdir) -> list[dict[str, object]]:
    from rmqlog import CommitLog

    def ours_single(body: bytes, n: int) -> Callable[[], float]:
        def run() -> float:
            d = wd.new()
            log = CommitLog(os.path.join(d, "log"), segment_size=SEGMENT)  # flush="async" (default)
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


def read_rows(s: Sizes, wd: Workdir) -> list[dict[str, object]]:
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


def persistqueue_row(s: Sizes, wd: Workdir) -> dict[str, object]:
    name = "py_vs_persistqueue_append_100"
    try:
        import persistqueue
    except ImportError as e:
        return skipped(name, f"persist-queue is not installed ({e}); pip install 'rmqlog[bench]'")
    from rmqlog import CommitLog

    n_ours, n_pq = s.records_100, s.pq_puts

    def ours() -> float:
        d = wd.new()
        log = CommitLog(os.path.join(d, "log"), segment_size=SEGMENT)
        append = log.append

        def go() -> None:
            for _ in range(n_ours):
                append(BODY_100)

        t = timed(go)
        log.close()
        shutil.rmtree(d)
        return t / n_ours

    def base() -> float:
        d = wd.new()
        q = persistqueue.Queue(os.path.join(d, "q"))  # default settings
        put = q.put

        def go() -> None:
            for _ in range(n_pq):
                put(BODY_100)

        t = timed(go)
        del q
        shutil.rmtree(d)
        return t / n_pq

    say(f"persist-queue ({n_pq} puts per repetition; ours {n_ours} appends)")
    to, tb = alternate(s.pq_reps, ours, base)
    o, b = 1 / to, 1 / tb
    say(f"  {name}: ours {o:,.0f}/s, baseline {b:,.0f}/s, ratio {o / b:.1f}")
    return row(
        name,
        o,
        b,
        o / b,
        "CommitLog.append, 100 B, defaults",
        "persistqueue.Queue(path) (persist-queue, default settings), put(100 B bytes) only",
        items=n_ours,
        baseline_items=n_pq,
    )


# ------------------------------------------------------------------------------------------------
# Rust rows (benches/rust_rows.rs)


def rust_rows(s: Sizes, data_dir: str, reps: int | None) -> list[dict[str, object]]:
    cargo = shutil.which("cargo")
    if cargo is None:
        return [skipped(n, "cargo is not on PATH") for n in RUST_ROWS]
    cmd = [cargo, "bench", "--quiet", "--bench", "rust_rows", "--"]
    if s.quick:
        cmd.append("--quick")
    if reps:
        cmd += ["--reps", str(reps)]
    env = dict(os.environ, RMQLOG_BENCH_DIR=data_dir)
    say(f"rust rows: {' '.join(cmd)} (builds the bench first if needed)")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, check=False)
    found = [ln for ln in proc.stdout.splitlines() if ln.startswith("RMQLOG_ROWS_JSON ")]
    if proc.returncode != 0 or not found:
        # Not a missing optional dependency: the bench is broken. The rows are written with the
        # reason and the run exits non-zero (so --quick in CI catches it).
        reason = f"cargo bench --bench rust_rows failed (exit {proc.returncode})"
        return [{**skipped(n, reason), "error": True} for n in RUST_ROWS]
    got = {r["name"]: r for r in json.loads(found[-1].split(" ", 1)[1])}
    rows = []
    for name in RUST_ROWS:
        r = got.get(name)
        if r is None:
            rows.append(skipped(name, "missing from rust_rows output"))
            continue
        extra = dict(r.get("extra", {}))
        rows.append(
            row(
                name,
                r["ours_per_s"],
                r["baseline_per_s"],
                r["ratio"],
                str(extra.pop("ours", "")),
                str(extra.pop("baseline", "")),
                items=r.get("items"),
                ours_median_s=r.get("ours_median_s"),
                baseline_median_s=r.get("baseline_median_s"),
                **extra,
            )
        )
    return rows


# ------------------------------------------------------------------------------------------------
# Spark row


def spark_row(s: Sizes, wd: Workdir) -> dict[str, object]:
    name = "spark_scan_vs_parquet"
    try:
        import pyspark  # noqa: F401

        import rmqlog.spark as rs
    except Exception as e:  # ImportError, or rmqlog.spark failing on its own imports
        return skipped(name, f"pyspark or rmqlog.spark is not available ({e})")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return skipped(name, "java is not on PATH (Spark needs a JVM)")
    from rmqlog import CommitLog

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    n = s.spark_rows
    d = wd.new()
    store = os.path.join(d, "store")
    log = CommitLog(store, segment_size=SEGMENT)  # as for the other rows
    batch = [BODY_100] * s.batch
    for _ in range(n // s.batch):
        log.append_batch(batch)
    log.close()
    say(f"spark ({n} rows; starting a local[2] session)")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("rmqlog-compare")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    try:
        spark.sparkContext.setLogLevel("ERROR")
        rs.register(spark)
        say("  spark session up")
        parquet = os.path.join(d, "parquet")
        spark.read.format("rmqlog").load(store).write.parquet(parquet)

        def full_scan(load: Callable[[], object]) -> Callable[[], float]:
            # The DataFrame and its query are built anew for every run: Spark answers a repeated
            # collect() of one DataFrame object from a cache, without reading anything. The query
            # touches the body and timestamp columns, so Parquet cannot skip them (count() alone
            # would be answered from Parquet footers).
            def run() -> float:
                t = time.perf_counter()
                got = (
                    load()
                    .agg(
                        F.count("*").alias("n"),
                        F.sum(F.length("body")).alias("bytes"),
                        F.max("timestamp").alias("last"),
                    )
                    .collect()[0]
                )
                t = time.perf_counter() - t
                # The timed query saw every row.
                assert got["n"] == n and got["bytes"] == n * len(BODY_100), got
                assert got["last"] is not None, got
                return t

            return run

        ours = full_scan(lambda: spark.read.format("rmqlog").load(store))
        base = full_scan(lambda: spark.read.parquet(parquet))
        if not s.quick:
            ours()  # the first queries start the Python workers: not timed
            base()
        say("  parquet written" + ("" if s.quick else ", first queries run"))
        to, tb = alternate(s.spark_reps, ours, base)
    finally:
        spark.stop()
    shutil.rmtree(d, ignore_errors=True)
    return throughput(
        name,
        n,
        to,
        tb,
        "spark.read.format('rmqlog').load(store), count(*), sum(length(body)), max(timestamp); "
        "the DataFrame built anew for each run, local[2]",
        "spark.read.parquet of the same rows (written by Spark, default snappy), same query, "
        "built anew for each run",
    )


# ------------------------------------------------------------------------------------------------


def machine_line() -> str:
    mem = "?"
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        kb = int(f.readline().split()[1])
        mem = f"{kb / (1 << 20):.1f} GiB"
    return f"{os.cpu_count()} cpus, {mem} RAM, {platform.system()} {platform.release()}"


def fmt_rate(v: object) -> str:
    if not isinstance(v, int | float) or math.isnan(v):
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def print_table(rows: list[dict[str, object]]) -> None:
    head = ("row", "ours/s", "baseline/s", "ratio", "target", "met")
    lines = []
    for r in rows:
        ratio = r["ratio"]
        met = r["met"]
        lines.append(
            (
                str(r["name"]),
                fmt_rate(r["ours_per_s"]),
                fmt_rate(r["baseline_per_s"]),
                f"{ratio:.3g}" if isinstance(ratio, float | int) else "skipped",
                str(r["target"]),
                "-" if met is None else ("yes" if met else "NO"),
            )
        )
    widths = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head))]
    fmt = "  ".join(f"{{:{'<' if i == 0 else '>'}{w}}}" for i, w in enumerate(widths))
    print(fmt.format(*head))
    print("  ".join("-" * w for w in widths))
    for ln in lines:
        print(fmt.format(*ln))
    for r in rows:
        if r.get("skip"):
            print(f"{r['name']}: skipped: {r['skip']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes, one repetition (CI)")
    p.add_argument("--out", default="bench-results.json", help="JSON output (bench-results.json)")
    p.add_argument("--dir", default=None, help="where to put the data (default: system temp)")
    p.add_argument("--reps", type=int, default=None, help="repetitions per row (5; quick: 1)")
    p.add_argument(
        "--only",
        default=None,
        help="comma-separated row names or groups: append, read, persistqueue, rust, spark",
    )
    args = p.parse_args(argv)
    s = Sizes.make(args.quick, args.reps)
    only = set(args.only.split(",")) if args.only else None

    groups = {
        "append": ("py_append_100", "py_append_batch_100", "py_append_1k"),
        "read": ("py_read_100", "py_read_100_vs_seek", "py_scan_100"),
        "persistqueue": ("py_vs_persistqueue_append_100",),
        "rust": RUST_ROWS,
        "spark": ("spark_scan_vs_parquet",),
    }
    keep: set[str] = set()
    if only is not None:
        unknown = only - set(TARGETS) - set(groups)
        if unknown:
            p.error(f"--only: unknown {', '.join(sorted(unknown))}; rows or {', '.join(groups)}")
        # A group runs whole; named rows are kept, with every row of a named group.
        keep = {n for g, names in groups.items() for n in names if g in only} | only

    def want(group: str) -> bool:
        return only is None or any(n in keep for n in groups[group])

    t0 = time.perf_counter()
    say(f"compare.py: {'quick' if s.quick else 'full'} run; {machine_line()}")
    wd = Workdir(args.dir)
    rows: list[dict[str, object]] = []
    try:
        if want("append"):
            rows += append_rows(s, wd)
        if want("read"):
            rows += read_rows(s, wd)
        if want("persistqueue"):
            rows.append(persistqueue_row(s, wd))
        if want("rust"):
            rows += rust_rows(s, wd.root, args.reps)
        if want("spark"):
            rows.append(spark_row(s, wd))
    finally:
        wd.close()
    if only is not None:
        rows = [r for r in rows if r["name"] in keep]
    for r in rows:
        r["quick"] = s.quick
    Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")
    print()
    mode = "quick" if s.quick else "full"
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; {machine_line()}; {mode}")
    print_table(rows)
    print(f"\nwrote {args.out} ({len(rows)} rows) in {time.perf_counter() - t0:.0f} s")
    broken = [str(r["name"]) for r in rows if r.get("error")]
    if broken:
        print(f"failed: {', '.join(broken)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
