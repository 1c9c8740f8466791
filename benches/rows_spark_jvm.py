"""Spark rows of the JVM reader (the jar: a DataSource V2 reader in Java over the Rust core),
local[2]: against Parquet written by Spark from the same records, against the Python source in
the same session, a time window net of the empty query, and the latency of a stream. Every timed
query builds its DataFrame anew and checks what it saw (rows_spark.py's conventions)."""

from __future__ import annotations

import os
import shutil
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import rows_spark
from harness import Row, Sizes, Workdir, alternate, row, say, skipped, throughput
from rows_spark import META_SCHEMA, _timed_query, full_query, meta_query, store_and_parquet

NAMES = (
    "spark_jvm_scan_vs_parquet",
    "spark_jvm_meta_scan_vs_parquet",
    "spark_jvm_body_sum_vs_parquet",
    "spark_jvm_vs_python_source",
    "spark_jvm_time_window_vs_full",
    "spark_jvm_stream_latency_p50",
)
# Appends timed from the writer to the stream's sink.
STREAM_APPENDS = 40


def _session():
    from rmqlog.spark import local_session

    return local_session("local[2]", "rmqlog-compare-jvm", jvm=True)


def _rows(s: Sizes, wd: Workdir, spark: Any) -> list[Row]:
    from pyspark.sql import functions as F

    from rmqlog.spark.jvm import PYTHON_NAME

    n = s.spark_rows
    d, store, parquet = store_and_parquet(s, wd, spark)
    jvm = lambda: spark.read.format("rmqlog").load(store)  # noqa: E731
    python = lambda: spark.read.format(PYTHON_NAME).load(store)  # noqa: E731
    pq = lambda: spark.read.parquet(parquet)  # noqa: E731
    rows: list[Row] = []

    ours, base, py = full_query(jvm, n), full_query(pq, n), full_query(python, n)
    for q in (ours, base, py):
        q()  # untimed: the first query of each source loads its classes or starts its workers
    to, tb, tp = alternate(s.spark_reps, ours, base, py)
    query = "count(*), sum(length(body)), max(timestamp); a new DataFrame per run, local[2]"
    rows.append(
        throughput(
            NAMES[0],
            n,
            to,
            tb,
            f"spark.read.format('rmqlog').load(store), the JVM reader: {query}",
            "spark.read.parquet of the same rows (written by Spark, snappy), the same query",
        )
    )
    rows.append(
        throughput(
            NAMES[3],
            n,
            to,
            tp,
            f"the JVM reader: {query}",
            f"the Python source (format('{PYTHON_NAME}')) in the same session, the same query",
        )
    )

    ours = meta_query(lambda: spark.read.format("rmqlog").schema(META_SCHEMA).load(store), n)
    to, tb = alternate(s.spark_reps, ours, meta_query(pq, n))
    rows.append(
        throughput(
            NAMES[1],
            n,
            to,
            tb,
            f"the JVM reader, .schema('{META_SCHEMA}'): max(timestamp), count(*)",
            "spark.read.parquet of the same rows, the same query (the timestamp column alone)",
        )
    )

    # A byte of every body: every body is read, one byte of it used (no length shortcut).
    byte = F.expr("sum(cast(conv(hex(substring(body, 100, 1)), 16, 10) as int))")
    want = pq().agg(byte.alias("v")).first()["v"]

    def body_sum(load: Callable[[], Any]) -> Callable[[], float]:
        def check(got: Any) -> None:
            assert got["v"] == want, (got, want)

        return _timed_query(lambda: load().agg(byte.alias("v")), check)

    to, tb = alternate(s.spark_reps, body_sum(jvm), body_sum(pq))
    rows.append(
        throughput(
            NAMES[2],
            n,
            to,
            tb,
            "the JVM reader: sum of the 100th byte of every body "
            "(sum(cast(conv(hex(substring(body, 100, 1)), 16, 10) as int)))",
            "spark.read.parquet of the same rows, the same query",
        )
    )

    rows.append(rows_spark._time_window(s, pq, jvm, n, NAMES[4]))
    shutil.rmtree(d, ignore_errors=True)
    rows.append(_stream_latency(s, wd, spark))
    return rows


def _stream_latency(s: Sizes, wd: Workdir, spark: Any) -> Row:
    """spark_jvm_stream_latency_p50: a stream of the JVM reader with the default trigger (a
    micro-batch as soon as the last one ends; a trigger with nothing new waits up to wait_ms for
    an append), into foreachBatch, which collects each micro-batch in the driver. STREAM_APPENDS
    single appends, each after the one before it arrived: the time from the append's return to
    its row's arrival in the sink."""
    from rmqlog import CommitLog

    name = NAMES[5]
    store = os.path.join(wd.new(), "store")
    log = CommitLog(store)
    log.append(b"first")
    arrived: dict[int, float] = {}
    cond = threading.Condition()

    def sink(df: Any, _: int) -> None:
        got = [r.offset for r in df.select("offset").collect()]
        now = time.perf_counter()
        with cond:
            for off in got:
                arrived.setdefault(off, now)
            cond.notify_all()

    query = (
        spark.readStream.format("rmqlog")
        .option("wait_ms", "100")
        .load(store)
        .writeStream.foreachBatch(sink)
        .start()
    )
    waits: list[float] = []
    try:
        with cond:
            if not cond.wait_for(lambda: len(arrived) >= 1, timeout=120):
                return skipped(name, "the stream delivered nothing in 120 s")
        for i in range(STREAM_APPENDS):
            t = time.perf_counter()
            off = log.append(b"record %d" % i)
            with cond:
                if not cond.wait_for(lambda off=off: off in arrived, timeout=60):
                    return skipped(name, f"append {i} did not arrive in 60 s")
                waits.append(arrived[off] - t)
    finally:
        query.stop()
        log.close()
    p50 = statistics.median(waits)
    p90 = sorted(waits)[int(0.9 * len(waits))]
    say(f"  {name}: p50 {p50 * 1000:.1f} ms, p90 {p90 * 1000:.1f} ms, max {max(waits) * 1000:.1f}")
    return row(
        name,
        1 / p50,
        None,
        p50,
        f"append to its row in a foreachBatch sink of a JVM-reader stream (default trigger, "
        f"wait_ms=100), {len(waits)} appends one after another; ratio: the median in seconds",
        "none: reported",
        p50_ms=p50 * 1000,
        p90_ms=p90 * 1000,
        max_ms=max(waits) * 1000,
    )


def run(s: Sizes, wd: Workdir) -> list[Row]:
    why = rows_spark._missing()
    if why is None:
        from rmqlog.spark.jvm import jar

        if jar() is None:
            why = "the JVM reader's jar is not built (make jar)"
    if why is not None:
        return [skipped(n, why) for n in NAMES]
    say(f"spark, the JVM reader ({s.spark_rows} rows; starting a local[2] session)")
    spark = _session()
    try:
        return _rows(s, wd, spark)
    finally:
        spark.stop()
