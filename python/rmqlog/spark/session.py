"""A Spark session on this machine, set up for rmqlog: the one builder the tests, benchmarks and
examples use (and a user trying the source out can)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from typing import Any

from rmqlog.spark.jvm import jar
from rmqlog.spark.source import register

# What a local session needs here: Spark's own address and the driver on the loopback, no web
# UI or progress bars, timestamps shown in UTC (the source's are UTC instants).
_LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
}

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
JARS = "spark.jars"

# Spark's own patterns for these masters (SparkContext's LOCAL_N_REGEX, LOCAL_N_FAILURES_REGEX and
# LOCAL_CLUSTER_REGEX), with plain "local".
_LOCAL = re.compile(r"local(?:\[([0-9]+|\*)(?:\s*,\s*[0-9]+)?\])?")
_LOCAL_CLUSTER = re.compile(r"local-cluster\[\s*([0-9]+)\s*,\s*([0-9]+)\s*,\s*([0-9]+)\s*\]")


def local_cores(master: str) -> int | None:
    """The cores a local master runs tasks on: ``N`` of ``local[N]`` (``local``: 1, ``local[*]``:
    the cores this process may run on), executors times cores of ``local-cluster[E,C,M]``;
    ``None`` for any other master."""
    if m := _LOCAL.fullmatch(master):
        if m[1] is None:
            return 1
        if m[1] == "*":  # as the JVM counts them: the CPUs this process may run on
            return len(os.sched_getaffinity(0))
        return max(int(m[1]), 1)
    if m := _LOCAL_CLUSTER.fullmatch(master):
        return max(int(m[1]) * int(m[2]), 1)
    return None


def local_session(
    master: str = "local[2]",
    app_name: str = "rmqlog",
    conf: Mapping[str, str] | None = None,
    pushdown: bool = True,
    jvm: bool | None = None,
) -> Any:
    """A SparkSession for ``master`` (``local[N]``, or ``local-cluster[...]`` for executors in
    their own JVMs) with the ``rmqlog`` source registered (``register(spark, pushdown, jvm)``).

    ``jvm``: whether ``format("rmqlog")`` is the JVM reader, the jar rmqlog ships (docs/spark.md;
    the Python source is then ``rmqlog_python``). None (the default): where this install has the
    jar, it goes into ``spark.jars``; True: the same, and ValueError without it; False: the
    Python source alone, as ``rmqlog``.

    Spark's Python workers run this interpreter (``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON``
    unless set) and Spark binds to 127.0.0.1 (``SPARK_LOCAL_IP`` unless set); no UI; session
    time zone UTC; log level ERROR. ``conf`` adds or overrides settings. As
    ``SparkSession.builder.getOrCreate()``, a live session of this process is reused (and given
    ``conf``).

    ``spark.sql.shuffle.partitions`` is the session's cores (:func:`local_cores` of its master)
    unless ``conf`` sets it: Spark's default, 200, is sized for a cluster, and a small local job
    pays for 200 tasks per shuffle where adaptive execution does not coalesce them (a streaming
    query's aggregation: about 15 s against 3 s on 2 cores, docs/spark.md)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = {**_LOCAL_CONF, **(conf or {})}
    path = jar()
    if jvm is not False and path is not None:
        jars = settings.get(JARS)
        settings[JARS] = path if not jars else f"{jars},{path}"
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    cores = local_cores(spark.sparkContext.master or master)  # a reused session keeps its own
    if cores is not None and SHUFFLE_PARTITIONS not in (conf or {}):
        spark.conf.set(SHUFFLE_PARTITIONS, str(cores))
    spark.sparkContext.setLogLevel("ERROR")
    register(spark, pushdown=pushdown, jvm=jvm)
    return spark
