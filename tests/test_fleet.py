"""Fleets: many stores, each tiering to its own prefix of one bucket (one store per machine), read
as one table: ``rmqlog.tier_stores`` finds them, ``rmqlog.to_arrow`` and ``rmqlog.scan_batches``
read them with a ``store`` column, and so does Spark, on a local-cluster, with filters on
``store`` choosing the stores planned and offset filters applied per store.

Each store is written by a writer process of its own (they run at once), which waits for its
sealed segments to be uploaded and says which records it acknowledged. A reader of the tier URLs
reads the sealed segments: a store's active segment is local only.
"""

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import _object_stores
import pytest

import rmqlog
from rmqlog import StoreNotFoundError

pa = pytest.importorskip("pyarrow", reason="fleet reads build Arrow tables (make develop)")

NAMES = ("db-1", "web-1", "web-2")
SEG = 64 * 1024

WRITER = """
import json, sys, time
from rmqlog import CommitLog
name, dirs, url, options, records = sys.argv[1:6]
log = CommitLog(dirs.split(","), segment_size=65536, tier_url=url, tier_options=json.loads(options))
acked = []
for first in range(0, int(records), 250):
    bodies = [b"%s:%06d:" % (name.encode(), i) + b"x" * (i % 300) for i in range(first, first+250)]
    acked += zip(log.append_batch(bodies), (b.decode() for b in bodies))
deadline = time.monotonic() + 60
while log.tier_status()["pending_segments"]:
    assert time.monotonic() < deadline, log.tier_status()
    time.sleep(0.05)
remote = [s for s in log.segments() if s.remote]
remote_end = max(s.start_offset + s.size for s in remote)
log.close()
print(json.dumps({"url": url, "remote_end": remote_end, "segments": len(remote), "records": acked}))
"""


@dataclass
class Fleet:
    root: str  # the prefix the stores publish under
    options: dict[str, str]
    records: dict[str, list[tuple[int, str]]]  # store URL -> its uploaded records (offset, body)
    segments: dict[str, int]  # store URL -> how many segments it uploaded
    acked: dict[str, list[tuple[int, str]]]  # store URL -> every record it acknowledged

    def url(self, name: str) -> str:
        return f"{self.root}/{name}"

    def rows(self, names=NAMES) -> list[tuple[str, int, str]]:
        urls = {self.url(n) for n in names}
        return sorted((u, o, b) for u, recs in self.records.items() if u in urls for o, b in recs)


def _writers(tmp_path, tier, root: str, names, records: int = 1000) -> list[dict]:
    """Writes stores ``names`` (each under ``root/<name>``, its directories in ``tmp_path``) at
    once, a process each (appending to what a store holds); returns what each said: its ``url``,
    the ``records`` it acknowledged (offset, body), ``remote_end`` and ``segments`` uploaded."""
    procs = []
    for i, name in enumerate(names):
        dirs = f"{tmp_path / name / 'd0'},{tmp_path / name / 'd1'}"
        args = [name, dirs, f"{root}/{name}", json.dumps(tier.options), str(records + 250 * i)]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", WRITER, *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    said = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        said.append(json.loads(out))
    return said


@pytest.fixture(params=["s3", "file"])
def fleet(request, tmp_path):
    """Three stores written at once by three processes, each with its own prefix of one tier."""
    tier = request.getfixturevalue("s3_bucket" if request.param == "s3" else "file_tier")
    records, segments, acked = {}, {}, {}
    for said in _writers(tmp_path, tier, tier.url, NAMES):
        sealed = [(o, b) for o, b in said["records"] if o < said["remote_end"]]
        assert len(sealed) >= 250, said["remote_end"]
        records[said["url"]] = sealed
        segments[said["url"]] = said["segments"]
        acked[said["url"]] = said["records"]
    fleet = Fleet(tier.url, dict(tier.options), records, segments, acked)
    fleet.tier = tier  # type: ignore[attr-defined]  (a stream test writes more)
    return fleet


