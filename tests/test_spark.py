"""The PySpark readers (rmqlog.spark) on a real local Spark: the batch data source, partitioning,
the body UDF and Structured Streaming; plus the planning logic without Spark.

Skipped as a whole only when ``java`` is not on PATH or pyspark/pyarrow cannot be imported. One
SparkSession (local[2], the ``spark`` fixture of conftest.py) serves every Spark test module.
"""

import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest

from rmqlog import CommitLog, OffsetOutOfRangeError

if shutil.which("java") is None:
    pytest.skip("rmqlog.spark tests need a JVM: `java` is not on PATH", allow_module_level=True)
try:
    import pyarrow as pa
    import pyspark  # noqa: F401
except ImportError as exc:
    pytest.skip(
        f"rmqlog.spark tests need pyspark and pyarrow (make develop installs them): {exc}",
        allow_module_level=True,
    )

from _spark_sources import named
from _spark_sources import reader as reader_of

import rmqlog.spark as rs

SEG = 64 * 1024
MS = 1000  # microseconds per millisecond


# ---------------------------------------------------------------------------------------------
# fixtures


def _body(i: int) -> bytes:
    """Record i's body: empty for every 97th, else 8..320 recognisable bytes (a few 2 KiB)."""
    if i % 97 == 0:
        return b""
    unit = f"r{i:06d}.".encode()
    return unit * (256 if i % 501 == 0 else 1 + (i * 7919) % 40)


class Store:
    """A closed log over three directories with what a scan of it gives."""

    def __init__(self, root):
        self.dirs = [str(root / f"d{i}") for i in range(3)]
        self.paths = os.pathsep.join(self.dirs)
        self.bursts: list[list[int]] = []
        with CommitLog(self.dirs, segment_size=SEG) as log:
            i = 0
            for size in (1200, 1300, 1000):  # three bursts with distinct timestamps
                if self.bursts:
                    time.sleep(0.03)
                self.bursts.append(log.append_batch([_body(i + k) for k in range(size)]))
                i += size
            self.records = [(off, bytes(body)) for off, body in log.scan()]
            self.ts_ms = {off: log.read_record(off).timestamp_ms for off, _ in self.records}
            self.segments = [(s.start_offset, s.size, s.path) for s in log.segments()]
            self.min_offset, self.max_offset = log.min_offset, log.max_offset
        self.offsets = [off for off, _ in self.records]

    def segment_of(self, off: int) -> int:
        return max(start for start, _, _ in self.segments if start <= off)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = Store(tmp_path_factory.mktemp("store"))
    assert len(s.segments) >= 6 and {os.path.dirname(p) for _, _, p in s.segments} == set(s.dirs)
    return s


def load(spark, store_paths, **options):
    """spark.read.format("rmqlog") with ``options`` (values as strings), loading ``store_paths``."""
    reader = spark.read.format("rmqlog")
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load(store_paths)


def rows_of(df):
    """(offset, body) of every row, in offset order."""
    return [(r.offset, bytes(r.body)) for r in df.orderBy("offset").collect()]


# ---------------------------------------------------------------------------------------------
# without Spark: imports, options, planning, reading one partition


