"""Spark reads that read only what a query needs: filters on offset and timestamp prune the plan
(checked against a Python scan of the log and against Spark's own, unpushed evaluation), and a
schema that is a subset of the columns reads and ships only those columns, batch and streaming.
"""

import contextlib
import datetime
import os
import random
import shutil
import time
from zoneinfo import ZoneInfo

import pytest

from rmqlog import CommitLog

if shutil.which("java") is None:
    pytest.skip("rmqlog.spark tests need a JVM: `java` is not on PATH", allow_module_level=True)
try:
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.datasource import (
        EqualNullSafe,
        EqualTo,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        IsNotNull,
        IsNull,
        LessThan,
        LessThanOrEqual,
        Not,
        StringContains,
    )
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampNTZType,
        TimestampType,
    )
except ImportError as exc:
    pytest.skip(
        f"rmqlog.spark tests need pyspark and pyarrow (make develop installs them): {exc}",
        allow_module_level=True,
    )

from _spark_sources import is_jvm

import rmqlog.spark as rs

SEG = 64 * 1024
UTC = datetime.UTC
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)
BURSTS = 8


class Store:
    """A closed log of ``BURSTS`` bursts, each about one segment, stored at distinct times."""

    def __init__(self, root):
        self.dirs = [str(root / "d0"), str(root / "d1")]
        self.paths = os.pathsep.join(self.dirs)
        with CommitLog(self.dirs, segment_size=SEG) as log:
            for b in range(BURSTS):
                if b:
                    time.sleep(0.02)
                log.append_batch([f"b{b}-r{i:04d}-".encode() * (1 + i % 17) for i in range(600)])
            self.rows = [
                (off, log.read_record(off).timestamp_ms, bytes(body)) for off, body in log.scan()
            ]
            self.nsegments = len(log.segments())
        self.times = sorted({ts for _, ts, _ in self.rows})

    def offsets(self, keep=lambda off, ts: True):
        return [off for off, ts, _ in self.rows if keep(off, ts)]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = Store(tmp_path_factory.mktemp("pushdown"))
    assert s.nsegments >= BURSTS and len(s.times) >= BURSTS
    return s


def struct(*fields) -> "StructType":
    return StructType([StructField(name, kind) for name, kind in fields])


def dt(ms: int, us: int = 0) -> datetime.datetime:
    """The aware UTC datetime Spark hands a filter for ``ms`` milliseconds + ``us``."""
    return EPOCH + datetime.timedelta(milliseconds=ms, microseconds=us)


def planned(store, filters, **options):
    """(partitions, offsets read, what pushFilters returned) for a reader given ``filters``."""
    opts = rs.parse_options({"path": store.paths, **options})
    reader = rs.RmqlogReader(opts)
    kept = list(reader.pushFilters(filters))
    parts = reader.partitions()
    offsets = [
        off for p in parts for batch in reader.read(p) for off in batch.column("offset").to_pylist()
    ]
    return parts, offsets, kept


# ---------------------------------------------------------------------------------------------
# without Spark: which filters are taken, what is planned and read


def test_push_filters_keeps_what_it_cannot_apply_exactly(store):
    t = store.times[3]
    taken = [
        GreaterThan(("offset",), 10),
        LessThanOrEqual(("OFFSET",), 1 << 40),
        In(("offset",), [0, 5, None]),
        GreaterThanOrEqual(("timestamp",), dt(t, 1)),
        EqualNullSafe(("timestamp",), dt(t)),
        IsNotNull(("body",)),
    ]
    kept = [
        Not(EqualTo(("offset",), 7)),  # no pruning from it: Spark evaluates it
        StringContains(("body",), "b3"),
        GreaterThan(("segment",), 0),
        EqualTo(("offset",), "12"),  # not an integer literal
        EqualTo(("offset",), True),
        LessThan(("timestamp",), datetime.datetime(2030, 1, 1)),  # naive: which instant?
        GreaterThan(("timestamp",), t),  # not a datetime
        GreaterThan(("offset", "x"), 1),  # a nested field
    ]
    mixed = [f for pair in zip(taken, kept, strict=False) for f in pair] + kept[len(taken) :]
    reader = rs.RmqlogReader(rs.parse_options({"path": store.paths}))
    got = list(reader.pushFilters(mixed))
    assert len(got) == len(kept) and all(g is k for g, k in zip(got, kept, strict=True))
    assert reader.pushed.taken == taken
    # no column is ever null: IS NULL plans nothing
    assert planned(store, [IsNull(("timestamp",))]) == ([], [], [])


