"""The data source's columns, as Spark and as Arrow see them, and the subset a query asks for."""

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    DataType,
    LongType,
    StructField,
    StructType,
    TimestampType,
)

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
_TYPES: dict[str, DataType] = {f.name: f.dataType for f in SCHEMA.fields}


def _accepted() -> str:
    return f"accepted: any of {SCHEMA_DDL}, in any order (a subset reads only those columns)"


@dataclass(frozen=True)
class Projection:
    """The columns a query reads, in its schema's order: ``columns`` are the source's names,
    ``arrow`` the schema of the batches handed to Spark (the query's spelling of the names)."""

    columns: tuple[str, ...]
    arrow: pa.Schema

    @property
    def body(self) -> bool:
        return "body" in self.columns


def projection(schema: StructType | None) -> Projection:
    """Checks a query's schema against the source's columns: any non-empty subset, in any order,
    names matched case-insensitively, each with its own type. Raises ValueError otherwise."""
    if schema is None:
        schema = SCHEMA
    columns: list[str] = []
    for field in schema.fields:
        name = field.name.lower()
        if name not in _TYPES:
            raise ValueError(f"rmqlog: unknown column {field.name!r} in the schema; {_accepted()}")
        if name in columns:
            raise ValueError(f"rmqlog: column {name!r} appears twice in the schema; {_accepted()}")
        if field.dataType != _TYPES[name]:
            raise ValueError(
                f"rmqlog: column {field.name!r} is {_TYPES[name].simpleString().upper()} in this "
                f"source, not {field.dataType.simpleString().upper()}; {_accepted()}. "
                "Cast it after loading instead"
            )
        columns.append(name)
    if not columns:
        raise ValueError(f"rmqlog: the schema has no column; {_accepted()}")
    arrow = pa.schema(
        pa.field(f.name, ARROW_SCHEMA.field(name).type, f.nullable)
        for f, name in zip(schema.fields, columns, strict=True)
    )
    return Projection(tuple(columns), arrow)


FULL = projection(SCHEMA)
