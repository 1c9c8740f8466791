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
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

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

    def url(self, name: str) -> str:
        return f"{self.root}/{name}"

    def rows(self, names=NAMES) -> list[tuple[str, int, str]]:
        urls = {self.url(n) for n in names}
        return sorted((u, o, b) for u, recs in self.records.items() if u in urls for o, b in recs)


@pytest.fixture(params=["s3", "file"])
def fleet(request, tmp_path):
    """Three stores written at once by three processes, each with its own prefix of one tier."""
    tier = request.getfixturevalue("s3_bucket" if request.param == "s3" else "file_tier")
    root = tier.url
    procs = []
    for i, name in enumerate(NAMES):
        dirs = f"{tmp_path / name / 'd0'},{tmp_path / name / 'd1'}"
        args = [name, dirs, f"{root}/{name}", json.dumps(tier.options), str(1000 + 250 * i)]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", WRITER, *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    records, segments = {}, {}
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        said = json.loads(out)
        sealed = [(o, b) for o, b in said["records"] if o < said["remote_end"]]
        assert len(sealed) >= 250, said["remote_end"]
        records[said["url"]] = sealed
        segments[said["url"]] = said["segments"]
    return Fleet(root, dict(tier.options), records, segments)


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
def test_a_cluster_reads_the_fleet_as_one_table(spark_cluster, fleet):
    df = _spark_read(spark_cluster, fleet).load(fleet.root)
    assert df.columns == ["offset", "timestamp", "body", "segment", "store"]
    assert df.rdd.getNumPartitions() == sum(fleet.segments.values())  # one per remote segment
    assert _spark_rows(df.select("store", "offset", "body")) == fleet.rows()
    # With pushdown (each query loads anew), a filter on store plans that store's partitions
    # only; one on offset applies to each store's own log.
    web1, db1 = fleet.url("web-1"), fleet.url("db-1")
    one = _spark_read(spark_cluster, fleet, pushdown="true").load(fleet.root)
    one = one.filter(f"store = '{web1}'")
    assert one.rdd.getNumPartitions() == fleet.segments[web1]
    assert _spark_rows(one) == fleet.rows(("web-1",))
    two = _spark_read(spark_cluster, fleet, pushdown="true").load(fleet.root)
    two = two.filter(f"store IN ('{web1}', '{db1}') AND offset < {SEG}")
    assert two.rdd.getNumPartitions() == 2  # each store's first segment
    assert _spark_rows(two) == [r for r in fleet.rows(("web-1", "db-1")) if r[1] < SEG]
    # without it, the same filter reads every store's partitions and Spark filters the rows
    unpushed = df.filter(f"store = '{web1}'")
    assert unpushed.rdd.getNumPartitions() == sum(fleet.segments.values())
    assert _spark_rows(unpushed) == fleet.rows(("web-1",))
    # a glob, and a list of URLs
    webs = _spark_read(spark_cluster, fleet).load(f"{fleet.root}/web-*")
    assert _spark_rows(webs) == fleet.rows(("web-1", "web-2"))
    listed = _spark_read(spark_cluster, fleet).load([web1, db1])
    assert _spark_rows(listed) == fleet.rows(("web-1", "db-1"))
    # the store column alone
    assert df.select("store").distinct().count() == len(NAMES)


@pytest.mark.parametrize("fleet", ["s3"], indirect=True)
def test_a_stream_of_a_fleet_is_refused_with_the_reason(spark, fleet):
    stream = spark.readStream.format("rmqlog")
    for k, v in fleet.options.items():
        stream = stream.option(f"tier.{k}", v)
    q = stream.load(fleet.root).writeStream.format("memory").queryName("fleet_stream").start()
    try:
        with pytest.raises(Exception, match=r"form a fleet; spark\.readStream reads one store"):
            q.awaitTermination(60)
    finally:
        q.stop()


def test_a_single_store_schema_has_no_store_column(fleet):
    rs = pytest.importorskip("rmqlog.spark")
    with pytest.raises(ValueError, match="a fleet's column: this read names one store"):
        rs.projection(rs.SCHEMA.add("store", "string"))


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