def test_time_window_plans_fewer_partitions_and_reads_exactly_its_records(store):
    full, all_offsets, _ = planned(store, [])
    assert len(full) == store.nsegments and all_offsets == store.offsets()
    t = store.times[-2]  # the last two bursts: about two segments of eight
    parts, got, kept = planned(
        store, [IsNotNull(("timestamp",)), GreaterThanOrEqual(("timestamp",), dt(t))]
    )
    assert kept == []
    assert got == store.offsets(lambda off, ts: ts >= t)
    assert 1 <= len(parts) <= 3 < len(full)
    # the range's edge is cut at the first record of the window, not at a segment start
    assert parts[0].lo == got[0]


def test_offset_in_plans_only_the_partitions_holding_those_offsets(store):
    offs = store.offsets()
    want = [offs[3], offs[4], offs[1700], offs[-1]]
    values = [*want, offs[5] + 1, store.rows[-1][0] + 10_000, -3]  # not record starts: no rows
    parts, got, kept = planned(store, [In(("offset",), values)])
    assert kept == [] and got == want
    assert len(parts) == 3  # the segments of offs[3..4], offs[1700] and offs[-1]
    x = offs[5] + 1  # planned (only reading finds no record starts there)
    assert parts[0].spans == ((offs[3], offs[3] + 1), (offs[4], offs[4] + 1), (x, x + 1))


def _random_filter(rng, store):
    offs, times = store.offsets(), store.times
    if rng.random() < 0.5:
        cls = rng.choice([GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, EqualTo])
        off = rng.choice(offs) + rng.choice([0, 0, 1, -1, 7])
        if rng.random() < 0.2:
            return In(("offset",), [rng.choice(offs) + rng.choice([0, 3]) for _ in range(5)])
        return cls(("offset",), off)
    cls = rng.choice([GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, EqualTo])
    ms = rng.choice(times) + rng.choice([0, 0, 1, -1])
    us = rng.choice([0, 0, 1, 999, -1])
    if rng.random() < 0.2:
        return In(("timestamp",), [dt(rng.choice(times), rng.choice([0, 5])) for _ in range(3)])
    return cls(("timestamp",), dt(ms, us))


def _model(f, off: int, ts_ms: int) -> bool:
    """What Spark computes for one row: timestamps compared in microseconds."""
    x = off if f.attribute == ("offset",) else ts_ms * 1000
    key = (lambda v: v) if f.attribute == ("offset",) else micros
    if isinstance(f, In):
        return x in {key(v) for v in f.value}
    v = key(f.value)
    return {
        GreaterThan: x > v,
        GreaterThanOrEqual: x >= v,
        LessThan: x < v,
        LessThanOrEqual: x <= v,
        EqualTo: x == v,
    }[type(f)]


def micros(value: datetime.datetime) -> int:
    return (value - EPOCH) // datetime.timedelta(microseconds=1)


def test_random_conjunctions_read_exactly_the_rows_spark_would_keep(store):
    rng = random.Random(14)
    for case in range(150):
        filters = [_random_filter(rng, store) for _ in range(rng.choice([1, 2, 3]))]
        options = rng.choice([{}, {"max_partition_bytes": "20k"}, {"start_offset": 9000}])
        _, got, kept = planned(store, filters, **options)
        lo = options.get("start_offset", 0)
        want = [
            off
            for off, ts, _ in store.rows
            if off >= lo and all(_model(f, off, ts) for f in filters)
        ]
        assert kept == [] and got == want, (case, filters, options)


class Recording:
    """A log whose ``scan_batches`` calls are recorded (columns asked for, body bytes built)."""

    def __init__(self, log, calls):
        self._log, self._calls = log, calls

    def __getattr__(self, name):
        return getattr(self._log, name)

    def scan_batches(self, *args, **kwargs):
        self._calls.append(tuple(kwargs["columns"]))
        return self._log.scan_batches(*args, **kwargs)


