"""Rows of the Arrow API: append_batch of an Arrow binary array and scan_batches, against the same
work done by the Rust API (measured by rust_rows in the same compare.py run, alternating with the
Python side), against plain Python, and DuckDB over the log's Arrow stream against DuckDB over
Parquet."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

from harness import BODY_100, SEGMENT, Row, Sizes, Workdir, alternate, rates, say, skipped, timed
from pylog import HEADER_LEN, PyLog, PySeekReader, write_framed
from rows_rust import RustRows, RustRowsError

NAMES = (
    "py_append_arrow_100",
    "py_append_arrow_100_vs_python",
    "py_scan_arrow_100",
    "py_scan_arrow_100_vs_python",
    "duckdb_scan_vs_parquet",
    "py_scan_arrow_100_2cores",
)
# The Rust references (rust_rows.rs), with the same parameters as the Python side.
REF_APPEND = "ref_append_batch_100"
REF_SCAN = "ref_scan_100"


def _missing() -> str | None:
    """Why the Arrow rows cannot run, or None."""
    try:
        import pyarrow  # noqa: F401
    except ImportError as e:
        return f"pyarrow is not installed ({e}); pip install 'rmqlog[arrow]'"
    from rmqlog import CommitLog

    if not hasattr(CommitLog, "scan_batches"):
        return "this rmqlog has no Arrow API (CommitLog.scan_batches)"
    return None


def _rust_ref(rust: RustRows, name: str) -> Callable[[], float]:
    """One repetition of a Rust reference, in seconds (its own process; timed inside it)."""

    def run() -> float:
        r = rust.measure((name,), reps=1)[name]
        return float(r["median_s"])

    return run


def _append_rows(s: Sizes, wd: Workdir, rust: RustRows) -> list[Row]:
    import pyarrow as pa

    from rmqlog import CommitLog

    n = s.arrow_records
    bodies = [bytes(BODY_100) for _ in range(n)]
    arr = pa.array(bodies, type=pa.binary())

    def ours() -> float:
        d = wd.new()
        log = CommitLog(os.path.join(d, "log"), segment_size=SEGMENT)
        got = []
        t = timed(lambda: got.append(log.append_batch(arr)))
        offsets = got[0]
        assert len(offsets) == n and log.max_offset == n * (HEADER_LEN + 100), log.max_offset
        log.close()
        shutil.rmtree(d)
        return t

    def python() -> float:
        d = wd.new()
        path = os.path.join(d, "py.log")
        t = timed(lambda: write_framed(path, bodies))
        assert os.path.getsize(path) == n * (HEADER_LEN + 100)
        shutil.rmtree(d)
        return t

    say(f"arrow append ({n} records of 100 B, one call)")
    to, tr, tp = alternate(s.reps, ours, _rust_ref(rust, REF_APPEND), python)
    ours_desc = (
        f"CommitLog.append_batch(pyarrow binary array of {n:,} x 100 B), flush='async', "
        "offsets returned as an Arrow int64 array"
    )
    return [
        rates(
            NAMES[0],
            n / to,
            n / tr,
            ours_desc,
            f"Rust CommitLog::append_batch of the same {n:,} slices in one call, "
            "FlushMode::Async, in rust_rows (its own process, same pass)",
            items=n,
        ),
        rates(
            NAMES[1],
            n / to,
            n / tp,
            ours_desc,
            "plain Python: struct.pack_into + zlib.crc32 into one preallocated bytearray "
            "(the pure-Python log's format), one write",
            items=n,
        ),
    ]


def _scan_work(log, n: int, threads: int) -> Callable[[], None]:
    """Every batch's columns touched: the sum of the body lengths, the largest offset, the
    count; checks the scan saw every record. Bodies as plain ``binary`` (copied): pyarrow 26's
    ``binary_length`` has no ``binary_view`` kernel, so a pyarrow user computing on bodies reads
    them this way. ``threads``: scan_batches' worker threads."""
    import pyarrow.compute as pc

    def go() -> None:
        count = total = last = 0
        for b in log.scan_batches(body="binary", threads=threads):
            count += b.num_rows
            total += pc.sum(pc.binary_length(b.column("body"))).as_py()
            last = max(last, pc.max(b.column("offset")).as_py())
        assert count == n and total == n * 100 and last == (n - 1) * (HEADER_LEN + 100), (
            count,
            total,
            last,
        )

    return go


