"""A Spark session on this machine, set up for rmqlog: the one builder the tests, benchmarks and
examples use (and a user trying the source out can)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from rmqlog.spark.source import register

# What a local session needs here: Spark's own address and the driver on the loopback, no web
# UI or progress bars, timestamps shown in UTC (the source's are UTC instants).
_LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
}


def local_session(
    master: str = "local[2]",
    app_name: str = "rmqlog",
    conf: Mapping[str, str] | None = None,
    pushdown: bool = True,
) -> Any:
    """A SparkSession for ``master`` (``local[N]``, or ``local-cluster[...]`` for executors in
    their own JVMs) with the ``rmqlog`` source registered (``register(spark, pushdown)``).

    Spark's Python workers run this interpreter (``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON``
    unless set) and Spark binds to 127.0.0.1 (``SPARK_LOCAL_IP`` unless set); no UI; session
    time zone UTC; log level ERROR. ``conf`` adds or overrides settings. As
    ``SparkSession.builder.getOrCreate()``, a live session of this process is reused (and given
    ``conf``)."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**_LOCAL_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark, pushdown=pushdown)
    return spark