def test_a_subset_schema_reads_only_its_columns_in_its_order(store, monkeypatch):
    calls: list[tuple[str, ...]] = []
    opened = rs.batch._open
    monkeypatch.setattr(rs.batch, "_open", lambda paths: Recording(opened(paths), calls))
    proj = rs.projection(struct(("Timestamp", TimestampType()), ("offset", LongType())))
    assert proj.columns == ("timestamp", "offset") and not proj.body
    reader = rs.RmqlogReader(rs.parse_options({"path": store.paths, "batch_records": 1000}), proj)
    batches = [b for p in reader.partitions() for b in reader.read(p)]
    # the body column is never asked of the Rust batch builder, nor built
    assert calls and set(calls) == {("timestamp", "offset")}
    assert all(b.schema.names == ["Timestamp", "offset"] for b in batches)
    assert all(b.schema.field(0).type == pa.timestamp("us", tz="UTC") for b in batches)
    rows = sum(b.num_rows for b in batches)
    assert rows == len(store.rows) and len(batches) >= len(store.rows) // 1000
    # the shipped bytes: two 8-byte columns, nothing of the bodies
    assert sum(b.nbytes for b in batches) == 16 * rows
    got = [
        (o, t.value // 1000)
        for b in batches
        for t, o in zip(b.column(0), b.column(1).to_pylist(), strict=True)
    ]
    assert got == [(off, ts) for off, ts, _ in store.rows]
    # the full schema asks for every column, bodies as plain binary
    calls.clear()
    first = list(rs.read_range(reader.opts, reader.partitions()[0]))
    assert calls == [("offset", "timestamp", "body", "segment", "key", "headers")]
    assert all(b.schema.equals(rs.ARROW_SCHEMA) for b in first)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ([("offset", LongType()), ("bdy", BinaryType())], "unknown column 'bdy'"),
        ([("offset", IntegerType())], "column 'offset' is BIGINT in this source, not INT"),
        ([("timestamp", TimestampNTZType())], "'timestamp' is TIMESTAMP in this source, not"),
        ([("body", StringType())], "column 'body' is BINARY in this source, not STRING"),
        ([("offset", LongType()), ("OFFSET", LongType())], "column 'offset' appears twice"),
        ([], "the schema has no column"),
    ],
)
def test_a_bad_schema_names_the_column_and_what_is_accepted(fields, message):
    with pytest.raises(ValueError, match="accepted: any of offset BIGINT, timestamp") as e:
        rs.projection(struct(*fields))
    assert message in str(e.value)


# ---------------------------------------------------------------------------------------------
# on Spark


def load(spark, store, schema=None, **options):
    """A new DataFrame of ``store`` with filter pushdown on (option ``pushdown``: each query
    here loads anew, as docs/spark.md asks of a query that relies on it)."""
    options.setdefault("pushdown", "true")
    reader = spark.read.format("rmqlog")
    if schema:
        reader = reader.schema(schema)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load(store.paths)


@pytest.fixture
def new_york(spark):
    """The session time zone set to America/New_York for one test."""
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    yield ZoneInfo("America/New_York")
    spark.conf.set("spark.sql.session.timeZone", before)


def test_time_window_on_spark_plans_fewer_partitions(spark, store, new_york):
    t = store.times[-2]
    local = datetime.datetime.fromtimestamp(t / 1000, new_york).replace(tzinfo=None)
    literal = local.isoformat(sep=" ", timespec="milliseconds")  # session-local wall time
    full = load(spark, store)
    window = full.filter(f"timestamp >= timestamp'{literal}'")
    assert full.rdd.getNumPartitions() == store.nsegments
    assert window.rdd.getNumPartitions() < store.nsegments // 2
    want = store.offsets(lambda off, ts: ts >= t)
    assert [r.offset for r in window.orderBy("offset").select("offset").collect()] == want
    # a window on both sides, with a sub-millisecond bound, through the DataFrame API
    a, b = store.times[2], store.times[4]
    df = full.filter((F.col("timestamp") > dt(a, 500)) & (F.col("timestamp") <= dt(b)))
    assert df.count() == len(store.offsets(lambda off, ts: a < ts <= b))
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert plan.count("Filter") == plan.count("RuntimeFilters: []")  # no Filter node left


