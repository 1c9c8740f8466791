"""The object storage fixtures of conftest.py work: moto's S3 server (stop, start, buckets kept),
the tier shapes, and a Spark local-cluster whose executors are JVMs of their own that import
rmqlog and reach the S3 endpoint."""

import os
import socket

import pytest
from botocore.exceptions import EndpointConnectionError

import rmqlog


def test_s3_bucket_is_a_fresh_bucket_on_the_server(s3_bucket, s3_server):
    assert s3_bucket.url == f"s3://{s3_bucket.bucket}/log"
    assert s3_bucket.options == {
        "endpoint": s3_server.endpoint,
        "allow_http": "true",
        "access_key_id": "testing",
        "secret_access_key": "testing",
        "region": "us-east-1",
    }
    assert s3_bucket.keys() == []
    s3_bucket.client.put_object(Bucket=s3_bucket.bucket, Key="log/a", Body=b"one")
    got = s3_bucket.client.get_object(Bucket=s3_bucket.bucket, Key="log/a")
    assert got["Body"].read() == b"one"
    assert s3_bucket.keys() == ["a"]


@pytest.mark.parametrize("name", ["00000000000000000000", "manifest/CURRENT"])
def test_tier_objects_by_hand(tier, name):
    assert tier.url.startswith({"s3": "s3://", "file": "file:///"}[tier.kind])
    tier.write(name, b"x" * 10)
    assert tier.keys() == [name]
    assert tier.read(name) == b"x" * 10
    tier.delete(name)
    assert tier.keys() == []


def test_stopped_server_refuses_and_start_brings_the_bucket_back(s3_bucket, s3_server):
    s3_bucket.write("seg", b"kept")
    with s3_server.stopped():
        assert not s3_server.running
        with pytest.raises(EndpointConnectionError):
            s3_bucket.read("seg")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", s3_server.port), timeout=2).close()
    assert s3_server.running
    assert s3_server.endpoint == f"http://127.0.0.1:{s3_server.port}"
    assert s3_bucket.read("seg") == b"kept"


def test_a_test_may_leave_the_server_stopped(s3_server):
    s3_server.stop()
    assert not s3_server.running


def test_the_next_s3_bucket_finds_it_running(s3_bucket, s3_server):
    assert s3_server.running
    s3_bucket.write("a", b"1")
    assert s3_bucket.read("a") == b"1"


def test_cluster_tasks_run_in_two_executor_jvms(spark_cluster):
    def where(_):
        """(this Python worker's pid, the pid and command line of the JVM above it)."""
        import os

        pid = os.getpid()
        while True:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode()
            if "java" in cmd.split(" ", 1)[0]:
                break
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])  # the parent
        yield os.getpid(), pid, cmd

    sc = spark_cluster.sparkContext
    assert sc.master == "local-cluster[2,1,1024]"
    driver_jvm = sc._jvm.java.lang.ProcessHandle.current().pid()
    rows = sc.parallelize(range(4), 4).mapPartitions(where).collect()
    jvms = {jvm for _, jvm, _ in rows}
    assert len(jvms) == 2 and driver_jvm not in jvms
    assert all("CoarseGrainedExecutorBackend" in cmd for _, _, cmd in rows)
    assert os.getpid() not in {py for py, _, _ in rows}


def test_cluster_executors_import_rmqlog_and_reach_s3(spark_cluster, s3_bucket):
    s3_bucket.write("from-driver", b"hello")
    url, options = s3_bucket.url, s3_bucket.options

    def task(parts):
        import boto3

        import rmqlog

        bucket, prefix = url.removeprefix("s3://").split("/", 1)
        client = boto3.client(
            "s3",
            endpoint_url=options["endpoint"],
            aws_access_key_id=options["access_key_id"],
            aws_secret_access_key=options["secret_access_key"],
            region_name=options["region"],
        )
        body = client.get_object(Bucket=bucket, Key=f"{prefix}/from-driver")["Body"].read()
        for i in parts:
            client.put_object(Bucket=bucket, Key=f"{prefix}/from-task-{i}", Body=body)
            yield rmqlog.__file__, rmqlog.CommitLog.__name__

    rows = spark_cluster.sparkContext.parallelize(range(2), 2).mapPartitions(task).collect()
    assert rows == [(rmqlog.__file__, "CommitLog")] * 2
    assert s3_bucket.keys() == ["from-driver", "from-task-0", "from-task-1"]
    assert s3_bucket.read("from-task-1") == b"hello"