def _rows(table) -> list[tuple[str, int, str]]:
    d = table.to_pydict()
    return sorted(zip(d["store"], d["offset"], (bytes(b).decode() for b in d["body"]), strict=True))


def test_tier_stores_finds_the_stores_under_a_prefix_or_a_glob(fleet):
    opts = fleet.options or None
    every = [fleet.url(n) for n in NAMES]
    assert rmqlog.tier_stores(fleet.root, opts) == every
    assert rmqlog.tier_stores(fleet.root + "/", opts) == every
    assert rmqlog.tier_stores(f"{fleet.root}/web-*", opts) == every[1:]
    assert rmqlog.tier_stores(f"{fleet.root}/?b-1", opts) == every[:1]
    assert rmqlog.tier_stores(fleet.url("web-2"), opts) == [fleet.url("web-2")]  # itself
    with pytest.raises(StoreNotFoundError, match=r'directly under .* matching "cache-\*"'):
        rmqlog.tier_stores(f"{fleet.root}/cache-*", opts)
    with pytest.raises(StoreNotFoundError, match="no rmqlog store publishes there or directly"):
        rmqlog.tier_stores(f"{fleet.root}/web-1/manifest", opts)  # a store's own objects


def test_to_arrow_reads_every_store_with_a_store_column(fleet):
    table = rmqlog.to_arrow(fleet.root, tier_options=fleet.options or None)
    assert table.column_names == ["offset", "timestamp", "body", "store"]
    assert table.schema.field("store").type == pa.string()
    assert _rows(table) == fleet.rows()
    # a glob, and a list of URLs, read those stores only
    webs = rmqlog.to_arrow(f"{fleet.root}/web-*", tier_options=fleet.options or None)
    assert _rows(webs) == fleet.rows(("web-1", "web-2"))
    two = [fleet.url("db-1"), fleet.url("web-2")]
    assert _rows(rmqlog.to_arrow(two, tier_options=fleet.options or None)) == fleet.rows(
        ("db-1", "web-2")
    )


def test_a_range_bounds_each_store_and_columns_place_the_store(fleet):
    lo, hi = 5000, 40000  # each store's own offsets; 5000 starts no record of any of them
    batches = list(
        rmqlog.scan_batches(
            fleet.root,
            lo,
            hi,
            columns=["store", "offset", "body"],
            body="binary",
            tier_options=fleet.options or None,
        )
    )
    assert batches and all(b.schema.names == ["store", "offset", "body"] for b in batches)
    got = sorted(
        (s, o, b.decode())
        for batch in batches
        for s, o, b in zip(*batch.to_pydict().values(), strict=True)
    )
    assert got == [r for r in fleet.rows() if lo <= r[1] < hi]
    assert {s for s, _, _ in got} == {fleet.url(n) for n in NAMES}
    # one store's read is unchanged: no store column
    one = rmqlog.to_arrow(fleet.url("web-1"), tier_options=fleet.options or None)
    assert one.column_names == ["offset", "timestamp", "body"]


def test_a_list_mixing_urls_and_directories_is_refused(fleet, tmp_path):
    with pytest.raises(ValueError, match="is a directory"):
        rmqlog.to_arrow([fleet.url("web-1"), str(tmp_path / "web-1" / "d0")])


