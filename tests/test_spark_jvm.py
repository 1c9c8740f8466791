"""The JVM reader's own promises (docs/spark.md, "The JVM reader"): which reader ``rmqlog`` is,
no record a Rust read refuses, no crash from a segment file truncated under a running task, and
every mapping released. The Spark suites run against both readers (tests/_spark_sources.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from rmqlog import CommitLog

if shutil.which("java") is None:
    pytest.skip("rmqlog.spark tests need a JVM: `java` is not on PATH", allow_module_level=True)
try:
    import pyspark  # noqa: F401
except ImportError as exc:
    pytest.skip(f"rmqlog.spark tests need pyspark: {exc}", allow_module_level=True)

import rmqlog.spark as rs

SEG = 1 << 20


def _store(root: Path, records: int = 3000, size: int = 1000) -> tuple[str, list[int]]:
    path = str(root / "store")
    with CommitLog(path, segment_size=SEG) as log:
        offsets = log.append_batch([bytes([i % 251]) * size for i in range(records)])
    return path, offsets


def test_rmqlog_is_the_jvm_reader_with_the_jar_and_the_python_source_without(tmp_path):
    """In a session of its own: ``local_session(jvm=False)`` reads through the Python source as
    ``rmqlog``; ``register(spark, jvm=True)`` then adds the jar to the running session, and
    ``rmqlog`` is the JVM reader, the Python source ``rmqlog_python``; both read the same rows."""
    path, offsets = _store(tmp_path, 500, 100)
    code = textwrap.dedent(
        f"""
        import rmqlog.spark as rs
        spark = rs.local_session(jvm=False)
        assert not rs.jvm.on_classpath(spark)
        df = spark.read.format("rmqlog").load({path!r})
        plan = df._jdf.queryExecution().executedPlan().toString()
        assert "(Python)" in plan, plan
        before = sorted(r.offset for r in df.collect())
        assert rs.register(spark, jvm=True) is rs.source.PythonSource
        jvm = spark.read.format("rmqlog").load({path!r})
        plan = jvm._jdf.queryExecution().executedPlan().toString()
        assert "BatchScan rmqlog(" in plan and "(Python)" not in plan, plan
        py = spark.read.format("rmqlog_python").load({path!r})
        assert sorted(r.offset for r in jvm.collect()) == before == sorted(
            r.offset for r in py.collect()
        )
        print(len(before))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-1] == str(len(offsets))


def test_jvm_true_without_a_jar_is_refused(monkeypatch, spark_session):
    monkeypatch.setattr(rs.jvm, "JAR", Path("/nonexistent/rmqlog-spark.jar"))
    monkeypatch.setattr(rs.jvm, "on_classpath", lambda spark: False)
    with pytest.raises(ValueError, match="no JVM reader jar"):
        rs.jvm.add(spark_session, required=True)
    assert rs.jvm.add(spark_session, required=False) is False


def _flip(path: str, offset: int) -> None:
    """Flips the byte at ``offset`` of the store's segment holding it (a body byte)."""
    with CommitLog(path, read_only=True) as log:
        seg = next(s for s in log.segments() if s.start_offset <= offset < s.start_offset + s.size)
    with open(seg.path, "r+b") as f:
        f.seek(offset - seg.start_offset)
        b = f.read(1)
        f.seek(offset - seg.start_offset)
        f.write(bytes([b[0] ^ 0xFF]))


def test_a_damaged_record_fails_every_read_path(spark, tmp_path):
    """A body byte flipped in a sealed segment: a full read, a read without the body column (the
    CRC still covers it), a pushed-down range holding it and a stream all fail naming the
    corruption, with either reader; the records before it still read."""
    path, offsets = _store(tmp_path)
    bad = offsets[1200]
    _flip(path, bad + 200)
    reads = {
        "full": lambda: spark.read.format("rmqlog").load(path),
        "meta": lambda: spark.read.format("rmqlog").schema("offset long").load(path),
        "range": lambda: (
            spark.read.format("rmqlog")
            .option("pushdown", "true")
            .load(path)
            .where(f"offset >= {offsets[1100]} and offset < {offsets[1300]}")
        ),
    }
    for name, df in reads.items():
        with pytest.raises(Exception, match=r"CorruptionError|checksum|CRC") as e:
            df().collect()
        assert "rmqlog" in str(e.value), (name, str(e.value)[-2000:])
    before = spark.read.format("rmqlog").option("end_offset", str(bad)).load(path)
    assert sorted(r.offset for r in before.select("offset").collect()) == offsets[:1200]
    got: list[int] = []
    query = (
        spark.readStream.format("rmqlog")
        .load(path)
        .writeStream.foreachBatch(lambda df, _: got.extend(r.offset for r in df.collect()))
        .start()
    )
    try:
        query.awaitTermination(120)
    except Exception as e:  # the failed query raises here
        assert "CorruptionError" in str(e) or "checksum" in str(e), str(e)[-2000:]
    assert query.exception() is not None
    assert bad not in got