def test_import_rmqlog_does_not_import_pyspark():
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, rmqlog; bad = [m for m in ('pyspark', 'pyarrow', 'pandas', "
            "'rmqlog.spark') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize(
    ("options", "mode", "message"),
    [
        ({"path": "/x", "max_partition_byte": "1"}, None, "unknown option max_partition_byte"),
        ({"path": "/x", "a": "1", "b": "2"}, None, "unknown options a, b; accepted options: path"),
        ({"path": "/x", "batch_bytes": "lots"}, None, "batch_bytes='lots'"),
        ({"path": "/x", "batch_bytes": "4g"}, None, "at most 2147483647"),
        ({"path": "/x", "max_partition_bytes": "1k"}, None, "at least 4096"),
        ({"path": "/x", "batch_records": "0"}, None, "batch_records='0'"),
        ({"path": "/x", "batch_records": "9" * 23}, None, "at most 2^63-1"),
        ({"path": "/x", "max_partition_bytes": str(1 << 64)}, None, "at most 9223372036854775807"),
        ({"path": "/x", "start_offset": str(1 << 63)}, None, "start_offset='9223372036854775808'"),
        ({"path": "/x", "max_partition_bytes": "-5"}, None, "max_partition_bytes='-5'"),
        ({"path": "/x", "start_offset": "first"}, None, '"earliest" or "latest"'),
        ({"path": "/x", "end_offset": "1.5"}, None, "end_offset='1.5'"),
        ({"path": "/x", "start_timestamp": "yesterday"}, None, "start_timestamp='yesterday'"),
        ({"path": "/x", "fail_on_data_loss": "maybe"}, None, '"true" or "false"'),
        ({"path": "/x", "start_offset": "10", "end_offset": "5"}, None, "is after end_offset"),
        ({}, None, "no store given"),
        ({"path": "/x", "paths": "/y"}, None, "use one of them"),
        ({"path": "/x", "end_offset": "5"}, "stream", "end_offset applies to spark.read only"),
        ({"path": "/x", "max_records_per_trigger": "5"}, "batch", "spark.readStream only"),
        ({"path": "/x", "wait_ms": "100"}, "batch", "wait_ms applies to spark.readStream only"),
        ({"path": "/x", "wait_ms": "61000"}, "stream", "an integer in [0, 60000]"),
    ],
)
def test_bad_options_raise_value_error_naming_the_option(options, mode, message):
    with pytest.raises(ValueError, match=r"^rmqlog: ") as e:
        rs.parse_options(options, mode)
    assert message in str(e.value)


def test_good_options_are_parsed():
    o = rs.parse_options(
        {
            "PATHS": '["/a", "/b:/c"]',  # DataFrameReader.load([...]) sends a JSON list
            "max_partition_bytes": "64MiB",
            "batch_bytes": "512k",
            "batch_records": "1_000",
            "start_offset": "earliest",
            "end_offset": "123",
            "fail_on_data_loss": "False",
        }
    )
    assert o.paths == ("/a", "/b", "/c")
    assert (o.max_partition_bytes, o.batch_bytes, o.batch_records) == (64 << 20, 512 << 10, 1000)
    assert (o.start_offset, o.end_offset, o.fail_on_data_loss) == ("earliest", 123, False)


def test_read_range_yields_bounded_arrow_batches_equal_to_scan(store):
    """One partition per segment; batches are the exact Arrow schema, bounded in rows and bytes,
    and together give the scan's records."""
    opts = rs.parse_options({"path": store.paths, "batch_records": "100", "batch_bytes": "20k"})
    parts = rs.RmqlogReader(opts).partitions()
    assert [(p.lo, p.hi) for p in parts] == [
        (start, min(start + size, store.max_offset)) for start, size, _ in store.segments
    ]
    got = []
    for part in parts:
        for batch in rs.read_range(opts, part):
            assert isinstance(batch, pa.RecordBatch)
            assert batch.schema.equals(rs.ARROW_SCHEMA)
            assert 1 <= batch.num_rows <= 100
            body_bytes = batch.column("body").buffers()[2].size
            assert body_bytes <= 20 << 10 or batch.num_rows == 1
            rows = batch.to_pydict()
            assert all(part.lo <= off < part.hi for off in rows["offset"])
            assert set(rows["segment"]) == {store.segment_of(rows["offset"][0])}
            got += zip(rows["offset"], rows["body"], strict=True)
    assert got == store.records
    assert list(rs.read_range(opts, rs.InputPartition(None))) == []  # Spark's empty plan


# ---------------------------------------------------------------------------------------------
# batch reads on Spark


def test_read_whole_log_equals_scan(spark, store):
    df = load(spark, store.paths)
    assert df.schema.simpleString() == (
        "struct<offset:bigint,timestamp:timestamp,body:binary,segment:bigint,key:binary,"
        "headers:array<struct<name:string,value:binary>>>"
    )
    assert df.rdd.getNumPartitions() == len(store.segments)  # one per segment by default
    rows = df.selectExpr("offset", "unix_micros(timestamp) AS ts", "body", "segment").collect()
    assert len(rows) == len(store.records) == df.count()
    assert sorted((r.offset, bytes(r.body)) for r in rows) == store.records
    assert all(r.ts == store.ts_ms[r.offset] * MS for r in rows)
    assert all(r.segment == store.segment_of(r.offset) for r in rows)
    # option("paths") and load([dir, ...]) read the same; any one directory finds the others
    assert load(spark, None, paths=store.paths).count() == len(store.records)
    assert spark.read.format("rmqlog").load(store.dirs).count() == len(store.records)
    assert load(spark, store.dirs[1]).count() == len(store.records)


def test_offset_and_timestamp_ranges(spark, store):
    offs = store.offsets
    # half-open on the record start; a start inside a record begins at the next record
    lo, hi = offs[100] + 1, offs[2500]
    assert rows_of(load(spark, store.paths, start_offset=lo, end_offset=hi)) == [
        r for r in store.records if lo <= r[0] < hi
    ]
    assert rows_of(load(spark, store.paths, start_offset=offs[-1])) == store.records[-1:]
    assert load(spark, store.paths, end_offset=0).count() == 0
    assert load(spark, store.paths, start_offset="latest").count() == 0
    # timestamps: [start_timestamp, end_timestamp) in ms, resolved with offset_for_timestamp
    t1 = store.ts_ms[store.bursts[1][0]]
    t2 = store.ts_ms[store.bursts[2][0]]
    assert t1 < t2 and store.ts_ms[store.bursts[0][-1]] < t1
    want = [r for r in store.records if t1 <= store.ts_ms[r[0]] < t2]
    assert [off for off, _ in want] == store.bursts[1]
    assert rows_of(load(spark, store.paths, start_timestamp=t1, end_timestamp=t2)) == want
    # both kinds together: the intersection
    got = rows_of(load(spark, store.paths, start_timestamp=t1, end_offset=offs[2000]))
    assert got == [r for r in store.records if store.ts_ms[r[0]] >= t1 and r[0] < offs[2000]]


def test_max_partition_bytes_splits_segments_without_loss_or_duplicates(spark, store):
    step = 20_000  # not a divisor of the segment size: split points fall inside records
    seg = [start for start, _, _ in store.segments]
    lo, hi = seg[1] + 12_345, seg[6] + 30_000  # seven segments, cut inside records at both ends
    df = load(
        spark,
        store.paths,
        max_partition_bytes=step,
        batch_records=64,
        start_offset=lo,
        end_offset=hi,
    )
    expected_ranges = [
        (x, min(x + step, start + size, hi))
        for start, size, _ in store.segments
        for x in range(max(lo, start), min(start + size, hi), step)
    ]
    assert df.rdd.getNumPartitions() == len(expected_ranges) >= 3 * 5
    per_partition = df.rdd.mapPartitions(
        lambda rows: [[(r.offset, bytes(r.body)) for r in rows]]
    ).collect()
    assert len(per_partition) == len(expected_ranges)
    for (a, b), rows in zip(expected_ranges, per_partition, strict=True):
        assert rows == sorted(rows)  # offset order within a partition
        assert all(a <= off < b for off, _ in rows)
    assert [row for rows in per_partition for row in rows] == [
        r for r in store.records if lo <= r[0] < hi
    ]


def test_bad_option_fails_at_planning(spark, store):
    with pytest.raises(Exception, match="batch_bytes='many'") as e:
        load(spark, store.paths, batch_bytes="many")  # fails in load(): no job runs
    assert named(spark, e.value, "ValueError")
    with pytest.raises(Exception, match=r"unknown option startoffset \(did you mean start_offset"):
        load(spark, store.paths, startOffset=5)
    with pytest.raises(Exception, match=r"spark\.readStream only"):
        load(spark, store.paths, max_bytes_per_trigger="1m").count()


# Every option: (name, a bad value, what its error must say is accepted, a good value, the reads
# that take it). Bad values fail at load(), for spark.read and spark.readStream alike.
BOTH, BATCH, STREAM = ("read", "readStream"), ("read",), ("readStream",)
OPTIONS = [
    ("paths", os.pathsep, "directories joined by", None, BOTH),
    ("start_offset", "first", '"earliest" or "latest"', "earliest", BOTH),
    ("end_offset", "-1", 'an offset >= 0 or "latest"', "latest", BATCH),
    ("start_timestamp", "yesterday", "milliseconds since the epoch", "0", BOTH),
    ("end_timestamp", "1.5", "milliseconds since the epoch", str(2**62), BATCH),
    ("max_partition_bytes", "1k", "at least 4096 (4k)", "64k", BOTH),
    ("batch_bytes", "lots", "64k, 64m, 1g", "1m", BOTH),
    ("batch_records", "0", "an integer >= 1", "1_000", BOTH),
    ("fail_on_data_loss", "maybe", '"true" or "false"', "false", BOTH),
    ("pushdown", "maybe", '"true" or "false"', "true", BATCH),
    ("max_records_per_trigger", "none", "an integer >= 1", "500", STREAM),
    ("max_bytes_per_trigger", "1.5m", "64k, 64m, 1g", "64KiB", STREAM),
    ("wait_ms", "-1", "milliseconds, an integer >= 0", "50", STREAM),
    ("tier_url", "nope", "expected a URL: s3://bucket/prefix", None, BOTH),
    ("tier_cache_dir", "cache", "expected an absolute directory", None, BOTH),
]
# Good values of these need a store with a tier: tests/test_spark_tier.py reads with them.
WITH_A_TIER = ("tier_url", "tier_cache_dir")


def _reader(spark, kind, **options):
    reader = getattr(spark, kind).format("rmqlog")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader


def test_every_option_is_tested():
    from rmqlog.spark.options import _KNOWN

    assert {name for name, *_ in OPTIONS} | {"path"} == set(_KNOWN)


@pytest.mark.parametrize("kind", BOTH)
@pytest.mark.parametrize(("name", "bad", "accepted"), [o[:3] for o in OPTIONS])
def test_bad_value_of_every_option_fails_at_load(spark, store, kind, name, bad, accepted):
    """Whether or not this kind of read takes the option, a bad value fails in load(), with the
    option, the value and what is accepted; never PySpark's UnboundLocalError."""
    reader = _reader(spark, kind, **{name: bad})
    with pytest.raises(Exception) as e:  # Spark wraps the ValueError in an AnalysisException
        reader.load() if name == "paths" else reader.load(store.paths)
    msg = str(e.value)
    assert f"rmqlog: option {name}={bad!r} is not valid" in msg, msg
    assert accepted in msg, msg
    assert named(spark, e.value, "ValueError") and "UnboundLocalError" not in msg


@pytest.mark.parametrize(
    ("kind", "name"), [("read", "max_partition_bytes"), ("readStream", "max_bytes_per_trigger")]
)
def test_a_size_of_2_63_or_more_fails_at_load(spark, store, kind, name):
    """Both readers refuse a size past a Java long, with the same message."""
    bad = str(1 << 64)
    with pytest.raises(Exception) as e:
        _reader(spark, kind, **{name: bad}).load(store.paths)
    msg = str(e.value)
    assert f"rmqlog: option {name}={bad!r} is not valid" in msg, msg
    assert "at most 9223372036854775807" in msg, msg


@pytest.mark.parametrize("kind", BOTH)
def test_a_folder_without_a_store_fails_at_load(spark, tmp_path, kind):
    """Not an empty DataFrame: the path holds no store."""
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "empty", tmp_path / "nope"):
        with pytest.raises(Exception) as e:
            _reader(spark, kind).load(str(path))
        msg = str(e.value)
        assert "StoreNotFoundError" in msg and f"no rmqlog store at {path}" in msg, msg
        # Spark's own exception (AnalysisException, or IllegalArgumentException from the JVM
        # reader's load()), never a Py4J error wrapping a Java one.
        assert type(e.value).__module__.startswith("pyspark.errors"), type(e.value)
    assert list((tmp_path / "empty").iterdir()) == []