@contextlib.contextmanager
def unpushed(spark):
    """Filters not pushed, Spark filters every row; yields the options to load with. The Python
    source: Spark's switch for filters reaching Python sources off. The JVM reader: option
    ``pushdown=false``."""
    if is_jvm(spark):
        yield {"pushdown": "false"}
        return
    spark.conf.set(rs.PUSHDOWN_CONF, "false")
    try:
        yield {}
    finally:
        spark.conf.set(rs.PUSHDOWN_CONF, "true")


def test_offset_ranges_and_in_equal_what_spark_computes_unpushed(spark, store):
    offs = store.offsets()
    col = F.col("offset")

    def run(condition):
        """(offsets, partitions) of the query pushed, then the same unpushed."""
        out = []
        for ctx in (contextlib.nullcontext({}), unpushed(spark)):
            with ctx as off:
                df = load(spark, store, **off).filter(condition).select("offset")
                out.append(
                    ([r.offset for r in df.orderBy("offset").collect()], df.rdd.getNumPartitions())
                )
        return out

    (got, n), (want, full) = run((col > offs[100]) & (col <= offs[2500]))
    assert got == want == offs[101:2501]
    assert full == store.nsegments and n < full
    values = [offs[7], offs[7] + 1, offs[3000], 10**12, -1]
    (got, n), (want, _) = run(col.isin(values))
    assert got == want == [offs[7], offs[3000]] and n == 2
    (got, n), (want, _) = run(col == offs[-1])
    assert got == want == offs[-1:] and n == 1
    (got, _), (want, _) = run((col < offs[10]) | (col >= offs[-3]))  # an OR: not pushed
    assert got == want == offs[:10] + offs[-3:]
    top = 2**63 - 1  # the largest BIGINT: bounds there hold every offset, or none
    for condition, expect in [
        (col <= top, offs),
        (col.between(0, top), offs),
        (col < top, offs),
        (col > top, []),
        (col >= top, []),
        (col == top, []),
        (col.isin(top, offs[3]), offs[3:4]),
    ]:
        (got, _), (want, _) = run(condition)
        assert got == want == expect


def test_subset_schemas_on_spark(spark, store):
    meta = load(spark, store, "timestamp timestamp, offset long")
    assert meta.columns == ["timestamp", "offset"]
    got = meta.selectExpr("offset", "unix_millis(timestamp) AS ts").orderBy("offset").collect()
    assert [(r.offset, r.ts) for r in got] == [(off, ts) for off, ts, _ in store.rows]
    bodies = load(spark, store, "body binary").collect()
    assert sorted(bytes(r.body) for r in bodies) == sorted(b for _, _, b in store.rows)
    t = store.times[-1]
    assert load(spark, store, "offset long").filter(F.col("offset") < 0).count() == 0
    window = load(spark, store, "timestamp timestamp").filter(F.col("timestamp") >= dt(t))
    assert window.count() == len(store.offsets(lambda off, ts: ts >= t))
    # The Python source refuses it when planned (AnalysisException), the JVM reader at load().
    with pytest.raises(Exception, match=r"unknown column 'tags'.*accepted: any of"):
        load(spark, store, "tags string").count()


