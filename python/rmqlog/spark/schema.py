"""The data source's fixed schema, as Spark and as Arrow see it."""

import pyarrow as pa
from pyspark.sql.types import BinaryType, LongType, StructField, StructType, TimestampType

SCHEMA_DDL = "offset BIGINT, timestamp TIMESTAMP, body BINARY, segment BIGINT"
SCHEMA = StructType(
    [
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("body", BinaryType()),
        StructField("segment", LongType()),
    ]
)
_TIMESTAMP = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64()),
        pa.field("timestamp", _TIMESTAMP),
        pa.field("body", pa.binary()),
        pa.field("segment", pa.int64()),
    ]
)


def _check_schema(schema: StructType | None) -> None:
    if schema is None:
        return
    got = [(f.name, f.dataType) for f in schema.fields]
    want = [(f.name, f.dataType) for f in SCHEMA.fields]
    if got != want:
        raise ValueError(
            f"rmqlog: the schema is fixed ({SCHEMA_DDL}); got {schema.simpleString()}. "
            "Leave .schema() out and select or cast columns afterwards"
        )
