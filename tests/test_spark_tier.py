"""rmqlog.spark over the object storage tier: a store read from its tier URL alone (on a
local-cluster: executors in JVMs and Python workers of their own, no local copy anywhere), a
store's directories plus its tier URL, a stream following uploads, and body_udf on remote
segments; plus the tier options' checks without Spark.

The stores are written with a tier (moto's S3 server or a ``file://`` directory, the ``tier``
fixture), uploads awaited (``pending_segments == 0``). The active segment is never uploaded: a
read of the URL alone gives the records of the sealed segments.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field

import pytest

from rmqlog import CommitLog

# Without a JVM the Spark tests skip in the `spark` fixtures; the option tests still run.
rs = pytest.importorskip(
    "rmqlog.spark",
    reason="rmqlog.spark tests need pyspark and pyarrow (make develop installs them)",
)
import pyarrow as pa  # noqa: E402 (rmqlog.spark needs it: present when that imported)

SEG = 64 * 1024
RECORDS_PER_BURST = 1000  # about 1.6 segments of the bodies below


def _body(i: int) -> bytes:
    unit = f"t{i:06d}.".encode()
    return unit * (1 + (i * 7919) % 17)


@dataclass
class Written:
    """A store written with a tier: its directories and what each record is."""

    dirs: list[str]
    url: str
    options: dict[str, str]
    rows: list[tuple[int, int, bytes, int]]  # (offset, timestamp ms, body, segment start)
    remote: list[int]  # start offsets of the uploaded segments
    segments: list = field(default_factory=list)  # log.segments() when the rows were taken
    drops_local: bool = False  # local_retention_bytes=0: an uploaded segment's file goes too

    @property
    def paths(self) -> str:
        return os.pathsep.join(self.dirs)

    @property
    def sealed(self) -> list[tuple[int, int, bytes, int]]:
        """The records of the uploaded segments: all a read of the URL alone gives."""
        return [r for r in self.rows if r[3] in self.remote]


def _snapshot(log: CommitLog, written: Written) -> Written:
    """Waits for every sealed segment to be uploaded (and, where the writer keeps no local
    copies, for their files to be deleted: the shipper does that after its uploads), then
    records the log's rows."""
    deadline = time.monotonic() + 60
    while (st := log.tier_status())["pending_segments"] or (
        written.drops_local and st["both_segments"]
    ):
        assert time.monotonic() < deadline, st
        time.sleep(0.05)
    rows = []
    for batch in log.scan_batches(columns=("offset", "timestamp", "body", "segment")):
        ms = batch.column("timestamp").cast(pa.int64()).to_pylist()
        d = batch.to_pydict()
        rows += zip(d["offset"], ms, d["body"], d["segment"], strict=True)
    written.rows = rows
    written.segments = log.segments()
    written.remote = [s.start_offset for s in written.segments if s.remote]
    assert len(written.remote) == len(written.segments) - 1  # all but the active one
    return written


def _open_writer(root, tier, **kwargs) -> tuple[CommitLog, Written]:
    dirs = [str(root / "d0"), str(root / "d1")]
    log = CommitLog(dirs, segment_size=SEG, tier_url=tier.url, tier_options=tier.options, **kwargs)
    drops_local = kwargs.get("local_retention_bytes") == 0
    return log, Written(dirs, tier.url, dict(tier.options), [], [], drops_local=drops_local)


def _append(log: CommitLog, first: int, count: int = RECORDS_PER_BURST) -> None:
    log.append_batch([_body(i) for i in range(first, first + count)])


def _write(root, tier, bursts: int, **kwargs) -> Written:
    """A store of ``bursts`` bursts of records, uploaded, closed."""
    log, w = _open_writer(root, tier, **kwargs)
    with log:
        for burst in range(bursts):
            _append(log, burst * RECORDS_PER_BURST)
        return _snapshot(log, w)


def _read(kind, written: Written, **options):
    """``spark.read`` or ``spark.readStream`` of the rmqlog source with the tier's settings (as
    ``tier.<key>`` options) and ``options``."""
    reader = kind.format("rmqlog")
    settings = {f"tier.{k}": v for k, v in written.options.items()}
    for k, v in {**settings, **options}.items():
        reader = reader.option(k, str(v))
    return reader