def _maps_of(pid: int, root: Path) -> list[str]:
    with open(f"/proc/{pid}/maps") as f:
        return [line for line in f if str(root) in line]


def test_every_mapping_is_released_after_many_queries(spark_session, tmp_path):
    """Thirty batch queries and a stream of the JVM reader in the driver's JVM (local mode runs
    the tasks there): once they end, the JVM maps no file of the store."""
    path, offsets = _store(tmp_path)
    pid = spark_session.sparkContext._jvm.ProcessHandle.current().pid()
    for i in range(30):
        df = spark_session.read.format("rmqlog").option("batch_records", "100").load(path)
        rows = df.where(f"offset >= {offsets[i * 50]}").select("offset", "body").collect()
        assert len(rows) == len(offsets) - i * 50
    query = (
        spark_session.readStream.format("rmqlog")
        .load(path)
        .writeStream.format("memory")
        .queryName("released")
        .start()
    )
    query.processAllAvailable()
    query.stop()
    assert spark_session.sql("select count(*) from released").first()[0] == len(offsets)
    assert _maps_of(pid, tmp_path) == []


@pytest.mark.parametrize("fault_in", ["rust", "java"])
def test_a_segment_truncated_under_a_running_task_fails_the_query_not_the_jvm(
    spark_session, tmp_path, fault_in
):
    """Another program truncates a sealed segment file while a task reads it: the task fails with
    CorruptionError naming the truncation, never a SIGBUS or an error that ends the JVM; the
    session then runs the next query. The task is held by a slow Python consumer (df.rdd) that
    marks its first row.

    - ``rust``: batches of 16 records; the next batches' reads fault in the native call.
    - ``java``: the segment in one batch, made before the truncation; its bodies still to be
      copied fault in Java's copy. After a warm-up that copy is compiled code, where the JVM's
      own handling of the fault is an InternalError thrown later, which Spark takes for a fatal
      error: it ended the JVM (src/jvm/fault.rs, watched ranges)."""
    batches = {"batch_records": "16"}
    if fault_in == "java":
        batches = {"batch_records": "100000", "batch_bytes": "64m"}
        warm = str(tmp_path / "warm")
        with CommitLog(warm) as log:
            log.append_batch([b"w" * 100] * 100_000)
        for _ in range(3):
            spark_session.read.format("rmqlog").load(warm).selectExpr("sum(length(body))").collect()
    path = str(tmp_path / "store")
    with CommitLog(path, segment_size=16 << 20) as log:
        log.append_batch([bytes([i % 251]) * 4000 for i in range(6000)])
        first = log.segments()[0]
    assert first.sealed
    marker = tmp_path / "started"

    def slow(rows):
        import time as t
        from pathlib import Path as P

        for n, r in enumerate(rows):
            if n == 0:
                P(str(marker)).touch()
            t.sleep(0.002)
            yield len(r.body)

    df = spark_session.read.format("rmqlog").options(**batches).load(path)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            df.where(f"offset < {first.size}").rdd.mapPartitions(slow).sum()
        except BaseException as e:  # the query's failure is the point
            failed.append(e)

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert time.monotonic() < deadline and t.is_alive(), failed
        time.sleep(0.01)
    os.truncate(first.path, 4096)
    t.join(300)
    assert not t.is_alive()
    assert failed, "the query read a truncated segment without an error"
    msg = str(failed[0])
    assert "truncated under this read" in msg, msg[-3000:]
    assert spark_session.range(10).count() == 10  # the JVM lives
