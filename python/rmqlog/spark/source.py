"""The ``rmqlog`` data source itself, and registering it with a SparkSession."""

from typing import Any

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from rmqlog.spark.batch import RmqlogReader
from rmqlog.spark.options import parse_options
from rmqlog.spark.schema import SCHEMA, _check_schema
from rmqlog.spark.stream import RmqlogStreamReader

NAME = "rmqlog"


class RmqlogDataSource(DataSource):
    """The ``rmqlog`` data source: ``spark.read.format("rmqlog").load(paths)`` and readStream."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        parse_options(self.options)  # bad options fail at load(), before any job
        return SCHEMA

    def reader(self, schema: StructType) -> RmqlogReader:
        _check_schema(schema)
        return RmqlogReader(parse_options(self.options, "batch"))

    def streamReader(self, schema: StructType) -> RmqlogStreamReader:
        _check_schema(schema)
        return RmqlogStreamReader(parse_options(self.options, "stream"))


def register(spark: Any) -> type[RmqlogDataSource]:
    """Registers the ``rmqlog`` data source (batch and streaming) with a SparkSession."""
    spark.dataSource.register(RmqlogDataSource)
    return RmqlogDataSource
