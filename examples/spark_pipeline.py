"""A small pipeline: a producer writes JSON events into an rmqlog store spread over three
directories, then a PySpark job reads the log with the ``rmqlog`` data source, parses the bodies
with ``from_json``, aggregates, and writes Parquet.

    make develop                          # .venv with rmqlog and its extras, Spark's included
    .venv/bin/python examples/spark_pipeline.py

or, in a venv of your own, with the wheel (README, "Installing"):

    make wheel && pip install "$(ls dist/*.whl)[spark]"
    python examples/spark_pipeline.py

Spark needs `java` (17) on PATH. Everything goes to a temporary directory, removed at the end.
"""

import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from pyspark.sql import functions as F

from rmqlog import CommitLog

# A local session whose Python workers run this interpreter (the one with rmqlog installed), on
# the loopback interface, with the rmqlog source registered.
from rmqlog.spark import local_session

EVENTS = 20_000
KINDS = ["view", "click", "cart", "buy"]


def produce(dirs: list[str]) -> int:
    """Appends EVENTS JSON events in batches: 1 MiB segments, round robin over three directories."""
    rng = random.Random(7)
    with CommitLog(dirs, segment_size=1 << 20, flush="async") as log:
        for start in range(0, EVENTS, 500):
            batch = []
            for i in range(start, min(start + 500, EVENTS)):
                kind = rng.choices(KINDS, weights=[60, 25, 10, 5])[0]
                event = {
                    "id": i,
                    "user": f"u{rng.randrange(300):03d}",
                    "kind": kind,
                    "amount": round(rng.uniform(5, 200), 2) if kind == "buy" else 0.0,
                    "client_ts": int(time.time() * 1000),
                }
                batch.append(json.dumps(event).encode())
            log.append_batch(batch)
        log.flush()
        print(
            f"produced {EVENTS} events, {log.max_offset} bytes in {len(log.segments())} segments:",
            file=sys.stderr,
        )
        for seg in log.segments():
            print(f"  {seg.start_offset:>10}  {seg.path}", file=sys.stderr)
    return EVENTS


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="rmqlog-spark-") as tmp:
        dirs = [str(Path(tmp) / f"disk{i}" / "store") for i in range(3)]
        produce(dirs)

        spark = local_session("local[2]", "rmqlog-spark-pipeline")  # 2 shuffle partitions
        try:
            log_df = (
                spark.read.format("rmqlog")
                .option("max_partition_bytes", "512k")  # two tasks per 1 MiB segment
                .load(os.pathsep.join(dirs))
            )
            print(f"partitions: {log_df.rdd.getNumPartitions()}", file=sys.stderr)

            schema = "id BIGINT, user STRING, kind STRING, amount DOUBLE, client_ts BIGINT"
            events = log_df.select(
                "offset",
                F.col("timestamp").alias("stored_at"),
                F.from_json(F.col("body").cast("string"), schema).alias("e"),
            ).select("offset", "stored_at", "e.*")

            summary = (
                events.groupBy("kind")
                .agg(
                    F.count("*").alias("events"),
                    F.countDistinct("user").alias("users"),
                    F.round(F.sum("amount"), 2).alias("revenue"),
                    F.min("stored_at").alias("first_stored"),
                    F.max("stored_at").alias("last_stored"),
                )
                .orderBy(F.desc("events"))
            )
            out = str(Path(tmp) / "summary.parquet")
            summary.write.mode("overwrite").parquet(out)

            back = spark.read.parquet(out).orderBy(F.desc("events"))
            back.show(truncate=False)
            total = back.agg(F.sum("events")).first()[0]
            assert total == EVENTS, (total, EVENTS)
            print(f"wrote {out}: {back.count()} rows, {total} events", file=sys.stderr)
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