def _rows(df) -> list[tuple[int, int, bytes, int]]:
    got = df.selectExpr("offset", "unix_millis(timestamp) AS ms", "body", "segment").collect()
    return sorted((r.offset, r.ms, bytes(r.body), r.segment) for r in got)


# ---------------------------------------------------------------------------------------------
# the options, without Spark


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"path": "s3://b/p", "tier_url": "s3://b/p"},
            "load() was given the URL 's3://b/p' itself",
        ),
        ({"path": f"/d0{os.pathsep}s3://b/p"}, "mix a tier URL and directories"),
        ({"path": json.dumps(["/d0", "s3://b/p"])}, "mix a tier URL and directories"),
        ({"path": "/d0", "tier_url": "/d1"}, "option tier_url='/d1' is not valid: expected a URL"),
        ({"path": "/d0", "tier.endpoint": "http://h"}, "option tier.endpoint configures a tier"),
        ({"path": "/d0", "tier_cache_dir": "/c"}, "option tier_cache_dir configures a tier"),
        ({"path": "s3://b/p", "tier_cache_dir": "c"}, "expected an absolute directory"),
        ({"path": "s3://b/p", "tier.": "x"}, "option tier.='x' is not valid: expected tier.<key>"),
        ({"path": "s3://b/p", "tier_options": "{}"}, "tier_options (give each setting as its own"),
    ],
)
def test_bad_tier_options_name_the_option(options, message):
    with pytest.raises(ValueError) as e:
        rs.parse_options(options)
    assert message in str(e.value)


def test_tier_options_are_parsed():
    url = "s3://bucket/a:b"  # a URL is never split at os.pathsep
    o = rs.parse_options({"path": url, "Tier.Endpoint": "http://h:1", "tier.region": "r"})
    assert o.store == rs.Store((url,), None, (("endpoint", "http://h:1"), ("region", "r")))
    assert rs.parse_options({"path": json.dumps([url])}).store == rs.Store((url,))
    o = rs.parse_options(
        {"paths": f"/d0{os.pathsep}/d1", "tier_url": "file:///t", "tier_cache_dir": "/c"}
    )
    assert o.store == rs.Store(("/d0", "/d1"), "file:///t", (), "/c")


READ_IN_A_CHILD = """
import sys
import rmqlog.spark as rs
opts = rs.parse_options({"path": sys.argv[1]})
parts = rs.RmqlogReader(opts).partitions()
offsets = [o for p in parts for b in rs.read_range(opts, p) for o in b.column("offset").to_pylist()]
print(len(parts), offsets == sorted(offsets), len(offsets), rs.lookup_bodies(sys.argv[1], offsets))
"""


