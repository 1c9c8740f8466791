"""Row spark_tier_vs_local: a Spark query on a local-cluster (executors in JVMs of their own) over
a store's remote segments, read from its tier URL alone, against the same query over the same
records read from the store's directories."""

from __future__ import annotations

import os
from pathlib import Path

from harness import BODY_1K, Row, Sizes, Workdir, alternate, say, skipped, throughput
from rows_spark import _missing, _timed_query
from rows_tier import _wait

NAMES = ("spark_tier_vs_local",)
MASTER = "local-cluster[2,1,1024]"  # two executor JVMs of one core each


def run(s: Sizes, wd: Workdir) -> list[Row]:
    why = _missing()
    if why is not None:
        return [skipped(n, why) for n in NAMES]
    from rmqlog.spark import local_session

    d = wd.new()
    store, url, end, n, sealed = _store(s, d)
    say(f"spark tier: starting a {MASTER} session")
    spark = local_session(MASTER, "rmqlog-compare-tier")
    try:
        from pyspark.sql import functions as F

        def query(path: str, **options: str):
            def build():
                reader = spark.read.format("rmqlog").option("end_offset", str(end))
                for k, v in options.items():
                    reader = reader.option(k, v)
                df = reader.load(path)
                return df.agg(F.count("*").alias("n"), F.sum(F.length("body")).alias("bytes"))

            def check(got) -> None:
                assert got["n"] == n and got["bytes"] == n * len(BODY_1K), (got, n)

            return _timed_query(build, check)

        # Each task opens the tier with a fresh cache of its own (dropped with the task's log):
        # every run maps and checks every object it reads anew.
        ours = query(url, tier_cache_dir=d)
        base = query(store)
        ours()  # untimed: starts the executors' Python workers
        base()
        t_tier, t_local = alternate(s.spark_reps, ours, base)
    finally:
        spark.stop()
    return [
        throughput(
            NAMES[0],
            n,
            t_tier,
            t_local,
            f"spark.read.format('rmqlog').load('file://...') on {MASTER}: the store's "
            "remote segments from its tier URL alone (one partition per segment, each task "
            "mapping its object in place, a local file:// tier, after its CRC32C check); "
            "count(*), sum(length(body)); a new DataFrame per run",
            "the same query over the same records from the store's directories (local segment "
            "files, in the page cache)",
            segment_size=s.tier_segment,
            segments=sealed,
        )
    ]


def _store(s: Sizes, d: str) -> tuple[str, str, int, int, int]:
    """A store of 1 KiB records with a file:// tier, its sealed segments uploaded (and kept
    locally): (store, tier URL, end of the uploaded segments, records below it, segments)."""
    from rmqlog import CommitLog

    store = os.path.join(d, "store")
    url = Path(os.path.join(d, "tier")).as_uri()
    per_batch = 1024
    offsets: list[int] = []
    with CommitLog(store, segment_size=s.tier_segment, tier_url=url) as log:
        for _ in range(max(1, s.tier_bytes // (len(BODY_1K) * per_batch))):
            offsets.extend(log.append_batch([BODY_1K] * per_batch))
        sealed = sum(1 for seg in log.segments() if seg.sealed)
        say(f"spark tier: {len(offsets)} records of 1 KiB, {sealed} sealed segments; uploading")
        _wait(lambda: log.tier_status()["uploads"] >= sealed, "the sealed segments' upload")
    with CommitLog(url, read_only=True) as remote:
        end = remote.max_offset
    n = sum(1 for o in offsets if o < end)
    assert n > 0, "no sealed segment: raise tier_bytes"
    return store, url, end, n, sealed
