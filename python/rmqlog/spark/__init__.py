"""PySpark readers for rmqlog: a batch and streaming Python data source, and a body-lookup UDF.

    from rmqlog.spark import register, body_udf

    register(spark)                 # or: spark = local_session() (this machine, source registered)
    df = spark.read.format("rmqlog").load("/d0/store:/d1/store")  # offset ... key, headers
    meta = spark.read.format("rmqlog").schema("offset long, timestamp timestamp").load(...)
    stream = spark.readStream.format("rmqlog").load("/d0/store:/d1/store")
    remote = spark.read.format("rmqlog").option("tier.region", "eu-west-1").load("s3://bucket/log")

Two readers: with the JVM reader's jar on the classpath (``local_session`` and ``register`` put
the jar rmqlog ships there), ``format("rmqlog")`` is a DataSource V2 reader in Java over the Rust
core (JNI), and this Python source is ``rmqlog_python``; without the jar, ``rmqlog`` is the Python
source. Same schema, options and results (``rmqlog.spark.jvm``, docs/spark.md).

Executors read the segment files directly (read-only, no lock), so every executor must see the
store's directories: Spark local mode, executors on the broker host, or directories on a shared
filesystem. A store with an object storage tier is also read from the tier's URL alone
(``load("s3://bucket/prefix")``, settings as options ``tier.<key>``): every task reads its
segments from the object store, nothing local is needed. Rows are built as Arrow record
batches by the Rust core (``CommitLog.scan_batches``): no per-record Python code runs in a scan.
Filters on ``offset`` and ``timestamp`` prune what is planned; a schema that is a subset of the
columns reads only those. See ``docs/spark.md``.

Importing this module needs pyspark and pyarrow (the wheel's ``spark`` extra:
``pip install "$(ls dist/*.whl)[spark]"``); ``body_udf`` also needs pandas. ``import rmqlog``
never imports any of them.
"""

# First: refuses a PySpark this source does not work with, before the API it lacks is imported.
from rmqlog.spark import versions as versions  # isort: skip

from pyspark.sql.datasource import InputPartition as InputPartition

from rmqlog.spark import jvm as jvm
from rmqlog.spark.batch import NoPushdownReader as NoPushdownReader
from rmqlog.spark.batch import RangePartition, RmqlogReader
from rmqlog.spark.batch import read_range as read_range
from rmqlog.spark.errors import DataLossError
from rmqlog.spark.options import DEFAULT_BATCH_BYTES as DEFAULT_BATCH_BYTES
from rmqlog.spark.options import DEFAULT_BATCH_RECORDS as DEFAULT_BATCH_RECORDS
from rmqlog.spark.options import Options as Options
from rmqlog.spark.options import parse_options as parse_options
from rmqlog.spark.schema import ARROW_SCHEMA, SCHEMA, SCHEMA_DDL
from rmqlog.spark.schema import Projection as Projection
from rmqlog.spark.schema import projection as projection
from rmqlog.spark.session import local_session
from rmqlog.spark.source import NAME, PUSHDOWN_CONF, RmqlogDataSource, register
from rmqlog.spark.store import Store as Store
from rmqlog.spark.stream import RmqlogStreamReader
from rmqlog.spark.udf import IDLE_SECONDS as IDLE_SECONDS
from rmqlog.spark.udf import _cache as _cache
from rmqlog.spark.udf import _cached as _cached
from rmqlog.spark.udf import _drop_idle as _drop_idle
from rmqlog.spark.udf import body_udf, body_udf_nulls, lookup_bodies

# The names imported ``as`` themselves are not in __all__ (they were not before the split) but stay
# reachable here: the options, read_range, IDLE_SECONDS, and the UDF cache's internals (keyed by
# Store, the store as a read names it).
__all__ = [
    "ARROW_SCHEMA",
    "NAME",
    "PUSHDOWN_CONF",
    "SCHEMA",
    "SCHEMA_DDL",
    "DataLossError",
    "RangePartition",
    "RmqlogDataSource",
    "RmqlogReader",
    "RmqlogStreamReader",
    "body_udf",
    "body_udf_nulls",
    "local_session",
    "lookup_bodies",
    "register",
]
