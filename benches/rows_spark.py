"""Spark rows, local[2]: the rmqlog source against Parquet of the same rows, and a time-window
query and a key query (``where key = x``, through the key index) against the same query over the
whole log, both net of the query that reads nothing (the fixed cost of any query on a Python
source). Every timed query builds its DataFrame anew (Spark answers a repeated collect() of one
DataFrame object from a cache) and checks what it saw."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from typing import Any

from harness import SEGMENT, Row, Sizes, Workdir, alternate, row, say, skipped, throughput

# The issue measured Spark on 2,000,000 records of 256 B. Random bodies: identical ones would be
# one dictionary entry in Parquet, which then never reads them.
BODY_LEN = 256

NAMES = (
    "spark_scan_vs_parquet",
    "spark_meta_scan_vs_parquet",
    "spark_time_window_vs_full",
    "spark_key_filter_vs_full",
)
# spark_key_filter_vs_full: the store's segments, and how many records carry each key.
KEY_SEGMENTS = 32
PER_KEY = 10
META_SCHEMA = "offset long, timestamp timestamp"


def _missing() -> str | None:
    try:
        import pyspark  # noqa: F401

        import rmqlog.spark  # noqa: F401
    except Exception as e:  # ImportError, or rmqlog.spark failing on its own imports
        return f"pyspark or rmqlog.spark is not available ({e})"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "java is not on PATH (Spark needs a JVM)"
    return None


def _session():
    """The Python source's session: without the JVM reader's jar, ``rmqlog`` is the Python
    source (benches/rows_spark_jvm.py measures the JVM reader)."""
    from rmqlog.spark import local_session

    return local_session("local[2]", "rmqlog-compare", jvm=False)


def _write_store(s: Sizes, store: str) -> None:
    """``spark_rows`` random records of 256 B (as the issue measured Spark) in batches, spread over
    time: the writer sleeps 1 ms every 10 batches, so the 90th-percentile timestamp cuts the
    log near its last tenth."""
    from rmqlog import CommitLog

    log = CommitLog(store, segment_size=SEGMENT)  # as for the other rows
    for i in range(s.spark_rows // s.batch):
        chunk = os.urandom(BODY_LEN * s.batch)
        log.append_batch([chunk[j : j + BODY_LEN] for j in range(0, len(chunk), BODY_LEN)])
        if i % 10 == 9:
            time.sleep(0.001)
    log.close()


def _why(e: Exception) -> str:
    """The source's own message in a Spark error (its line naming rmqlog), else the last line."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()] or [type(e).__name__]
    return next((ln for ln in lines if "rmqlog:" in ln), lines[-1])


def _timed_query(build: Callable[[], Any], check: Callable[[Any], None]) -> Callable[[], float]:
    """A run: builds the DataFrame and its query anew, collects it, checks the result."""

    def run() -> float:
        t = time.perf_counter()
        got = build().collect()[0]
        t = time.perf_counter() - t
        check(got)
        return t

    return run


def full_query(load: Callable[[], Any], n: int) -> Callable[[], float]:
    """The full scan: count(*), sum(length(body)), max(timestamp) of the ``n`` records of
    ``_write_store``; Parquet can skip no column it needs (a bare count() would be answered from
    Parquet footers)."""
    from pyspark.sql import functions as F

    def check(got: Any) -> None:
        assert got["n"] == n and got["bytes"] == n * BODY_LEN, got
        assert got["last"] is not None, got

    return _timed_query(
        lambda: load().agg(
            F.count("*").alias("n"),
            F.sum(F.length("body")).alias("bytes"),
            F.max("timestamp").alias("last"),
        ),
        check,
    )


def meta_query(load: Callable[[], Any], n: int) -> Callable[[], float]:
    """Metadata only: max(timestamp), count(*)."""
    from pyspark.sql import functions as F

    def check(got: Any) -> None:
        assert got["n"] == n and got["last"] is not None, got

    return _timed_query(
        lambda: load().agg(F.max("timestamp").alias("last"), F.count("*").alias("n")), check
    )


def store_and_parquet(s: Sizes, wd: Workdir, spark: Any) -> tuple[str, str, str]:
    """A new directory with ``_write_store``'s store and Parquet of its rows written by Spark
    (through ``format("rmqlog")``): (directory, store, parquet)."""
    d = wd.new()
    store = os.path.join(d, "store")
    _write_store(s, store)
    parquet = os.path.join(d, "parquet")
    spark.read.format("rmqlog").load(store).write.parquet(parquet)
    say("  parquet written")
    return d, store, parquet