@pytest.fixture(scope="module", params=["s3", "file"])
def two_stores(request, tmp_path_factory):
    """Two small stores, ``a`` and ``b``, each with one segment uploaded under its own prefix of
    one tier: written in this process, side by side (about half a second, once per module and
    tier, where ``fleet`` takes seconds). The tier (``url``, ``options``, ``kind``)."""
    root = tmp_path_factory.mktemp("two_stores")
    server = request.getfixturevalue("s3_server") if request.param == "s3" else None
    if server is not None:
        server.start()  # as s3_bucket: running, whatever a test before stopped
        tier = _object_stores.S3Tier(server)
    else:
        tier = _object_stores.FileTier(root / "tier")
    opts = tier.options or None
    logs = [
        rmqlog.CommitLog(root / n, segment_size=4096, tier_url=f"{tier.url}/{n}", tier_options=opts)
        for n in ("a", "b")
    ]
    offsets = {}
    try:
        for n, log in zip("ab", logs, strict=True):  # 3 segments each, 2 of them sealed
            offsets[n] = log.append_batch([f"{n}:{i:03d}:".encode() * 10 for i in range(100)])
        deadline = time.monotonic() + 60
        while any(log.tier_status()["pending_segments"] for log in logs):
            assert time.monotonic() < deadline, [log.tier_status() for log in logs]
            time.sleep(0.01)
        ends = [max(s.start_offset + s.size for s in log.segments() if s.remote) for log in logs]
    finally:
        for log in logs:
            log.close()
    # how many records each store uploaded: what a reader of its URL reads
    tier.uploaded = {n: sum(o < end for o in offsets[n]) for n, end in zip("ab", ends, strict=True)}
    yield tier
    if server is not None:
        server.start()
        tier.drop()


def _spark_options(tier) -> dict[str, str]:
    return {f"tier.{k}": v for k, v in tier.options.items()}


