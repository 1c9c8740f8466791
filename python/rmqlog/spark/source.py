"""The ``rmqlog`` data source itself, and registering it with a SparkSession.

When options are checked: Spark builds the data source (``__init__``, then ``schema()`` unless the
query gives a schema) in ``load()``, for ``spark.read`` and ``spark.readStream`` alike and with the
same options, so every option's name and value is checked there. Whether the DataFrame is a batch
or a stream is only known later: ``reader()`` runs when a batch query is planned (its first
action), ``streamReader()`` when a streaming query starts. An option of the other kind of read
(``end_offset`` on a stream, a trigger limit on a batch read) is refused there.

Filters reach a Python source only where ``spark.sql.python.filterPushdown.enabled`` is on, and
there Spark builds the reader in its filter planner; elsewhere Spark refuses a reader that defines
``pushFilters``. So ``reader()`` gives the one with ``pushFilters`` to that planner only, and only
where the read asks for it (option ``pushdown``): PySpark 4.1 to 4.3 keep the plan of a DataFrame's
filtered query (its partitions and its reader) for that DataFrame's next query without pushable
filters, which then reads only what the filter kept. A reader that takes no filter plans the whole
range, whichever query's plan is reused.
"""

import functools
import sys
from collections.abc import Iterator, MutableMapping
from types import FrameType
from typing import Any, NoReturn

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from rmqlog.spark import jvm as _jvm
from rmqlog.spark.batch import NoPushdownReader, RmqlogReader, _open
from rmqlog.spark.errors import store_gone
from rmqlog.spark.fleet_stream import FleetStreamReader
from rmqlog.spark.options import parse_options
from rmqlog.spark.schema import FLEET_SCHEMA, SCHEMA, projection
from rmqlog.spark.stream import RmqlogStreamReader

NAME = "rmqlog"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
_FILTER_PLANNER = "data_source_pushdown_filters.py"  # pyspark.sql.worker's module


def _built_by_filter_planner() -> bool:
    """Whether the caller is PySpark's filter-pushdown planner (the worker that calls
    ``pushFilters`` right after ``reader()``)."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            return False
        if frame.f_code.co_filename.endswith(_FILTER_PLANNER):
            return True
        frame = frame.f_back
    return False


class RmqlogDataSource(DataSource):
    """The ``rmqlog`` data source: ``spark.read.format("rmqlog").load(paths)`` and readStream."""

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)
        # Bad options fail at load(), before any job, schema given or not; so does a path that
        # holds no store (a read-only open: no lock, nothing written). A fleet's stores are
        # found here, once: Spark pickles this object for the planning that follows.
        opts = parse_options(options)
        store = opts.store
        # With fail_on_data_loss=false a listed store that is gone is left out (a stream
        # restarted after one went on goes on); otherwise it is StoreNotFoundError.
        lenient = None if opts.fail_on_data_loss else functools.partial(store_gone, opts)
        self.fleet = store.fleet(lenient)
        _open(store if self.fleet is None else store.at(self.fleet[0])).close()

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SCHEMA if self.fleet is None else FLEET_SCHEMA

    def reader(self, schema: StructType) -> RmqlogReader:
        proj = projection(schema, self.fleet is not None)
        opts = parse_options(self.options, "batch")
        cls = RmqlogReader if opts.pushdown and _built_by_filter_planner() else NoPushdownReader
        return cls(opts, proj, self.fleet)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            proj = projection(schema, self.fleet is not None)
            opts = parse_options(self.options, "stream")
            if self.fleet is not None:
                limit = opts.max_records_per_trigger or opts.max_bytes_per_trigger
                if limit is not None:
                    raise ValueError(
                        "rmqlog: options max_records_per_trigger and max_bytes_per_trigger apply "
                        "to one store's stream; a fleet's micro-batch reads every new record"
                    )
        except ValueError as e:
            # Raising here would reach PySpark's stream runner before its reader exists: its
            # cleanup then fails with an UnboundLocalError that hides this message.
            return _RefusedStreamReader(e)
        if self.fleet is not None:
            return FleetStreamReader(opts, proj)
        return RmqlogStreamReader(opts, proj)


class _RefusedStreamReader(DataSourceStreamReader):
    """A stream whose options were refused: every call Spark makes raises that error."""

    def __init__(self, error: ValueError) -> None:
        self.error = error

    def _raise(self, *_args: Any) -> NoReturn:
        raise self.error

    def initialOffset(self) -> dict:
        self._raise()

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        self._raise()

    def getDefaultReadLimit(self) -> Any:
        self._raise()

    def reportLatestOffset(self) -> dict | None:
        self._raise()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        self._raise()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        self._raise()

    def commit(self, end: dict) -> None:
        self._raise()

    def stop(self) -> None:
        """Nothing to release."""


class PythonSource(RmqlogDataSource):
    """The Python source under the name it has beside the JVM reader: ``rmqlog_python``."""

    @classmethod
    def name(cls) -> str:
        return _jvm.PYTHON_NAME


def register(spark: Any, pushdown: bool = True, jvm: bool | None = None) -> type[DataSource]:
    """Registers the ``rmqlog`` data source (batch and streaming) with a SparkSession.

    ``jvm``: whether ``rmqlog`` is the JVM reader (the jar rmqlog ships, a DataSource V2 reader
    over the Rust core: docs/spark.md). None (the default): where the jar is, it is put on the
    session's classpath (``ADD JAR``) unless there already; True: the same, and ValueError without
    a jar; False: the jar is not added (a session that has it keeps it). Where the JVM reader is
    on the classpath, the Python source is registered as ``rmqlog_python``; elsewhere as
    ``rmqlog``. Returns the Python source's class.

    With ``pushdown`` (the default) it also turns on ``spark.sql.python.filterPushdown.enabled``,
    the session's switch for filters reaching Python sources (off by default; sources without
    ``pushFilters`` read the same with it on)."""
    on_jvm = _jvm.add(spark, bool(jvm)) if jvm is not False else _jvm.on_classpath(spark)
    source = PythonSource if on_jvm else RmqlogDataSource
    spark.dataSource.register(source)
    if pushdown:
        spark.conf.set(PUSHDOWN_CONF, "true")
    return source