def _rows(s: Sizes, wd: Workdir, spark) -> list[Row]:
    n = s.spark_rows
    d, store, parquet = store_and_parquet(s, wd, spark)
    log_df = lambda: spark.read.format("rmqlog").load(store)  # noqa: E731
    pq_df = lambda: spark.read.parquet(parquet)  # noqa: E731
    rows = []

    ours, base = full_query(log_df, n), full_query(pq_df, n)
    if not s.quick:
        ours()  # the first queries start the Python workers: not timed
        base()
    to, tb = alternate(s.spark_reps, ours, base)
    rows.append(
        throughput(
            NAMES[0],
            n,
            to,
            tb,
            "spark.read.format('rmqlog').load(store): count(*), sum(length(body)), max(timestamp); "
            "a new DataFrame per run, local[2]",
            "spark.read.parquet of the same rows (written by Spark, snappy), the same query, a "
            "new DataFrame per run",
        )
    )

    # Metadata only: the body-less user schema against Parquet (which reads the column alone).
    ours = meta_query(lambda: spark.read.format("rmqlog").schema(META_SCHEMA).load(store), n)
    try:
        ours()  # untimed: starts the workers, and tells whether the schema is accepted
    except Exception as e:
        rows.append(skipped(NAMES[1], f"the source refused .schema({META_SCHEMA!r}): {_why(e)}"))
    else:
        to, tb = alternate(s.spark_reps, ours, meta_query(pq_df, n))
        rows.append(
            throughput(
                NAMES[1],
                n,
                to,
                tb,
                f"spark.read.format('rmqlog').schema('{META_SCHEMA}').load(store): "
                "max(timestamp), count(*); a new DataFrame per run",
                "spark.read.parquet of the same rows, the same query (Parquet reads the "
                "timestamp column alone)",
            )
        )

    # A time window: the last tenth of the log by timestamp, against the same query over the whole
    # log, both net of the same query over an empty range (the per-query floor of a Python source).
    # Filters prune the plan with the option pushdown (docs/spark.md); each query loads anew.
    pushed_df = lambda: spark.read.format("rmqlog").option("pushdown", "true").load(store)  # noqa: E731
    rows.append(_time_window(s, pq_df, pushed_df, n))
    shutil.rmtree(d, ignore_errors=True)
    rows.append(_key_filter(s, wd, spark))
    return rows


def _net_row(
    name: str, s: Sizes, times: tuple[float, float, float], ours: str, base: str, **extra: Any
) -> Row:
    """A row of (query - floor) / (full - floor) from the medians (floor, query, full)."""
    t0, tq, tf = times
    raw = tq / tf
    kept = {"floor_s": t0, "query_s": tq, "full_s": tf, "raw_ratio": raw, **extra}
    shown = f"floor {t0:.3f} s, query {tq:.3f} s, full {tf:.3f} s"
    if tf <= t0:
        reason = (
            f"the full query ({tf:.3f} s) took no longer than the empty one ({t0:.3f} s): no "
            f"reading cost to divide by; raw query/full {raw:.3g}"
        )
        return {**skipped(name, reason), "error": not s.quick, **kept}
    ratio = (tq - t0) / (tf - t0)
    say(f"  {name}: {shown}; ratio (query - floor)/(full - floor) {ratio:.3g}, raw {raw:.3g}")
    return row(name, 1 / tq, 1 / tf, ratio, ours, base, **kept, net_query_s=tq - t0)