def _scan_rows(s: Sizes, wd: Workdir, rust: RustRows) -> list[Row]:
    from rmqlog import CommitLog

    n = s.arrow_records
    d = wd.new()
    log = CommitLog(os.path.join(d, "log"), segment_size=SEGMENT)
    py = PyLog(os.path.join(d, "py.log"))
    batch = [BODY_100] * s.batch
    for _ in range(n // s.batch):
        log.append_batch(batch)
        py.append_batch(batch)
    py.close()
    sk = PySeekReader(os.path.join(d, "py.log"))

    def ours() -> float:
        return timed(_scan_work(log, n, threads=1))

    def ours_2cores() -> float:
        return timed(_scan_work(log, n, threads=2))

    def python() -> float:
        def go() -> None:
            count = total = last = 0
            for off, body in sk.scan():
                count += 1
                total += len(body)
                last = off
            assert count == n and total == n * 100, (count, total, last)

        return timed(go)

    say(f"arrow scan ({n} records of 100 B)")
    try:
        to, tr, tp, t2 = alternate(s.reps, ours, _rust_ref(rust, REF_SCAN), python, ours_2cores)
        duck = _duckdb_row(s, wd, log, d)
    finally:
        sk.close()
        log.close()
        shutil.rmtree(d)
    ours_desc = (
        "for b in CommitLog.scan_batches(body='binary', threads=1): pyarrow.compute sum of "
        "binary_length(body), max of offset, count of rows (one worker thread builds, one "
        "batch ahead of the Python loop)"
    )
    rust_desc = (
        "Rust CommitLog::scan of the same records: sum of body lengths, max offset, count, "
        "in rust_rows (its own process, same pass, one core)"
    )
    return [
        rates(NAMES[2], n / to, n / tr, ours_desc, rust_desc, items=n),
        rates(
            NAMES[3],
            n / to,
            n / tp,
            ours_desc,
            "pure-Python log read back sequentially (py_scan_100's baseline: 1 MiB buffered "
            "reads, unpack_from + crc32), summing body lengths, last offset",
            items=n,
        ),
        duck,
        rates(
            NAMES[5],
            n / t2,
            n / tr,
            ours_desc.replace("threads=1", "threads=2").replace(
                "one worker thread builds, one batch ahead of",
                "two worker threads check and build batches at once, ahead of",
            ),
            rust_desc,
            items=n,
        ),
    ]


# DuckDB spells length() of a BLOB octet_length; "offset" is a keyword in its SQL: quoted.
QUERY = 'select count(*), sum(octet_length(body)), max("offset") from {}'


def _duckdb_row(s: Sizes, wd: Workdir, log, d: str) -> Row:
    name = NAMES[4]
    try:
        import duckdb
    except ImportError as e:
        return skipped(name, f"duckdb is not installed ({e}); pip install 'rmqlog[bench]'")
    import pyarrow.parquet as pq

    import rmqlog

    n = s.arrow_records
    parquet = os.path.join(d, "rows.parquet")
    pq.write_table(rmqlog.to_arrow(log, body="binary"), parquet)  # default: snappy
    want = (n, n * 100, (n - 1) * (HEADER_LEN + 100))

    def query(source: Callable[[], object], sql: str) -> Callable[[], float]:
        # A new connection, scan and query every time: nothing is cached between runs.
        def run() -> float:
            got = []

            def go() -> None:
                con = duckdb.connect()
                scan = source()  # noqa: F841 (the query reads it by name)
                got.append(con.sql(sql).fetchall()[0])
                con.close()

            t = timed(go)
            assert got[0] == want, got[0]
            return t

        return run

    ours = query(lambda: log.scan_batches(columns=("offset", "body")), QUERY.format("scan"))
    base = query(lambda: None, QUERY.format(f"read_parquet('{parquet}')"))
    say(f"duckdb ({n} records of 100 B)")
    to, tb = alternate(s.reps, ours, base)
    return rates(
        name,
        n / to,
        n / tb,
        f"DuckDB `{QUERY.format('scan')}`, scan = CommitLog.scan_batches(columns=('offset', "
        "'body')) (its Arrow stream), a new connection and scan per run",
        "DuckDB, the same query over read_parquet of the same rows (pyarrow, snappy), "
        "a new connection per run",
        items=n,
    )


def run(s: Sizes, wd: Workdir, rust: RustRows) -> list[Row]:
    why = _missing()
    if why is not None:
        return [skipped(n, why) for n in NAMES]
    try:
        return _append_rows(s, wd, rust) + _scan_rows(s, wd, rust)
    except RustRowsError as e:
        return [{**skipped(n, str(e)), "error": True} for n in NAMES]
