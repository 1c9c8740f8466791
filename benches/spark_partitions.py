"""Small local Spark jobs at several ``spark.sql.shuffle.partitions``: three batch queries with a
shuffle and a streaming aggregation, on one session, the counts alternating (median of 3). The
numbers in docs/spark.md ("Small local jobs", why ``local_session`` sets the cores) come from it:

    .venv/bin/python benches/spark_partitions.py [master] [counts]   # local[2] 200,2,4,8
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

from pyspark.sql import functions as F

from rmqlog import CommitLog
from rmqlog.spark import local_session
from rmqlog.spark.session import SHUFFLE_PARTITIONS


def main() -> None:
    master = sys.argv[1] if len(sys.argv) > 1 else "local[2]"
    counts = [int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "200,2,4,8").split(",")]
    store = os.path.join(tempfile.mkdtemp(prefix="rmqlog-partitions-"), "store")
    with CommitLog(store, segment_size=1 << 20) as log:
        for i in range(0, 100_000, 5000):
            log.append_batch(
                [b'{"user": "u%d", "n": %d}' % (j % 50, j) for j in range(i, i + 5000)]
            )
    spark = local_session(master, "rmqlog-partitions")
    df = spark.read.format("rmqlog").load(store)
    users = df.select(
        F.get_json_object(F.col("body").cast("string"), "$.user").alias("user"), "offset"
    )

    def stream() -> None:
        name = f"agg{time.monotonic_ns()}"
        q = (
            spark.readStream.format("rmqlog")
            .load(store)
            .groupBy("segment")
            .count()
            .writeStream.format("memory")
            .queryName(name)
            .outputMode("complete")
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()

    queries: dict[str, Callable[[], object]] = {
        "groupBy().count()": lambda: users.groupBy("user").count().collect(),
        "orderBy().limit(10)": lambda: users.orderBy(F.desc("offset")).limit(10).collect(),
        "self-join": lambda: users.join(
            users.groupBy("user").agg(F.max("offset").alias("m")), "user"
        ).count(),
        "streaming groupBy().count()": stream,
    }
    print(
        f"{master}: {df.rdd.getNumPartitions()} input partitions, defaultParallelism "
        f"{spark.sparkContext.defaultParallelism}, load {os.getloadavg()[0]:.1f}"
    )
    for q in queries.values():  # warm: JVM code, Python workers
        q()
    times: dict[tuple[str, int], list[float]] = {}
    for _ in range(3):
        for n in counts:
            spark.conf.set(SHUFFLE_PARTITIONS, str(n))
            for name, q in queries.items():
                t = time.perf_counter()
                q()
                times.setdefault((name, n), []).append(time.perf_counter() - t)
    for name in queries:
        row = "  ".join(f"{n}: {statistics.median(times[(name, n)]):5.2f} s" for n in counts)
        print(f"  {name:28} {row}")
    print(f"load {os.getloadavg()[0]:.1f} at the end")
    spark.stop()


if __name__ == "__main__":
    main()
