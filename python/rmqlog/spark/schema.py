"""The data source's columns, as Spark and as Arrow see them, and the subset a query asks for.

A fleet (many stores read as one) has one more column, ``store``: the store's tier URL."""

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADERS_DDL = "ARRAY<STRUCT<name: STRING, value: BINARY>>"
SCHEMA_DDL = (
    f"offset BIGINT, timestamp TIMESTAMP, body BINARY, segment BIGINT, key BINARY, "
    f"headers {HEADERS_DDL}"
)
_HEADERS = ArrayType(
    StructType([StructField("name", StringType()), StructField("value", BinaryType())])
)
SCHEMA = StructType(
    [
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("body", BinaryType()),
        StructField("segment", LongType()),
        StructField("key", BinaryType()),  # null: a record without a key
        StructField("headers", _HEADERS),  # an empty array: a record without headers
    ]
)
_TIMESTAMP = pa.timestamp("us", tz="UTC")
# As Spark checks a batch's schema: its own spelling of the nested fields (names, nullable).
_ARROW_HEADERS = to_arrow_type(_HEADERS)
ARROW_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64()),
        pa.field("timestamp", _TIMESTAMP),
        pa.field("body", pa.binary()),
        pa.field("segment", pa.int64()),
        pa.field("key", pa.binary()),
        pa.field("headers", _ARROW_HEADERS),
    ]
)
STORE = "store"
FLEET_SCHEMA_DDL = f"{SCHEMA_DDL}, {STORE} STRING"
FLEET_SCHEMA = StructType([*SCHEMA.fields, StructField(STORE, StringType())])
_TYPES: dict[str, DataType] = {f.name: f.dataType for f in FLEET_SCHEMA.fields}
_ARROW_TYPES = {**{f.name: f.type for f in ARROW_SCHEMA}, STORE: pa.string()}


def _accepted(fleet: bool) -> str:
    ddl = FLEET_SCHEMA_DDL if fleet else SCHEMA_DDL
    return f"accepted: any of {ddl}, in any order (a subset reads only those columns)"


@dataclass(frozen=True)
class Projection:
    """The columns a query reads, in its schema's order: ``columns`` are the source's names,
    ``arrow`` the schema of the batches handed to Spark (the query's spelling of the names)."""

    columns: tuple[str, ...]
    arrow: pa.Schema

    @property
    def body(self) -> bool:
        return "body" in self.columns

    @property
    def props(self) -> bool:
        """Whether the query reads the records' keys or headers."""
        return "key" in self.columns or "headers" in self.columns

    @property
    def own(self) -> tuple[str, ...]:
        """The columns a store's scan builds (all but ``store``, which the reader adds)."""
        return tuple(c for c in self.columns if c != STORE)


def projection(schema: StructType | None, fleet: bool = False) -> Projection:
    """Checks a query's schema against the source's columns (with ``store`` for a fleet): any
    non-empty subset, in any order, names matched case-insensitively, each with its own type.
    Raises ValueError otherwise."""
    if schema is None:
        schema = FLEET_SCHEMA if fleet else SCHEMA
    columns: list[str] = []
    for field in schema.fields:
        name = field.name.lower()
        if name not in _TYPES or (name == STORE and not fleet):
            hint = " (a fleet's column: this read names one store)" if name == STORE else ""
            raise ValueError(
                f"rmqlog: unknown column {field.name!r} in the schema{hint}; {_accepted(fleet)}"
            )
        if name in columns:
            raise ValueError(
                f"rmqlog: column {name!r} appears twice in the schema; {_accepted(fleet)}"
            )
        if field.dataType != _TYPES[name]:
            raise ValueError(
                f"rmqlog: column {field.name!r} is {_TYPES[name].simpleString().upper()} in this "
                f"source, not {field.dataType.simpleString().upper()}; {_accepted(fleet)}. "
                "Cast it after loading instead"
            )
        columns.append(name)
    if not columns:
        raise ValueError(f"rmqlog: the schema has no column; {_accepted(fleet)}")
    arrow = pa.schema(
        pa.field(f.name, _ARROW_TYPES[name], f.nullable)
        for f, name in zip(schema.fields, columns, strict=True)
    )
    return Projection(tuple(columns), arrow)


FULL = projection(SCHEMA)
