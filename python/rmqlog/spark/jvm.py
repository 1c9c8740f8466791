"""The JVM reader: the jar rmqlog ships (``rmqlog/jvm/rmqlog-spark.jar``), a Spark DataSource V2
reader over the Rust core (JNI; its native library is inside the jar). With the jar on the
classpath, ``format("rmqlog")`` is the JVM reader and the Python source is ``rmqlog_python``;
without it, ``rmqlog`` is the Python source, as before. See docs/spark.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

JAR = Path(__file__).resolve().parent.parent / "jvm" / "rmqlog-spark.jar"
PROVIDER = "io.rmqlog.spark.RmqlogProvider"
PYTHON_NAME = "rmqlog_python"


def jar() -> str | None:
    """The path of the jar this install ships, None where it has none (a build without it)."""
    return str(JAR) if JAR.is_file() else None


def on_classpath(spark: Any) -> bool:
    """Whether the session's driver finds the JVM reader (its jar on the classpath)."""
    jvm = spark.sparkContext._jvm
    return bool(jvm.org.apache.spark.util.Utils.classIsLoadable(PROVIDER))


def add(spark: Any, required: bool) -> bool:
    """Puts the jar on a running session's classpath (``ADD JAR``: the driver's and the
    executors'), unless it is there; returns whether the JVM reader is on it. Without a jar,
    ValueError when ``required``."""
    if on_classpath(spark):
        return True
    path = jar()
    if path is None:
        if required:
            raise ValueError(
                f"rmqlog: jvm=True, but this install has no JVM reader jar ({JAR}); build it with "
                "`make jar`, or read through the Python source (jvm=False)"
            )
        return False
    spark.sql(f"ADD JAR '{path}'")
    return on_classpath(spark)