def _key_filter(s: Sizes, wd: Workdir, spark: Any) -> Row:
    """spark_key_filter_vs_full: a store of KEY_SEGMENTS segments of ``spark_rows`` records of
    BODY_LEN random bytes, each with a 16 B random key that PER_KEY records carry (spread over the
    whole log). Three runs of one query with the option ``pushdown``, count(*) under one
    predicate on ``key``: a key no record has (the floor: the lookup plans nothing), a key PER_KEY
    records have (``where key = x``: only the segments the index names are planned, one record
    read from each), and ``key IS NOT NULL`` (full: every record, which Spark filters). Ratio
    (query - floor) / (full - floor)."""
    import random

    from pyspark.sql import functions as F

    from rmqlog import CommitLog

    name = NAMES[3]
    n = s.spark_rows
    rng = random.Random(11)
    distinct = max(1, n // PER_KEY)
    pool = [rng.randbytes(16) for _ in range(distinct)]
    order = [i % distinct for i in range(n)]
    rng.shuffle(order)
    record = 32 + 1 + 2 + 16 + BODY_LEN
    segment = -(-(n * record) // KEY_SEGMENTS // 4096) * 4096 + 4096
    d = wd.new()
    store = os.path.join(d, "store")
    log = CommitLog(store, segment_size=segment)
    for at in range(0, n, s.batch):
        m = min(s.batch, n - at)
        chunk = os.urandom(BODY_LEN * m)
        bodies = [chunk[j : j + BODY_LEN] for j in range(0, len(chunk), BODY_LEN)]
        log.append_batch(bodies, keys=[pool[k] for k in order[at : at + m]], offsets=False)
    segments = len(log.segments())
    present = pool[order[n // 2]]
    found = len(log.lookup(present))
    log.close()
    absent = b"\x00" * 17  # 17 bytes: no 16-byte key of the pool
    assert found == PER_KEY or n < PER_KEY, found
    say(f"  key store: {n:,} records, {segments} segments")
    load = lambda: spark.read.format("rmqlog").option("pushdown", "true").load(store)  # noqa: E731
    key = F.col("key")
    preds = {"floor": key == F.lit(absent), "query": key == F.lit(present), "full": key.isNotNull()}
    expect = {"floor": 0, "query": found, "full": n}

    def query(k: str) -> Callable[[], float]:
        def check(got: Any) -> None:
            assert got["n"] == expect[k], (k, got, expect[k])

        return _timed_query(lambda: load().where(preds[k]).agg(F.count("*").alias("n")), check)

    runs = [query(k) for k in ("floor", "query", "full")]
    for q in runs:
        q()  # untimed: starts the workers the filters plan in
    times = alternate(s.spark_reps, *runs)
    shutil.rmtree(d, ignore_errors=True)
    return _net_row(
        name,
        s,
        (times[0], times[1], times[2]),
        f"count(*) where key = x on the rmqlog source with pushdown, x a 16 B key {found} of "
        f"{n:,} records carry, spread over {segments} segments; a new DataFrame per run. Ratio "
        "of times net of the floor, the same query with a key no record has (0 rows): "
        "(query - floor) / (full - floor); rates 1/time",
        f"the same query with key IS NOT NULL: every record ({n:,}), net of the same floor",
        items=n,
        segments=segments,
        matches=found,
    )


def _time_window(
    s: Sizes, pq_df: Callable[[], Any], log_df: Callable[[], Any], n: int, name: str = NAMES[2]
) -> Row:
    """spark_time_window_vs_full: three runs of one query on the rmqlog source, count(*) under one
    comparison on timestamp, that differ only in it: timestamp < the first record's (the floor:
    an empty range, what any query costs reading nothing), timestamp >= the 90th percentile (the
    window, the last tenth of the log) and timestamp >= the first record's (full, the whole log).
    The ratio is (window - floor) / (full - floor): the share of the full query's reading work
    that the window still does; window / full is kept as raw_ratio. One-sided bounds: each plans
    with at most one offset_for_timestamp lookup that walks records (the window's)."""
    from pyspark.sql import functions as F

    bounds = pq_df().agg(
        F.min("timestamp").alias("first"),
        F.percentile_approx("timestamp", 0.9, 1_000_000).alias("cut"),
    )
    got = bounds.first()
    first, cut = got["first"], got["cut"]

    def where(key: str) -> Callable[[Any], Any]:
        ts = F.col("timestamp")
        pred = {"floor": ts < F.lit(first), "window": ts >= F.lit(cut), "full": ts >= F.lit(first)}
        return lambda df: df.where(pred[key])

    keys = ("floor", "window", "full")
    expect = {k: where(k)(pq_df()).count() for k in keys}
    in_window = expect["window"]
    assert expect["floor"] == 0 and expect["full"] == n and 0 < in_window < n, expect

    def query(key: str) -> Callable[[], float]:
        def check(got: Any) -> None:
            assert got["n"] == expect[key], (key, got, expect[key])

        # A new DataFrame per run (_timed_query calls the builder each time).
        return _timed_query(lambda: where(key)(log_df()).agg(F.count("*").alias("n")), check)

    runs = [query(k) for k in keys]
    for q in runs:
        q()  # untimed: the first query with a filter starts the filter planner's Python worker
    t0, tw, tf = alternate(s.spark_reps, *runs)
    raw = tw / tf
    times = {"floor_s": t0, "window_s": tw, "full_s": tf, "raw_ratio": raw}
    counts = {"items": n, "window_rows": in_window}
    shown = f"floor {t0:.3f} s, window {tw:.3f} s, full {tf:.3f} s"
    if tf <= t0:
        reason = (
            f"the full query ({tf:.3f} s) took no longer than the empty one ({t0:.3f} s): no "
            f"reading cost to divide by; raw window/full {raw:.3g}"
        )
        # An error at full size; --quick (no assertion) reads too little to tell them apart.
        return {**skipped(name, reason), "error": not s.quick, **times, **counts}
    ratio = (tw - t0) / (tf - t0)
    say(f"  {name}: {shown}; ratio (window - floor)/(full - floor) {ratio:.3g}, raw {raw:.3g}")
    return row(
        name,
        1 / tw,
        1 / tf,
        ratio,
        "count(*) where timestamp >= T on the rmqlog source, T the 90th percentile of the "
        f"timestamps ({in_window:,} of {n:,} rows), a new DataFrame per run. Ratio of times net "
        "of the floor, the same query with timestamp < the first record's (an empty range, 0 "
        "rows): (window - floor) / (full - floor); the raw window / full is raw_ratio; floor_s, "
        "window_s, full_s are the medians; rates 1/time",
        f"the same query with T the first record's timestamp: the whole log ({n:,} rows), net "
        "of the same floor: full - floor",
        **times,
        net_window_s=tw - t0,
        net_full_s=tf - t0,
        **counts,
    )


def run(s: Sizes, wd: Workdir) -> list[Row]:
    why = _missing()
    if why is not None:
        return [skipped(n, why) for n in NAMES]
    say(f"spark ({s.spark_rows} rows; starting a local[2] session)")
    spark = _session()
    try:
        say("  spark session up")
        return _rows(s, wd, spark)
    finally:
        spark.stop()