def test_a_list_naming_one_store_twice_is_refused(two_stores):
    """A list that names one store twice (the same URL, another spelling of it, or a prefix that
    holds it too) is the caller's mistake: a ValueError naming the store, from ``to_arrow``,
    ``scan_batches`` and the Spark source alike, before anything is read. (A list of one URL
    twice was opened as two directories named after the URL under the current directory; a store
    spelled twice beside another store was read once, silently.)"""
    rs = pytest.importorskip("rmqlog.spark")
    tier, opts = two_stores, two_stores.options or None
    a, b = f"{tier.url}/a", f"{tier.url}/b"
    other = a.replace("s3://", "s3a://", 1) if tier.kind == "s3" else f"{tier.url}/b/../a"
    once = "; name each store once"
    for urls, message in [
        ([a, a], f"the list of stores names {a!r} twice{once}"),
        ([a, b, a], f"names {a!r} twice{once}"),
        ([a, other, b], f"names {a!r} twice (as {a!r} and as {other!r}){once}"),
        ([b, a + "/", a], f"names {a + '/'!r} twice (as {a + '/'!r} and as {a!r}){once}"),
        ([tier.url, b], f"the store {b!r} twice: by {tier.url!r} (which holds it) and by {b!r}"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            rmqlog.to_arrow(urls, tier_options=opts)
        with pytest.raises(ValueError, match=re.escape(message)):
            next(rmqlog.scan_batches(urls, tier_options=opts))
        with pytest.raises(ValueError, match=re.escape(message)):  # spark.read ... .load(urls)
            rs.RmqlogDataSource({"path": json.dumps(urls), **_spark_options(tier)})


def test_the_store_column_keeps_each_url_as_spelled(two_stores):
    """The ``store`` column (and a Spark fleet's partitions, which its filters on ``store``
    match) holds each store's URL as the list spells it: a trailing slash kept (it was dropped),
    ``s3a://`` kept. (The stores under a prefix are the prefix as spelled, then their names.)"""
    rs = pytest.importorskip("rmqlog.spark")
    tier, opts = two_stores, two_stores.options or None
    a = f"{tier.url}/a/"
    b = f"{tier.url}/b".replace("s3://", "s3a://", 1)  # as is for a file:// tier
    each = {a: tier.uploaded["a"], b: tier.uploaded["b"]}
    table = rmqlog.to_arrow([a, b], columns=["store", "offset"], tier_options=opts)
    counts = {u: table["store"].to_pylist().count(u) for u in (a, b)}
    assert counts == each and table.num_rows == sum(each.values()) > 0
    src = rs.RmqlogDataSource({"path": json.dumps([b, a]), **_spark_options(tier)})
    assert src.fleet == tuple(sorted((a, b)))
    reader = src.reader(src.schema())
    parts = reader.partitions()
    spark_rows = [s for p in parts for batch in reader.read(p) for s in batch["store"].to_pylist()]
    assert {p.store for p in parts} == {a, b}
    assert {u: spark_rows.count(u) for u in (a, b)} == each


# ---------------------------------------------------------------------------------------------
# Spark: a local-cluster (executors in JVMs of their own) reads the fleet from the bucket alone


def _spark_read(spark, fleet, **options):
    reader = spark.read.format("rmqlog")
    for k, v in {**options, **{f"tier.{k}": v for k, v in fleet.options.items()}}.items():
        reader = reader.option(k, v)
    return reader


def _spark_rows(df) -> list[tuple[str, int, str]]:
    return sorted((r.store, r.offset, bytes(r.body).decode()) for r in df.collect())


@pytest.mark.parametrize("fleet", ["s3"], indirect=True)
def test_a_cluster_reads_the_fleet_as_one_table(spark_cluster_session, fleet):
    df = _spark_read(spark_cluster_session, fleet).load(fleet.root)
    assert df.columns == ["offset", "timestamp", "body", "segment", "key", "headers", "store"]
    assert df.rdd.getNumPartitions() == sum(fleet.segments.values())  # one per remote segment
    assert _spark_rows(df.select("store", "offset", "body")) == fleet.rows()
    # With pushdown (each query loads anew), a filter on store plans that store's partitions
    # only; one on offset applies to each store's own log.
    web1, db1 = fleet.url("web-1"), fleet.url("db-1")
    one = _spark_read(spark_cluster_session, fleet, pushdown="true").load(fleet.root)
    one = one.filter(f"store = '{web1}'")
    assert one.rdd.getNumPartitions() == fleet.segments[web1]
    assert _spark_rows(one) == fleet.rows(("web-1",))
    two = _spark_read(spark_cluster_session, fleet, pushdown="true").load(fleet.root)
    two = two.filter(f"store IN ('{web1}', '{db1}') AND offset < {SEG}")
    assert two.rdd.getNumPartitions() == 2  # each store's first segment
    assert _spark_rows(two) == [r for r in fleet.rows(("web-1", "db-1")) if r[1] < SEG]
    # without it, the same filter reads every store's partitions and Spark filters the rows
    unpushed = df.filter(f"store = '{web1}'")
    assert unpushed.rdd.getNumPartitions() == sum(fleet.segments.values())
    assert _spark_rows(unpushed) == fleet.rows(("web-1",))
    # a glob, and a list of URLs
    webs = _spark_read(spark_cluster_session, fleet).load(f"{fleet.root}/web-*")
    assert _spark_rows(webs) == fleet.rows(("web-1", "web-2"))
    listed = _spark_read(spark_cluster_session, fleet).load([web1, db1])
    assert _spark_rows(listed) == fleet.rows(("web-1", "db-1"))
    # the store column alone
    assert df.select("store").distinct().count() == len(NAMES)


@pytest.mark.parametrize("fleet", ["s3"], indirect=True)
def test_a_fleet_stream_refuses_trigger_limits(spark_session, fleet):
    stream = spark_session.readStream.format("rmqlog").option("max_records_per_trigger", "10")
    for k, v in fleet.options.items():
        stream = stream.option(f"tier.{k}", v)
    q = stream.load(fleet.root).writeStream.format("memory").queryName("fleet_limits").start()
    try:
        with pytest.raises(Exception, match=r"apply to one store's stream; a fleet's micro-batch"):
            q.awaitTermination(60)
    finally:
        q.stop()


def test_a_single_store_schema_has_no_store_column():
    rs = pytest.importorskip("rmqlog.spark")
    from pyspark.sql.types import StringType, StructField, StructType

    with_store = StructType([*rs.SCHEMA.fields, StructField("store", StringType())])
    with pytest.raises(ValueError, match="a fleet's column: this read names one store"):
        rs.projection(with_store)
    assert rs.projection(with_store, fleet=True).columns[-1] == "store"


def test_the_fleet_example_in_the_docs_runs_as_written(tmp_path):
    """docs/tiering.md's fleet example, run as it is written, in an interpreter of its own."""
    pytest.importorskip("pyspark", reason="the example reads the fleet with Spark too")
    doc = (Path(__file__).resolve().parent.parent / "docs" / "tiering.md").read_text()
    section = doc.split("## Fleets", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    stores = ast.literal_eval(lines[0])  # the example prints a list of URLs
    assert [s.rsplit("/", 1)[1] for s in stores] == ["db-1", "web-1", "web-2"]
    counts = {d["store"].rsplit("/", 1)[1]: d["offset_count"] for d in ast.literal_eval(lines[1])}
    assert set(counts) == {"db-1", "web-1", "web-2"} and all(n > 10_000 for n in counts.values())
    assert int(lines[2]) == counts["web-1"] + counts["web-2"]
    assert any("web-2" in line and str(counts["web-2"]) in line for line in lines)  # show()
    count, partitions = map(int, lines[-1].split())
    assert partitions == 2 and 0 < count < counts["web-1"]


@pytest.mark.parametrize("fleet", ["s3"], indirect=True)
def test_a_stream_of_a_fleet_takes_new_uploads_and_new_stores(spark_session, fleet, tmp_path):
    """A stream of the prefix reads every store's uploaded records; then what a store uploads
    later, and a store that starts publishing under the prefix, from its head."""
    got: list[tuple[str, int, str]] = []

    def collect(df, _batch_id):
        got.extend(_spark_rows(df.select("store", "offset", "body")))

    stream = spark_session.readStream.format("rmqlog")
    for k, v in fleet.options.items():
        stream = stream.option(f"tier.{k}", v)
    q = (
        stream.load(fleet.root)
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        q.processAllAvailable()
        assert sorted(got) == fleet.rows()
        # web-1 writes more (its old active segment is sealed and uploaded too); web-3 starts
        said = {s["url"]: s for s in _writers(tmp_path, fleet.tier, fleet.root, ["web-1", "web-3"])}
        q.processAllAvailable()
        web1, web3 = fleet.url("web-1"), fleet.url("web-3")
        acked = {web1: fleet.acked[web1] + said[web1]["records"], web3: said[web3]["records"]}
        now = {
            u: [(u, o, b) for o, b in recs if o < said[u]["remote_end"]]
            for u, recs in acked.items()
        }
        assert len(now[web3]) >= 250 and len(now[web1]) > len(fleet.records[web1]) + 250
        others = fleet.rows(("db-1", "web-2"))
        assert len(got) == len(set(got))  # nothing read twice
        assert sorted(got) == sorted(others + now[web1] + now[web3])
    finally:
        q.stop()
    assert q.exception() is None


def test_a_fleet_s_columns_range_and_spelling_are_checked(fleet):
    opts = fleet.options or None
    with pytest.raises(ValueError, match="columns is empty"):
        rmqlog.to_arrow(fleet.root, columns=[], tier_options=opts)
    with pytest.raises(ValueError, match="columns names 'store' twice"):
        rmqlog.to_arrow(fleet.root, columns=["store", "offset", "store"], tier_options=opts)
    with pytest.raises(TypeError, match="start must be an offset"):
        rmqlog.to_arrow(fleet.root, -1, tier_options=opts)
    stores = rmqlog.to_arrow(fleet.root, columns=["store"], tier_options=opts)
    assert stores.column_names == ["store"] and stores.num_rows == len(fleet.rows())
    # past every store's end: no row, the same schema as a table with rows
    empty = rmqlog.to_arrow(fleet.root, 1 << 40, tier_options=opts)
    full = rmqlog.to_arrow(fleet.root, tier_options=opts)
    assert empty.num_rows == 0 and empty.schema == full.schema
    assert pa.concat_tables([empty, full]).num_rows == full.num_rows
    # a glob after a trailing slash, and a list of one store (that store, no store column)
    assert rmqlog.tier_stores(fleet.root + "//web-*", opts) == [
        fleet.url("web-1"),
        fleet.url("web-2"),
    ]
    one = rmqlog.to_arrow([fleet.url("db-1")], tier_options=opts)
    assert one.column_names == ["offset", "timestamp", "body"]
    assert one.num_rows == len(fleet.rows(("db-1",)))
    # one store spelled twice is refused, naming it (test_a_list_naming_one_store_twice_...)
    db1, web1 = fleet.url("db-1"), fleet.url("web-1")
    other = (
        db1.replace("s3://", "s3a://")
        if db1.startswith("s3://")
        else db1.replace("/db-1", "/web-1/../db-1")
    )
    with pytest.raises(ValueError, match=f"names {re.escape(repr(db1))} twice"):
        rmqlog.to_arrow([db1, other, web1], tier_options=opts)


@pytest.mark.parametrize("fleet", ["file"], indirect=True)
def test_a_store_deleted_after_load_follows_fail_on_data_loss(spark_session, fleet):
    """The stores are found in load(); one whose objects are deleted before the query runs fails
    it with DataLossError naming the store, or, with fail_on_data_loss=false, is skipped."""
    strict = _spark_read(spark_session, fleet).load(fleet.root)
    lenient = _spark_read(spark_session, fleet, fail_on_data_loss="false").load(fleet.root)
    gone = fleet.url("web-2")
    shutil.rmtree(gone.removeprefix("file://"))
    with pytest.raises(Exception, match=f"the fleet's store {gone} is gone"):
        strict.count()
    assert _spark_rows(lenient.select("store", "offset", "body")) == fleet.rows(("db-1", "web-1"))


@pytest.mark.parametrize("fleet", ["file"], indirect=True)
def test_a_listed_store_gone_from_a_stream_follows_fail_on_data_loss(
    spark_session, fleet, tmp_path
):
    """A stream of an explicit list of stores, restarted from its checkpoint after one store's
    objects were deleted: with fail_on_data_loss=false it goes on with the others; by default the
    load refuses the list, naming the store."""
    urls = [fleet.url("db-1"), fleet.url("web-2")]
    got: list[tuple[str, int, str]] = []

    def start(**options):
        stream = spark_session.readStream.format("rmqlog").option("paths", json.dumps(urls))
        for k, v in options.items():
            stream = stream.option(k, v)
        return (
            stream.load()
            .writeStream.foreachBatch(lambda df, _: got.extend(_spark_rows(df)))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )

    q = start(fail_on_data_loss="false")
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert sorted(got) == fleet.rows(("db-1", "web-2"))
    shutil.rmtree(urls[1].removeprefix("file://"))
    got.clear()
    q = start(fail_on_data_loss="false")
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert q.exception() is None and got == []
    with pytest.raises(Exception, match=f"no rmqlog store at {urls[1]}"):
        start()  # strict: refused at load, as a batch read's list is


@pytest.mark.parametrize("fleet", ["file"], indirect=True)
def test_a_url_open_of_a_deleted_store_refreshes_to_store_not_found(fleet):
    """A live store always has a current manifest: a refresh that finds none says the store is
    gone (a fleet's stream then applies fail_on_data_loss) instead of serving the old one."""
    url = fleet.url("db-1")
    with rmqlog.CommitLog(url, read_only=True) as log:
        assert log.refresh() == log.max_offset
        shutil.rmtree(url.removeprefix("file://"))
        with pytest.raises(rmqlog.StoreNotFoundError, match="its tier manifest is gone"):
            log.refresh()