@pytest.mark.parametrize("kind", BOTH)
def test_unknown_option_fails_at_load(spark, store, kind):
    with pytest.raises(Exception, match=r"unknown option batchsize; accepted options: path"):
        _reader(spark, kind, batchSize="10").load(store.paths)
    with pytest.raises(Exception, match=r"no store given"):
        _reader(spark, kind).load()


@pytest.mark.parametrize("kind", BOTH)
@pytest.mark.parametrize(
    ("name", "good", "kinds"), [(o[0], o[3], o[4]) for o in OPTIONS if o[0] not in WITH_A_TIER]
)
def test_good_value_of_every_option_loads(spark, store, kind, name, good, kinds):
    """A good value loads, for the reads that take the option and (refused later, see below) for
    the others: load() cannot tell a batch read from a stream."""
    if name == "paths":
        df = _reader(spark, kind, paths=store.paths).load()
    else:
        df = _reader(spark, kind, **{name: good}).load(store.paths)
    assert df.isStreaming == (kind == "readStream")
    assert df.columns == ["offset", "timestamp", "body", "segment", "key", "headers"]


def test_batch_read_with_every_batch_option(spark, store):
    good = {name: good for name, _, _, good, kinds in OPTIONS if "read" in kinds and good}
    df = _reader(spark, "read", **good).load(store.paths)
    assert rows_of(df) == store.records