def test_stream_with_a_subset_schema(spark, store, tmp_path):
    stream = (
        spark.readStream.format("rmqlog")
        .schema("segment long, offset long")
        .option("max_records_per_trigger", 1500)
        .load(store.paths)
    )
    seen: list[pa.Table] = []
    query = (
        stream.writeStream.foreachBatch(lambda df, _id: seen.append(df.toArrow()))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert all(t.column_names == ["segment", "offset"] for t in seen)
    got = sorted(o for t in seen for o in t.column("offset").to_pylist())
    assert got == store.offsets() and len(seen) >= 2


def test_a_dataframe_reused_after_a_filtered_query_reads_every_row(spark, store):
    """PySpark 4.1 to 4.3 keep the plan of a DataFrame's filtered query for its next query
    without a pushable filter. By default the source takes no filter, so whichever plan is kept
    reads the whole range; with option ``pushdown`` a fresh load prunes."""
    offs = store.offsets()
    df = spark.read.format("rmqlog").load(store.paths)
    assert df.filter(f"offset < {offs[100]}").count() == 100
    assert df.count() == len(offs)  # read 100 rows before the default changed
    assert df.rdd.getNumPartitions() == store.nsegments
    pruned = load(spark, store).filter(f"offset < {offs[100]}")
    assert pruned.rdd.getNumPartitions() < store.nsegments
    assert pruned.count() == 100


@pytest.mark.parametrize(
    ("options", "mode", "message"),
    [
        ({"pushdown": "maybe"}, "batch", "option pushdown='maybe' is not valid"),
        ({"pushdown": "true"}, "stream", "option pushdown applies to spark.read only"),
    ],
)
def test_the_pushdown_option_is_checked(options, mode, message):
    with pytest.raises(ValueError, match=message):
        rs.parse_options({"path": "/d0", **options}, mode)
    assert rs.parse_options({"path": "/d0", "pushdown": "TRUE"}, "batch").pushdown
    assert not rs.parse_options({"path": "/d0"}, "batch").pushdown


# ---------------------------------------------------------------------------------------------
# key = x, key IN (...): through the key indexes (docs/messages.md)


class Keyed:
    """A closed log of records with keys ``k0``..``k19``, each on a run of 400 records (every
    ninth record without one)."""

    def __init__(self, root):
        self.paths = str(root / "d0")
        with CommitLog(self.paths, segment_size=SEG) as log:
            for i in range(8000):
                key = None if i % 9 == 0 else b"k%d" % (i // 400)
                log.append(b"r%05d-" % i * (1 + i % 13), key=key)
            self.rows = [(off, log.read_record(off).key) for off, _ in log.scan()]
            self.starts = [s.start_offset for s in log.segments()]

    def with_keys(self, *keys):
        return [off for off, k in self.rows if k in keys]

    def segments_of(self, offsets):
        return {max(s for s in self.starts if s <= o) for o in offsets}


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    k = Keyed(tmp_path_factory.mktemp("keyed"))
    assert len(k.starts) > 8
    return k


def test_key_filters_plan_only_the_segments_the_index_names(keyed):
    want = keyed.with_keys(b"k7")
    parts, got, kept = planned(keyed, [EqualTo(("key",), b"k7")])
    assert kept == [] and got == want
    # Only the records found, from the segments the index names, in one task (they are few).
    spans = [a for p in parts for a, _ in p.spans]
    assert spans == want and len(keyed.segments_of(want)) < len(keyed.starts)
    assert len(parts) == 1
    want = keyed.with_keys(b"k7", b"k8")
    parts, got, kept = planned(keyed, [In(("key",), [bytearray(b"k7"), "k8", b"absent", None])])
    assert kept == [] and got == want
    # With an offset range: both apply.
    cut = want[len(want) // 2]
    _, got, _ = planned(keyed, [In(("key",), [b"k7", b"k8"]), GreaterThanOrEqual(("offset",), cut)])
    assert got == [o for o in want if o >= cut]
    # IS NULL / IS NOT NULL / <=> NULL on key: the records without one exist; Spark decides.
    for f in (IsNull(("key",)), IsNotNull(("key",)), EqualNullSafe(("key",), None)):
        _, got, kept = planned(keyed, [f])
        assert kept == [f] and len(got) == len(keyed.rows)


def test_key_filters_on_spark_equal_what_spark_computes_unpushed(spark, keyed):
    key = F.col("key")
    for condition, want in [
        (key == F.lit(bytearray(b"k3")), keyed.with_keys(b"k3")),
        (key.isin(bytearray(b"k3"), bytearray(b"k19")), keyed.with_keys(b"k3", b"k19")),
        (key.isNull(), keyed.with_keys(None)),
    ]:
        pushed = load(spark, keyed).filter(condition).select("offset")
        assert [r.offset for r in pushed.orderBy("offset").collect()] == want
        with unpushed(spark) as off:
            df = load(spark, keyed, **off).filter(condition).select("offset")
            assert [r.offset for r in df.orderBy("offset").collect()] == want
    # The records found in two segments: one task reads them all.
    n = load(spark, keyed).filter(key == F.lit(bytearray(b"k3"))).rdd.getNumPartitions()
    assert n == 1 < len(keyed.segments_of(keyed.with_keys(b"k3")))
