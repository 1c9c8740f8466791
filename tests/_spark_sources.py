"""The Spark tests run against both readers of ``format("rmqlog")``: the JVM reader (the jar, a
DataSource V2 reader over the Rust core) and the Python source. One session has both: with the jar
on its classpath ``rmqlog`` is the JVM reader and the Python source is ``rmqlog_python``. The
``spark`` fixture's ``python`` case is that session seen through :class:`PythonSourceSession`,
whose readers send ``format("rmqlog")`` to ``rmqlog_python``; test code is the same for both."""

from __future__ import annotations

from typing import Any

from pyspark.sql.readwriter import DataFrameReader
from pyspark.sql.streaming.readwriter import DataStreamReader

from rmqlog.spark.jvm import PYTHON_NAME

READERS = ("jvm", "python")


class _Renamed:
    """A DataFrameReader or DataStreamReader whose ``format("rmqlog")`` is the Python source."""

    def __init__(self, reader: Any) -> None:
        self._reader = reader

    def format(self, source: str) -> _Renamed:
        return _Renamed(self._reader.format(PYTHON_NAME if source == "rmqlog" else source))

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._reader, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            out = attr(*args, **kwargs)
            return _Renamed(out) if isinstance(out, DataFrameReader | DataStreamReader) else out

        return call


class PythonSourceSession:
    """A SparkSession whose ``read`` and ``readStream`` name the Python source for ``rmqlog``."""

    reader = "python"

    def __init__(self, session: Any) -> None:
        self._session = session

    @property
    def read(self) -> _Renamed:
        return _Renamed(self._session.read)

    @property
    def readStream(self) -> _Renamed:
        return _Renamed(self._session.readStream)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


def reader(spark: Any) -> str:
    """Which reader ``format("rmqlog")`` is in this test: ``"jvm"`` or ``"python"``."""
    return getattr(spark, "reader", "jvm")


def is_jvm(spark: Any) -> bool:
    return reader(spark) == "jvm"


def named(spark: Any, error: BaseException, python_type: str) -> bool:
    """Whether ``error`` (what a Spark call raised) is the Python source's ``python_type`` or,
    with the JVM reader, its counterpart: rmqlog's errors are named in the JVM reader's messages
    as in Python's (``rmqlog: StoreNotFoundError: ...``); a bad option is an
    IllegalArgumentException (PySpark's, converted from Java's)."""
    if is_jvm(spark) and python_type == "ValueError":
        from pyspark.errors import IllegalArgumentException

        return isinstance(error, IllegalArgumentException)
    return python_type in str(error)