def test_stream_with_every_stream_option(spark, store, tmp_path):
    good = {name: good for name, _, _, good, kinds in OPTIONS if "readStream" in kinds and good}
    got: list[tuple[int, bytes]] = []
    sizes: list[int] = []

    def collect(df, _batch_id):
        rows = [(r.offset, bytes(r.body)) for r in df.collect()]
        sizes.append(len(rows))
        got.extend(rows)

    query = (
        _reader(spark, "readStream", **good)
        .load(store.paths)
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(got) == store.records
    assert len(sizes) >= len(store.records) // 500 and max(sizes) <= 500


@pytest.mark.parametrize("name", ["max_records_per_trigger", "max_bytes_per_trigger"])
def test_trigger_limit_on_a_batch_read_fails_when_planned(spark, store, name):
    df = _reader(spark, "read", **{name: "100"}).load(store.paths)  # load() cannot know
    with pytest.raises(Exception) as e:
        df.count()
    msg = str(e.value)
    assert f"rmqlog: option {name} applies to spark.readStream only" in msg, msg
    assert "UnboundLocalError" not in msg


@pytest.mark.parametrize("name", ["end_offset", "end_timestamp"])
def test_end_on_a_stream_fails_the_query_with_its_message(spark, store, tmp_path, name):
    """Raising in streamReader() would end in PySpark's UnboundLocalError (its stream runner
    cleans up a reader it never got): the query fails with the option's message instead."""
    df = _reader(spark, "readStream", **{name: "100"}).load(store.paths)  # load() cannot know
    query = (
        df.writeStream.format("memory")
        .queryName(f"refused_{name}")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    with pytest.raises(Exception) as e:
        query.awaitTermination(120)
    msg = str(e.value)
    assert f"rmqlog: option {name} applies to spark.read only" in msg, msg
    assert "UnboundLocalError" not in msg
    assert not query.isActive


WRITER = textwrap.dedent(
    """
    import os, sys, time
    from rmqlog import CommitLog
    dirs, stop = sys.argv[1], sys.argv[2]
    log = CommitLog(dirs, segment_size=65536, flush_interval_ms=5)
    i = 0
    while not os.path.exists(stop):
        log.append_batch([f"w{i + k:07d}-".encode() * (1 + (i + k) % 9) for k in range(5)])
        i += 5
        if i == 500:
            print("ready", flush=True)
        time.sleep(0.004)
    log.close()
    print(i, flush=True)
    """
)


def test_a_dataframe_whose_records_retention_deleted_follows_fail_on_data_loss(spark, tmp_path):
    """A DataFrame keeps its range; when retention deletes part of it before a later query, that
    query fails with DataLossError, or with fail_on_data_loss=false reads what is left."""
    dirs = [str(tmp_path / "d0")]
    with CommitLog(dirs, segment_size=SEG) as log:
        first = log.append_batch([bytes(1000)] * 300)
        strict = load(spark, dirs)
        lenient = load(spark, dirs, fail_on_data_loss="false")
        assert strict.count() == lenient.count() == len(first)
        log.append_batch([bytes(1000)] * 100)
        head = log.segments()[1].start_offset
        assert log.truncate_before(head) == head
        with pytest.raises(Exception, match="DataLossError") as e:
            strict.count()
        assert "fail_on_data_loss" in str(e.value)
        assert sorted(r.offset for r in lenient.select("offset").collect()) == [
            o for o in first if o >= head
        ]


def test_read_while_another_process_appends(spark, tmp_path):
    """A read planned while a writer appends returns a consistent prefix of the log, no error."""
    dirs = os.pathsep.join(str(tmp_path / f"d{i}") for i in range(3))
    stop = tmp_path / "stop"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, dirs, str(stop)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout.readline().strip() == "ready"
        df = load(spark, dirs, batch_records=50)
        first = df.collect()
        assert df.count() == len(first)  # a DataFrame keeps its plan: the same snapshot
        second = load(spark, dirs).collect()  # planned again: a longer prefix
    finally:
        stop.touch()
        out, _ = writer.communicate(timeout=60)
    assert writer.returncode == 0
    written = int(out.split()[-1])
    with CommitLog(dirs, read_only=True) as log:
        records = [(off, bytes(body)) for off, body in log.scan()]
    assert len(records) == written
    for got in (first, second):
        got = sorted((r.offset, bytes(r.body)) for r in got)
        assert 500 <= len(got) < written  # the writer went on after the read
        assert got == records[: len(got)]
    assert len(second) > len(first)


# ---------------------------------------------------------------------------------------------
# the body UDF


def test_body_udf_on_spark(spark_session, store):
    from pyspark.sql import functions as F

    sample = store.offsets[::37]
    bad = [store.offsets[5] + 1, store.max_offset + 10_000, None]
    df = spark_session.createDataFrame([(o,) for o in sample + bad], "o BIGINT")
    got = dict(
        (r.o, r.b) for r in df.select("o", rs.body_udf(store.paths)("o").alias("b")).collect()
    )
    bodies = dict(store.records)
    assert {o: bytes(got[o]) for o in sample} == {o: bodies[o] for o in sample}
    assert [got[o] for o in bad] == [None, None, None]
    # joined to the data source: the lookup gives the same bodies as the scan
    joined = load(spark_session, store.paths).select(
        F.col("body"), rs.body_udf(store.dirs)(F.col("offset")).alias("looked_up")
    )
    assert joined.where("body <> looked_up OR looked_up IS NULL").count() == 0
    strict = df.select(rs.body_udf(store.paths, strict=True)("o"))
    with pytest.raises(Exception, match=r"InvalidOffsetError|OffsetOutOfRangeError|null offset"):
        strict.collect()


def test_lookup_bodies_counts_nulls_refreshes_and_drops_idle(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    rs._drop_idle(idle=-1)
    with CommitLog(dirs, segment_size=SEG) as log:
        offs = log.append_batch([b"one", b"two"])
        rs.body_udf_nulls.clear()
        assert rs.lookup_bodies(dirs, [offs[1], offs[0] + 3, 10**9, None, float("nan")]) == [
            b"two",
            None,
            None,
            None,
            None,
        ]
        assert rs.body_udf_nulls == {"invalid_offset": 1, "out_of_range": 1, "null_offset": 2}
        key = rs.Store(tuple(dirs))
        cached = rs._cache[key].log
        assert cached.read_only
        # an offset past the cached max_offset: refreshed, found
        later = log.append(b"three")
        assert rs.lookup_bodies(os.pathsep.join(dirs), [later]) == [b"three"]
        assert rs._cache[key].log is cached  # same open log, refreshed
        with pytest.raises(OffsetOutOfRangeError):
            rs.lookup_bodies(dirs, [later + 1000], strict=True)
        with pytest.raises(ValueError, match="null offset"):
            rs.lookup_bodies(dirs, [None], strict=True)
        # idle logs are closed and reopened on the next use
        assert rs._drop_idle(now=time.monotonic() + rs.IDLE_SECONDS - 5) == 0
        assert rs._drop_idle(now=time.monotonic() + rs.IDLE_SECONDS + 1) == 1
        assert cached.closed and key not in rs._cache
        assert rs.lookup_bodies(dirs, [offs[0]]) == [b"one"]
        assert rs._cache[key].log is not cached
    rs._drop_idle(idle=-1)


# ---------------------------------------------------------------------------------------------
# streaming: the reader's planning without Spark, then a real query


def test_stream_reader_offsets_limits_and_data_loss(tmp_path):
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

    dirs = [str(tmp_path / f"d{i}") for i in range(3)]
    with CommitLog(dirs, segment_size=SEG) as log:
        offs = log.append_batch([bytes(200)] * 1000)  # 232-byte records, ~282 per segment
        src = rs.RmqlogDataSource({"path": os.pathsep.join(dirs), "max_records_per_trigger": "100"})
        sr = src.streamReader(src.schema())
        assert sr.getDefaultReadLimit() == ReadMaxRows(100)
        start = sr.initialOffset()
        assert start == {"offset": 0}
        assert sr.latestOffset(start, sr.getDefaultReadLimit()) == {"offset": offs[100]}
        assert sr.latestOffset(start, ReadMaxRows(7)) == {"offset": offs[7]}
        # bytes: rounded up to the next record boundary (one record at least)
        assert sr.latestOffset(start, ReadMaxBytes(1000)) == {"offset": offs[5]}
        assert sr.latestOffset(start, ReadMaxBytes(1)) == {"offset": offs[1]}
        assert sr.latestOffset(start, ReadAllAvailable()) == {"offset": log.max_offset}
        assert sr.latestOffset({"offset": log.max_offset}, ReadMaxRows(7)) == {
            "offset": log.max_offset
        }
        # new records appear after refresh(); Trigger.AvailableNow pins the target
        sr.prepareForTriggerAvailableNow()
        target = log.max_offset
        log.append(b"after")
        assert sr.latestOffset({"offset": target}, ReadAllAvailable()) == {"offset": target}
        sr._target = None
        assert sr.latestOffset({"offset": target}, ReadAllAvailable())["offset"] > target
        parts = sr.partitions({"offset": offs[10]}, {"offset": offs[900]})
        assert parts[0].lo == offs[10] and parts[-1].hi == offs[900] and len(parts) >= 3
        assert sr.partitions({"offset": 5}, {"offset": 5}) == []
        # the reader is shipped to executors: it must pickle without its open log
        import pickle

        assert pickle.loads(pickle.dumps(sr))._log is None
        # retention deletes the head segment before the query read it
        assert log.truncate_before(SEG) == SEG
        end = sr.latestOffset({"offset": 0}, ReadAllAvailable())
        assert sr._log.min_offset == SEG  # the follower saw it through refresh()
        with pytest.raises(rs.DataLossError, match="fail_on_data_loss"):
            sr.partitions({"offset": 0}, end)
        lenient = rs.RmqlogDataSource(
            {"path": os.pathsep.join(dirs), "fail_on_data_loss": "false"}
        ).streamReader(rs.SCHEMA)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            parts = lenient.partitions({"offset": 0}, end)
        assert any("skipping" in str(w.message) for w in caught)
        assert parts[0].lo == SEG and parts[-1].hi == end["offset"]
        # a batch read asked for deleted offsets fails the same way at planning
        batch = rs.RmqlogReader(rs.parse_options({"path": dirs[2], "start_offset": "0"}))
        with pytest.raises(rs.DataLossError, match="below the log's min_offset"):
            batch.partitions()
        for p in (sr, lenient):
            p.stop()
            assert p._log is None


def test_stream_trigger_with_nothing_new_waits_for_the_next_append(tmp_path):
    """latestOffset with no new record waits up to wait_ms, woken by the append (made here by a
    writer thread of this process, seen through the store's control page as from any process)."""
    dirs = [str(tmp_path / "d0")]
    with CommitLog(dirs, segment_size=SEG) as log:
        log.append(b"first")
        end = log.max_offset
        for wait_ms, appends in [("0", False), ("200", False), ("20000", True)]:
            src = rs.RmqlogDataSource({"path": dirs[0], "wait_ms": wait_ms})
            sr = src.streamReader(src.schema())
            sr.initialOffset()
            timer = threading.Timer(0.3, log.append, (b"next",)) if appends else None
            if timer:
                timer.start()
            t = time.monotonic()
            latest = sr.latestOffset({"offset": end}, None)["offset"]
            took = time.monotonic() - t
            if timer:
                timer.join()
                assert latest > end, "the trigger waited for the append and planned it"
                assert took < 15, took  # woken by it, not by the 20 s limit
                end = latest
            else:
                assert latest == end
                assert took >= int(wait_ms) / 1000 * 0.9, (wait_ms, took)
            sr.stop()


def test_stopping_a_stream_whose_trigger_waits_returns_at_once(spark, tmp_path):
    """query.stop() while the trigger waits for an append (wait_ms 60 s, nothing appended) ends
    the query at once, not when the wait runs out. (The JVM reader's native wait cannot see the
    interrupt stop() sends: it waited out wait_ms.)"""
    dirs = [str(tmp_path / "d0")]
    with CommitLog(dirs, segment_size=SEG) as log:
        log.append(b"only")
    query = (
        spark.readStream.format("rmqlog")
        .option("wait_ms", "60000")
        .load(dirs[0])
        .writeStream.format("memory")
        .queryName(f"waiting_{reader_of(spark)}")
        .start()
    )
    try:
        deadline = time.monotonic() + 60
        while not any(p["numInputRows"] for p in query.recentProgress):
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, "the stream delivered nothing"
            time.sleep(0.1)
        time.sleep(1)  # the next trigger is waiting by now
    finally:
        t = time.monotonic()
        query.stop()
        took = time.monotonic() - t
    assert took < 10, f"stop() took {took:.1f} s: it waited for the trigger's wait_ms"
    assert [bytes(r.body) for r in spark.table(f"waiting_{reader_of(spark)}").collect()] == [
        b"only"
    ]


def test_streaming_data_loss_fails_the_query_or_is_skipped(spark, tmp_path):
    """Retention deletes records a stopped query had not read: its restart fails, unless
    fail_on_data_loss is false, then it goes on from min_offset."""
    dirs = os.pathsep.join(str(tmp_path / f"d{i}") for i in range(3))
    checkpoint = str(tmp_path / "checkpoint")
    got: list[int] = []

    def run(**options):
        reader = spark.readStream.format("rmqlog")
        for k, v in options.items():
            reader = reader.option(k, v)
        query = (
            reader.load(dirs)
            .writeStream.foreachBatch(lambda df, _: got.extend(r.offset for r in df.collect()))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(120)
        except Exception:  # a failed query raises here too: query.exception() has the error
            pass
        return query

    with CommitLog(dirs, segment_size=SEG) as log:
        first = log.append_batch([bytes(500)] * 100)
        assert run().exception() is None and got == first
        later = log.append_batch([bytes(500)] * 1000)  # ~8 segments the query has not read
        cut = log.truncate_before(later[500])
        assert first[-1] < later[0] < cut <= later[500]
        failed = run()
        assert failed.exception() is not None
        assert "DataLossError" in str(failed.exception())
        assert "fail_on_data_loss" in str(failed.exception())
        assert got == first  # nothing delivered by the failed run
        assert run(fail_on_data_loss="false").exception() is None
        assert got == first + [off for off in later if off >= cut]


def test_streaming_query_exactly_once_across_restart(spark, tmp_path):
    dirs = os.pathsep.join(str(tmp_path / f"d{i}") for i in range(3))
    checkpoint = str(tmp_path / "checkpoint")
    batches: dict[int, list[tuple[int, bytes]]] = {}  # the sink: idempotent by batch id
    deliveries: list[tuple[int, int, list[tuple[int, bytes]]]] = []  # (run, batch id, rows)
    run = [1]
    first_batch = threading.Event()

    def collect(df, batch_id):
        rows = [(r.offset, bytes(r.body)) for r in df.collect()]
        deliveries.append((run[0], batch_id, rows))
        batches[batch_id] = rows
        first_batch.set()

    def start():
        return (
            spark.readStream.format("rmqlog")
            .option("max_records_per_trigger", "400")
            .load(dirs)
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="200 milliseconds")
            .start()
        )

    def wait_for(log, query, timeout=90):
        want = [(off, bytes(body)) for off, body in log.scan()]
        deadline = time.monotonic() + timeout
        while sum(map(len, batches.values())) < len(want) and time.monotonic() < deadline:
            assert query.exception() is None, query.exception()
            time.sleep(0.2)
        return want

    def produce(log, n, tag):
        for i in range(0, n, 10):
            log.append_batch([f"{tag}{i + k}".encode() * 20 for k in range(10)])
            time.sleep(0.01)

    with CommitLog(dirs, segment_size=SEG, flush_interval_ms=5) as log:
        log.append_batch([f"s{i}".encode() * 20 for i in range(300)])
        query = start()
        try:
            assert first_batch.wait(90), query.exception()
            producer = threading.Thread(target=produce, args=(log, 1500, "p"))
            producer.start()  # appends while the query runs
            producer.join()
            want = wait_for(log, query)
        finally:
            query.stop()
        seen_first = sorted(r for rows in batches.values() for r in rows)
        assert seen_first == want
        assert len(batches) >= 5 and max(map(len, batches.values())) <= 400
        ids_first = set(batches)
        produce(log, 600, "q")  # appended while the query is down
        run[0] = 2
        query = start()
        try:
            want = wait_for(log, query)
        finally:
            query.stop()
    # a batch delivered again (replayed after the stop) has the same id and the same records
    by_id: dict[int, list] = {}
    for _, bid, rows in deliveries:
        assert by_id.setdefault(bid, rows) == rows
    # the restart went on from the checkpoint: new ids, none of the records already delivered
    new = [rows for r, bid, rows in deliveries if r == 2 and bid not in ids_first]
    assert new and min(set(batches) - ids_first) > max(ids_first)
    assert new[0][0] == want[len(seen_first)]
    assert not {off for rows in new for off, _ in rows} & {off for off, _ in seen_first}
    seen = [r for _, rows in sorted(batches.items()) for r in rows]
    assert len(seen) == len({off for off, _ in seen})  # no record twice
    assert sorted(seen) == want and len(want) == 2400  # none lost
    assert seen == sorted(seen)  # batches follow the log in order


# ---------------------------------------------------------------------------------------------
# local_session


@pytest.mark.parametrize(
    ("master", "cores"),
    [
        ("local", 1),
        ("local[1]", 1),
        ("local[2]", 2),
        ("local[16]", 16),
        ("local[4, 3]", 4),  # with maxFailures
        ("local[*]", len(os.sched_getaffinity(0))),
        ("local[*,2]", len(os.sched_getaffinity(0))),
        ("local-cluster[2,1,1024]", 2),
        ("local-cluster[ 3 , 2 , 512 ]", 6),
        ("spark://host:7077", None),
        ("yarn", None),
        ("local[x]", None),
    ],
)
def test_local_cores_of_a_master(master, cores):
    from rmqlog.spark.session import local_cores

    assert local_cores(master) == cores


def test_local_session_sizes_shuffle_partitions_to_its_cores_unless_conf_sets_them(spark_session):
    # conftest.py's session sets none: local[2] has 2 (Spark's default is 200).
    from rmqlog.spark.session import SHUFFLE_PARTITIONS

    master = spark_session.sparkContext.master
    assert spark_session.conf.get(SHUFFLE_PARTITIONS) == "2"
    try:
        again = rs.local_session(master, "rmqlog-test-spark", conf={SHUFFLE_PARTITIONS: "7"})
        assert again is spark_session  # the live session, given conf: the caller's value wins
        assert spark_session.conf.get(SHUFFLE_PARTITIONS) == "7"
    finally:
        assert rs.local_session(master, "rmqlog-test-spark") is spark_session
    assert spark_session.conf.get(SHUFFLE_PARTITIONS) == "2"