def test_settings_from_the_environment_alone(s3_bucket, tmp_path):
    """No tier option: the process that reads (an executor's Python worker, its variables set
    with spark.executorEnv.*) takes the object store's settings from AWS_* variables, as the AWS
    tools do; AWS_ALLOW_HTTP included."""
    w = _write(tmp_path / "store", s3_bucket, 2)
    env = {**os.environ, **{f"AWS_{k.upper()}": v for k, v in w.options.items()}}
    assert "AWS_ALLOW_HTTP" in env and "AWS_ENDPOINT" in env
    out = subprocess.run(
        [sys.executable, "-c", READ_IN_A_CHILD, w.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    bodies = [r[2] for r in w.sealed]
    assert out.stdout.strip() == f"{len(w.remote)} True {len(bodies)} {bodies}"


def test_a_url_stream_meets_the_tiers_retention(file_tier, tmp_path):
    """Records a stream of the URL had not read are deleted (truncate_before: the tier drops the
    objects below the new head): DataLossError, or with fail_on_data_loss=false a warning and
    the micro-batch starts at the new head."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    log, w = _open_writer(tmp_path / "store", file_tier)
    with log:
        _append(log, 0)
        _append(log, RECORDS_PER_BURST)
        _snapshot(log, w)
        readers = [
            rs.RmqlogDataSource({"path": w.url, "fail_on_data_loss": lenient}).streamReader(
                rs.SCHEMA
            )
            for lenient in ("true", "false")
        ]
        start = readers[0].initialOffset()
        end = readers[0].latestOffset(start, ReadAllAvailable())
        assert start == {"offset": 0} and end["offset"] > w.sealed[-1][0]
        head = w.remote[1]
        log.truncate_before(head)
        deadline = time.monotonic() + 30
        while readers[0]._follower().min_offset < head:  # refreshed from the manifest
            assert time.monotonic() < deadline, log.tier_status()
            time.sleep(0.05)
        with pytest.raises(rs.DataLossError, match="fail_on_data_loss"):
            readers[0].partitions(start, end)
        with pytest.warns(RuntimeWarning, match="skipping"):
            parts = readers[1].partitions(start, end)
        assert parts[0].lo == head and parts[-1].hi == end["offset"]
        for r in readers:
            r.stop()


# ---------------------------------------------------------------------------------------------
# local mode (the session-wide `spark`): both tiers, streams, body_udf


def test_directories_plus_tier_url_read_both_tiers_as_one_offset_space(spark, tier, tmp_path):
    w = _write(tmp_path / "store", tier, 2, local_retention_bytes=0)
    segs = w.segments
    assert all(s.remote and not s.local for s in segs[:-1]) and len(segs) >= 4
    assert segs[-1].local and not segs[-1].remote  # the active segment
    cache = tmp_path / "cache"  # each open log's cache is a directory of its own in it
    df = _read(spark.read, w, tier_url=w.url, tier_cache_dir=cache).load(w.paths)
    assert df.rdd.getNumPartitions() == len(segs)
    assert _rows(df) == w.rows
    assert cache.is_dir() and list(cache.iterdir()) == []  # made there, removed at close
    # a range from the remote part into the local one
    lo, hi = w.rows[100][0], w.rows[-5][0]
    df = _read(spark.read, w, tier_url=w.url, start_offset=lo, end_offset=hi).load(w.paths)
    assert _rows(df) == [r for r in w.rows if lo <= r[0] < hi]
    if tier.kind == "file":  # a tier without settings: the URL the store recorded is enough
        assert _rows(spark.read.format("rmqlog").load(w.paths)) == w.rows


def test_small_remote_segments_are_one_partition_each_and_local_ones_split(file_tier, tmp_path):
    from rmqlog.spark.batch import _byte_ranges

    w = _write(tmp_path / "store", file_tier, 2, local_retention_bytes=3 * SEG)
    with CommitLog(w.paths, read_only=True) as log:
        segs = log.segments()
        parts = _byte_ranges(log, [(log.min_offset, log.max_offset)], SEG // 4)
        sealed = segs[:-1]
        assert any(s.local for s in sealed) and any(not s.local for s in sealed)
        for s in sealed:
            inside = [p for p in parts if s.start_offset <= p.lo < s.start_offset + s.size]
            # A remote segment of 32 MiB or less has no splits: one partition.
            assert s.splits == []
            assert len(inside) == (4 if s.local else 1), (s, inside)


BIG_SEG = 72 << 20  # two splits (one per 32 MiB): three pieces


def _write_big(root, tier) -> tuple[str, list[tuple[int, bytes]], list[int]]:
    """A store whose first segment (BIG_SEG) is sealed and only in the tier; its records
    (offset, body) and splits. The local directory is deleted: reads go to the tier alone."""
    d = str(root / "big")
    with CommitLog(
        d,
        segment_size=BIG_SEG,
        tier_url=tier.url,
        tier_options=tier.options,
        local_retention_bytes=0,
    ) as log:
        bodies = [_body(i) * 8 for i in range(512)]
        while log.max_offset < BIG_SEG:
            log.append_batch(bodies)
        deadline = time.monotonic() + 120
        while log.tier_status()["local_deleted"] < 1:
            assert time.monotonic() < deadline, log.tier_status()
            time.sleep(0.05)
        rows = [
            (b.column("offset")[i].as_py(), b.column("body")[i].as_py())
            for b in log.scan_batches(0, BIG_SEG, columns=("offset", "body"))
            for i in range(b.num_rows)
        ]
        splits = log.segments()[0].splits
    shutil.rmtree(d)
    assert len(splits) == 2, splits
    return tier.url, rows, splits


def test_a_remote_segment_is_planned_at_its_splits(file_tier, tmp_path):
    from rmqlog.spark.batch import _byte_ranges

    url, rows, (s1, s2) = _write_big(tmp_path, file_tier)
    end = rows[-1][0] + 1
    with CommitLog(url, read_only=True) as log:

        def plan(ranges, limit):
            return [p.spans for p in _byte_ranges(log, ranges, limit)]

        whole = [(0, log.max_offset)]
        # At most 32 MiB a partition: one per piece between splits.
        assert plan(whole, 32 << 20) == [((0, s1),), ((s1, s2),), ((s2, BIG_SEG),)]
        # Smaller limits cannot cut between splits; larger ones group pieces into one span.
        assert plan(whole, 4 << 20) == [((0, s1),), ((s1, s2),), ((s2, BIG_SEG),)]
        assert plan(whole, 128 << 20) == [((0, BIG_SEG),)]
        # A split weighs as its place on the 32 MiB grid (it lies a few bytes past it): a
        # 64 MiB limit takes two whole pieces.
        assert s1 > 32 << 20 and s2 > 64 << 20
        assert plan(whole, 64 << 20) == [((0, s2),), ((s2, BIG_SEG),)]
        assert plan(whole, None) == [((0, BIG_SEG),)]
        # Ranges (pushed-down filters) are cut at the splits inside them, and their pieces
        # grouped up to the limit (adjacent ones as one span: one scan, one range read).
        assert plan([(100, s1 + 5), (s2 - 9, end)], 32 << 20) == [
            ((100, s1 + 5), (s2 - 9, s2)),
            ((s2, end),),
        ]
        assert plan([(100, s1 + 5), (s2 - 9, end)], 1 << 20) == [
            ((100, s1),),
            ((s1, s1 + 5), (s2 - 9, s2)),
            ((s2, end),),
        ]
        assert log.tier_status()["fetched_bytes"] == 0, "planning reads no object"


def test_tier_settings_are_checked_at_load(spark, tier, tmp_path):
    log, w = _open_writer(tmp_path / "store", tier)
    log.close()
    bad = "tier.endpint" if tier.kind == "s3" else "tier.region"
    for load in (
        lambda r: r.load(w.url),
        lambda r: r.option("tier_url", w.url).load(w.paths),
    ):
        with pytest.raises(Exception) as e:  # Spark wraps it in an AnalysisException
            load(_read(spark.read, w, **{bad: "x"}))
        msg = str(e.value)
        assert f"rmqlog: option {bad}" in msg, msg
    with pytest.raises(Exception, match=r"option tier\.region configures a tier: give its URL"):
        spark.read.format("rmqlog").option("tier.region", "x").load(w.paths)


def test_streams_follow_uploads_from_a_remote_head(spark, s3_bucket, tmp_path):
    """A stream of the URL alone reads the uploaded segments and, as the manifest changes, the
    ones uploaded later; a stream of the directories plus the URL starts at the head, which is
    remote only, and goes on into the local segments."""
    log, w = _open_writer(tmp_path / "store", s3_bucket, local_retention_bytes=0)
    got: dict[str, list] = {"url": [], "paths": []}

    def sink(name):
        def collect(df, _batch_id):
            got[name].extend(_rows(df))

        return collect

    with log:
        _append(log, 0)
        _append(log, RECORDS_PER_BURST)
        _snapshot(log, w)
        # The local copy is deleted after the upload's commit (which ends "pending"): soon after.
        deadline = time.monotonic() + 30
        while log.segments()[0].local and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not log.segments()[0].local
        streams = {
            "url": _read(spark.readStream, w).load(w.url),
            "paths": _read(spark.readStream, w).option("tier_url", w.url).load(w.paths),
        }
        queries = [
            df.writeStream.foreachBatch(sink(name))
            .option("checkpointLocation", str(tmp_path / f"checkpoint-{name}"))
            .start()
            for name, df in streams.items()
        ]
        try:
            for q in queries:
                q.processAllAvailable()
            assert sorted(got["url"]) == w.sealed
            assert sorted(got["paths"]) == w.rows and w.rows[0][0] == 0
            before = len(w.remote)
            _append(log, 2 * RECORDS_PER_BURST)
            _append(log, 3 * RECORDS_PER_BURST)
            _snapshot(log, w)
            assert len(w.remote) >= before + 3
            for q in queries:
                q.processAllAvailable()
            assert sorted(got["url"]) == w.sealed
            assert sorted(got["paths"]) == w.rows
        finally:
            for q in queries:
                q.stop()
    assert all(q.exception() is None for q in queries)


def test_body_udf_reads_remote_records_by_range(spark_session, tier, tmp_path):
    w = _write(tmp_path / "store", tier, 2, local_retention_bytes=0)
    bodies = {r[0]: r[2] for r in w.rows}
    remote = {r[0] for r in w.sealed}
    sample = [r[0] for r in w.rows[::41]]
    assert remote & set(sample) and set(sample) - remote
    bad = [w.rows[3][0] + 1, None]
    df = spark_session.createDataFrame([(o,) for o in sample + bad], "o BIGINT")
    by_url = rs.body_udf(w.url, tier_options=w.options)
    by_paths = rs.body_udf(w.dirs, tier_url=w.url, tier_options=w.options)
    got = {
        r.o: (r.u, r.p)
        for r in df.select("o", by_url("o").alias("u"), by_paths("o").alias("p")).collect()
    }
    # the URL alone holds the sealed segments; the directories plus the URL hold every record
    assert {o: got[o][0] for o in sample} == {o: bodies[o] if o in remote else None for o in sample}
    assert {o: got[o][1] for o in sample} == {o: bodies[o] for o in sample}
    assert [got[o] for o in bad] == [(None, None), (None, None)]
    # in this process: a lookup is a range read of the record, never a whole download
    rs._drop_idle(idle=-1)
    offs = sorted(remote)[::97]
    assert rs.lookup_bodies(w.url, offs, tier_options=w.options) == [bodies[o] for o in offs]
    status = rs.udf._cache[
        rs.Store((w.url,), None, tuple(sorted(w.options.items())))
    ].log.tier_status()
    assert status["downloads"] == 0 and status["range_reads"] >= 1
    rs._drop_idle(idle=-1)


# ---------------------------------------------------------------------------------------------
# on a cluster: executors in JVMs of their own read the tier URL alone. Last in this module: the
# cluster starts once for every tier kind, after the local-mode tests above.


def test_a_cluster_reads_the_tier_url_alone(spark_cluster, tier, tmp_path):
    w = _write(tmp_path / "store", tier, 3)
    shutil.rmtree(tmp_path / "store")  # no local copy anywhere: every read is from the tier
    assert len(w.remote) >= 4
    df = _read(spark_cluster.read, w).load(w.url)
    assert df.rdd.getNumPartitions() == len(w.remote)  # max_partition_bytes >= a segment

    def task(index, rows):
        """This partition's rows (offset, ms, body, segment) and the JVM that read them."""
        got = [(r.offset, r.ms, bytes(r.body), r.segment) for r in rows]
        pid = os.getpid()  # a Python worker; its nearest `java` ancestor is the task's JVM
        while pid > 1:
            with open(f"/proc/{pid}/stat") as f:
                comm, rest = f.read().rsplit(")", 1)
            if comm.endswith("(java"):
                break
            pid = int(rest.split()[1])
        return [(index, got, pid)]

    columns = df.selectExpr("offset", "unix_millis(timestamp) AS ms", "body", "segment")
    tasks = sorted(columns.rdd.mapPartitionsWithIndex(task).collect())
    # one task per remote segment, each reading that segment's records in order
    assert [i for i, _, _ in tasks] == list(range(len(w.remote)))
    assert [{r[3] for r in rows} for _, rows, _ in tasks] == [{s} for s in w.remote]
    assert [r for _, rows, _ in tasks for r in rows] == w.sealed
    driver = spark_cluster.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    jvms = {pid for _, _, pid in tasks}
    assert driver not in jvms and 1 not in jvms and 1 <= len(jvms) <= 2, (driver, jvms)


def test_a_cluster_reads_one_big_remote_segment_as_several_ranged_tasks(
    spark_cluster, tier, tmp_path
):
    url, rows, (s1, s2) = _write_big(tmp_path, tier)
    written = Written([], url, dict(tier.options), [], [])
    df = _read(spark_cluster.read, written, max_partition_bytes="32m").load(url)
    assert df.rdd.getNumPartitions() == 3

    def task(index, got):
        return [(index, [(r.offset, bytes(r.body)) for r in got])]

    tasks = sorted(df.select("offset", "body").rdd.mapPartitionsWithIndex(task).collect())
    bounds = [0, s1, s2, BIG_SEG]
    for index, got in tasks:
        lo, hi = bounds[index], bounds[index + 1]
        assert got == [r for r in rows if lo <= r[0] < hi], index
    assert [r for _, got in tasks for r in got] == rows
