"""Keys and headers wherever columns exist: the ``key`` and ``headers`` columns of
``scan_batches`` (serial, parallel, following, the stream export), ``to_arrow`` (a fleet too) and
``Consumer.poll_batches``; ``append_batch`` of an Arrow table with ``key`` and ``headers`` fields;
``rmqlog dump``; and the Spark sources (batch, stream, fleet). Each checked against
``read_record``, the records' own key and headers (tests/test_messages.py covers those)."""

from __future__ import annotations

import json
import os
import time

import pyarrow as pa
import pytest

import rmqlog
from rmqlog import MAX_KEY_LEN, CommitLog, CommitLogError
from rmqlog import cli as rmqlog_cli

BIG = bytes(range(256)) * 160  # a 40 KiB header value
NOT_UTF8 = b"\xff\xfe\x00k"
HEADERS_TYPE = pa.list_(
    pa.field(
        "item",
        pa.struct([pa.field("name", pa.string(), False), pa.field("value", pa.binary(), False)]),
        False,
    )
)


def message(i: int) -> tuple[bytes, bytes | None, list[tuple[str, bytes]]]:
    """Record ``i``: no key, an empty key, a key (not UTF-8 for some); no headers, repeated
    names, empty and non-UTF-8 values; a few with a large value."""
    body = b"" if i % 7 == 0 else (b"body-%d-" % i) * (1 + i % 30)
    key = [None, b"", b"key-%d" % i, NOT_UTF8 + bytes([i % 256])][i % 4]
    headers: list[tuple[str, bytes]] = []
    if i % 3 == 1:
        headers = [("type", b"a"), ("type", b""), ("é", NOT_UTF8)]
    elif i % 3 == 2:
        headers = [("n", b"%d" % i)]
    if i % 40 == 25:
        headers.append(("big", BIG))
    return body, key, headers


def write(log: CommitLog, first: int, n: int) -> list[int]:
    """Appends messages ``first..first+n`` (single appends and one batch); their offsets."""
    msgs = [message(i) for i in range(first, first + n)]
    half = n // 2
    offs = [log.append(b, key=k, headers=h) for b, k, h in msgs[:half]]
    rest = msgs[half:]
    offs += log.append_batch(
        [b for b, _, _ in rest], keys=[k for _, k, _ in rest], headers=[h for _, _, h in rest]
    )
    return offs


def records(
    log: CommitLog, start: int | None = None
) -> list[tuple[int, bytes, bytes | None, list]]:
    """``(offset, body, key, headers)`` of each record from ``read_record``."""
    out = []
    for off, _ in log.scan(start):
        r = log.read_record(off, body="bytes")
        out.append((off, r.body, r.key, r.headers))
    return out


def rows(batches) -> list[tuple[int, bytes, bytes | None, list]]:
    """``(offset, body, key, headers)`` of each row of batches with those columns."""
    out = []
    for b in batches:
        d = b.to_pydict()
        for off, body, key, headers in zip(
            d["offset"], d["body"], d["key"], d["headers"], strict=True
        ):
            out.append((off, body, key, [(h["name"], h["value"]) for h in headers]))
    return out


COLS = ["offset", "body", "key", "headers"]


@pytest.fixture
def log(make_log):
    """120 messages over 64 KiB segments."""
    log = make_log(segment_size=1 << 16)
    write(log, 0, 120)
    assert len(log.segments()) >= 3
    return log


def test_columns_round_trip_through_every_scan(log):
    want = records(log)
    assert (
        sum(k is None for _, _, k, _ in want) == 30 and sum(k == b"" for _, _, k, _ in want) == 30
    )
    for body in ("view", "binary"):
        for threads in (1, 2, 3):
            scan = log.scan_batches(columns=COLS, body=body, max_records=17, threads=threads)
            assert scan.schema.field("key").type == pa.binary()
            assert scan.schema.field("key").nullable
            assert scan.schema.field("headers").type == HEADERS_TYPE
            assert not scan.schema.field("headers").nullable
            batches = list(scan)
            assert rows(batches) == want, (body, threads)
            assert all(b.column("headers").null_count == 0 for b in batches)
    # The stream export, to_arrow, and the order of the columns as given.
    got = pa.RecordBatchReader.from_stream(log.scan_batches(columns=COLS)).read_all()
    assert rows(got.to_batches()) == want
    table = rmqlog.to_arrow(log, columns=["headers", "offset", "key", "body"], body="binary")
    assert table.column_names == ["headers", "offset", "key", "body"]
    assert rows(table.select(COLS).to_batches()) == want
    # The defaults have neither column.
    assert next(iter(log.scan_batches())).schema.names == ["offset", "timestamp", "body"]
    with pytest.raises(ValueError, match='unknown column "keys"'):
        log.scan_batches(columns=["keys"])


def test_parallel_readers_give_the_serial_batches(log):
    """Keys and headers weigh against ``max_bytes`` whatever the columns: every ``threads`` and
    every set of columns cuts the range into the same batches."""
    for max_bytes in (1, 3000, 20000):
        cuts = set()
        for columns in (COLS, ["offset"], ["offset", "headers"]):
            for threads in (1, 3):
                scan = log.scan_batches(columns=columns, max_bytes=max_bytes, threads=threads)
                cuts.add(tuple(b.column("offset")[0].as_py() for b in scan))
        assert len(cuts) == 1, max_bytes
    # A batch holding a 40 KiB header value is cut before the next record at 16 KiB.
    scan = log.scan_batches(columns=["offset", "headers"], max_bytes=1 << 14)
    big = [
        b
        for b in scan
        if any(h["name"] == "big" for hs in b.column("headers").to_pylist() for h in hs)
    ]
    assert big and all(b.num_rows == 1 for b in big)


def test_following_scan_and_consumer_batches_carry_keys_and_headers(make_log):
    log = make_log(segment_size=1 << 16)
    offs = write(log, 0, 20)
    want = records(log)
    follow = log.scan_batches(columns=COLS, follow=True, timeout=0.05)
    assert rows(follow) == want
    consumer = log.consumer("cols")
    got = []
    while batch := consumer.poll_batches(7, timeout=0, columns=COLS, body="binary"):
        got += rows(batch)
    assert got == want and got[-1][0] == offs[-1]


def test_append_batch_of_arrow_tables_round_trips_keys_and_headers(make_log):
    log = make_log(segment_size=1 << 20)
    msgs = [message(i) for i in range(40)]
    headers = [[{"name": n, "value": v} for n, v in h] for _, _, h in msgs]
    headers[5] = None  # a null list: no headers
    h_binary = pa.array(
        headers, pa.list_(pa.struct([("name", pa.string()), ("value", pa.binary())]))
    )
    want = [(b, k, [] if i == 5 else h) for i, (b, k, h) in enumerate(msgs)]
    keys = [k for _, k, _ in msgs]
    table = pa.table(
        {"key": pa.array(keys, pa.binary()), "body": [b for b, _, _ in msgs], "headers": h_binary}
    )

    def read(offs):
        recs = [log.read_record(o, body="bytes") for o in offs]
        return [(r.body, r.key, r.headers) for r in recs]

    # A table (a stream of two chunks), a record batch, a struct array.
    chunked = pa.concat_tables([table.slice(0, 15), table.slice(15)])
    assert chunked.column("body").num_chunks == 2
    assert read(log.append_batch(chunked).to_pylist()) == want
    assert read(log.append_batch(table.to_batches()[0]).to_pylist()) == want
    struct = pa.StructArray.from_arrays(
        [table.column("body").combine_chunks(), table.column("key").combine_chunks()],
        ["body", "key"],
    )
    assert read(log.append_batch(struct).to_pylist()) == [(b, k, []) for b, k, _ in want]
    # Keys and values of any binary or string type; a large_list of headers.
    text = [{"name": "t", "value": "über"}], None
    for key_type in (
        pa.string(),
        pa.large_binary(),
        pa.binary_view(),
        pa.string_view(),
        pa.large_string(),
    ):
        t = pa.table(
            {
                "body": pa.array([b"x", b"y"], pa.large_binary()),
                "key": pa.array(["ké", None], key_type),
                "headers": pa.array(
                    text, pa.large_list(pa.struct([("name", pa.string()), ("value", pa.string())]))
                ),
            }
        )
        got = read(log.append_batch(t).to_pylist())
        assert got == [(b"x", "ké".encode(), [("t", "über".encode())]), (b"y", None, [])], key_type
    # A large key, empty values, and a record of neither in a table that has both fields.
    t = pa.table(
        {
            "body": [b"a", b"b"],
            "key": [b"k" * MAX_KEY_LEN, None],
            "headers": [[{"name": "", "value": b""}], []],
        }
    )
    assert read(log.append_batch(t).to_pylist()) == [
        (b"a", b"k" * MAX_KEY_LEN, [("", b"")]),
        (b"b", None, []),
    ]
    # An Arrow array of bodies takes keys= and headers= as a list of bodies does.
    offs = log.append_batch(
        pa.array([b"p", b"q"]), keys=[b"kp", None], headers=[None, [("h", b"v")]]
    )
    assert read(offs.to_pylist()) == [(b"p", b"kp", []), (b"q", None, [("h", b"v")])]


def test_polars_frames_append_with_keys_and_headers(make_log):
    pl = pytest.importorskip("polars", reason="polars is in the test extra (make develop)")
    log = make_log()
    df = pl.DataFrame(
        {"body": [b"a", b"b"], "key": [b"k", None], "headers": [[{"name": "n", "value": b"v"}], []]}
    )
    offs = log.append_batch(df).to_pylist()
    got = [(r.body, r.key, r.headers) for r in (log.read_record(o, body="bytes") for o in offs)]
    assert got == [(b"a", b"k", [("n", b"v")]), (b"b", None, [])]


def _headers(values, value_type=None, name_type=None):
    """A ``headers`` column: a list of ``struct<name, value>`` (string and binary by default)."""
    item = pa.struct([("name", name_type or pa.string()), ("value", value_type or pa.binary())])
    return pa.array(values, pa.list_(item))


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (
            lambda: pa.table({"body": [b"a"], "tag": [b"t"], "x": [1]}),
            ValueError,
            r'field\(s\) \["tag", "x"\]',
        ),
        (
            lambda: pa.table({"key": [b"k"]}),
            ValueError,
            r'no "body" field \(its fields: \["key"\]\)',
        ),
        (
            lambda: pa.table({"body": [b"a", None]}),
            ValueError,
            r'field "body": .*1 null element\(s\) \(the first at index 1\)',
        ),
        (lambda: pa.table({"body": [1]}), ValueError, 'field "body": an Arrow array of Int64'),
        (
            lambda: pa.table({"body": [b"a"], "key": [7]}),
            ValueError,
            r'field "key" is Int64; a key is binary',
        ),
        (
            lambda: pa.table({"body": [b"a"], "key": [b"k" * (MAX_KEY_LEN + 1)]}),
            ValueError,
            r"at most 65535 bytes.*\(row 0\)",
        ),
        (
            lambda: pa.table({"body": [b"a"], "headers": [b"h"]}),
            ValueError,
            'field "headers" is Binary; headers are a list',
        ),
        (
            lambda: pa.table({"body": [b"a"], "headers": pa.array([[b"h"]])}),
            ValueError,
            'field "headers" is a list of Binary',
        ),
        (
            lambda: pa.table({"body": [b"a"], "headers": pa.array([[{"name": "n"}]])}),
            ValueError,
            r'holds struct fields \["name"\]',
        ),
        (
            lambda: pa.table(
                {
                    "body": [b"a"],
                    "headers": _headers([[{"name": b"n", "value": b"v"}]], name_type=pa.binary()),
                }
            ),
            ValueError,
            "a header name is a string",
        ),
        (
            lambda: pa.table(
                {
                    "body": [b"a"],
                    "headers": _headers([[{"name": "n", "value": 3}]], value_type=pa.int8()),
                }
            ),
            ValueError,
            "a header value is binary",
        ),
        (
            lambda: pa.table(
                {
                    "body": [b"a", b"b"],
                    "headers": _headers([[], [{"name": "n", "value": b"v"}, None]]),
                }
            ),
            ValueError,
            "header 1 of row 1 is null",
        ),
        (
            lambda: pa.table(
                {"body": [b"a"], "headers": _headers([[{"name": None, "value": b"v"}]])}
            ),
            ValueError,
            "header 0 of row 0 has a null name",
        ),
        (
            lambda: pa.table(
                {"body": [b"a"], "headers": _headers([[{"name": "n", "value": None}]])}
            ),
            ValueError,
            "header 0 of row 0 has a null value",
        ),
        (
            lambda: pa.StructArray.from_arrays(
                [pa.array([b"a", b"b"])], ["body"], mask=pa.array([False, True])
            ),
            ValueError,
            "row 1 of the Arrow table is null",
        ),
    ],
    ids=[
        "unknown",
        "no-body",
        "null-body",
        "int-body",
        "int-key",
        "long-key",
        "headers-binary",
        "headers-list-of-binary",
        "header-no-value",
        "header-binary-name",
        "header-int-value",
        "null-header",
        "null-name",
        "null-value",
        "null-row",
    ],
)
def test_a_refused_arrow_table_writes_nothing(make_log, make, error, match):
    log = make_log()
    log.append(b"before")
    end = log.max_offset
    with pytest.raises(error, match=match):
        log.append_batch(make())
    assert log.max_offset == end


def test_keys_kwargs_with_a_table_and_keys_on_a_format_1_store_are_refused(make_log, dirs):
    log = make_log()
    table = pa.table({"body": [b"a"], "key": [b"k"]})
    with pytest.raises(TypeError, match='from its "key" and "headers" fields'):
        log.append_batch(table, keys=[b"k"])
    with pytest.raises(ValueError, match="keys has 1 items for 2 bodies"):
        log.append_batch(pa.array([b"a", b"b"]), keys=[b"k"])
    assert log.max_offset == 0
    old = make_log([dirs[0].with_name("v1")], record_format=1)
    with pytest.raises(CommitLogError, match="record format 2"):
        old.append_batch(table)
    # Bodies alone (no row with a key) are plain records there.
    offs = old.append_batch(pa.table({"body": [b"b"], "key": pa.array([None], pa.binary())}))
    assert old.read_record(offs[0].as_py()).key is None


def test_dump_shows_keys_ids_and_headers_of_the_records_that_have_them(make_log, dirs, capsys):
    log = make_log()
    plain = log.append(b"plain")
    keyed = log.append(b"b", key=NOT_UTF8, headers=[("t", b"x"), ("t", b"a=b, c")])
    empty = log.append(b"e", key=b"")
    once = log.append(b"o", msg_id="evt-1")
    path = os.pathsep.join(map(str, dirs))
    assert rmqlog_cli.main(["dump", path, "--json"]) == 0
    got = {r["offset"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert "key" not in got[plain] and "headers" not in got[plain]
    assert got[keyed]["key"] == "\\xff\\xfe\\x00k"
    assert got[keyed]["headers"] == [["t", "x"], ["t", "a=b, c"]]
    assert got[empty]["key"] == "" and "headers" not in got[empty]
    assert got[once]["msg_id"] == "evt-1" and "key" not in got[once]
    assert "msg_id" not in got[keyed]
    assert rmqlog_cli.main(["dump", path, "--data"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        "key:" not in lines[0] and "headers:" not in lines[0] and lines[0].endswith("data: plain")
    )
    assert lines[1].endswith(" key: \\xff\\xfe\\x00k headers: [t=x, t=a=b, c] data: b")
    assert lines[2].endswith(" key:  data: e")
    assert lines[3].endswith(" msg_id: evt-1 data: o") and "key:" not in lines[3]


# ---------------------------------------------------------------------------------------------
# fleets: stores tiering under one prefix


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Two stores, ``a`` and ``b``, with messages, each with its sealed segments uploaded to its
    own prefix of one ``file://`` tier; ``(url, {store URL: records uploaded})``."""
    root = tmp_path_factory.mktemp("fleet")
    url = (root / "tier").as_uri()
    uploaded = {}
    for i, n in enumerate("ab"):
        with CommitLog(root / n, segment_size=1 << 16, tier_url=f"{url}/{n}") as log:
            write(log, 100 * i, 100)
            deadline = time.monotonic() + 60
            while log.tier_status()["pending_segments"]:
                assert time.monotonic() < deadline, log.tier_status()
                time.sleep(0.01)
            end = max(s.start_offset + s.size for s in log.segments() if s.remote)
            uploaded[f"{url}/{n}"] = [r for r in records(log) if r[0] < end]
    assert all(len(r) > 10 for r in uploaded.values())
    return url, uploaded


def test_a_fleet_reads_with_keys_and_headers(fleet):
    url, uploaded = fleet
    table = rmqlog.to_arrow(url, columns=["store", *COLS])
    got: dict[str, list] = {}
    for batch in table.to_batches():
        for store, row in zip(batch.column("store").to_pylist(), rows([batch]), strict=True):
            got.setdefault(store, []).append(row)
    assert got == uploaded


# ---------------------------------------------------------------------------------------------
# Spark (one shared session: the ``spark`` fixture of conftest.py; skipped without java)

SPARK_COLS = "offset BIGINT, key BINARY, headers ARRAY<STRUCT<name: STRING, value: BINARY>>"


def _spark_rows(df) -> list[tuple[int, bytes | None, list]]:
    return sorted(
        (
            r.offset,
            None if r.key is None else bytes(r.key),
            [(h.name, bytes(h.value)) for h in r.headers],
        )
        for r in df.collect()
    )


def _want(recs) -> list[tuple[int, bytes | None, list]]:
    return sorted((off, key, headers) for off, _, key, headers in recs)


def test_spark_batch_and_stream_read_keys_and_headers(spark, dirs, tmp_path):
    from pyspark.sql import functions as F

    with CommitLog(dirs, segment_size=1 << 16) as log:
        write(log, 0, 120)
        want = records(log)
    paths = os.pathsep.join(map(str, dirs))
    df = spark.read.format("rmqlog").load(paths)
    assert df.columns == ["offset", "timestamp", "body", "segment", "key", "headers"]
    full = df.orderBy("offset").collect()
    assert [(r.offset, bytes(r.body)) for r in full] == [(o, b) for o, b, _, _ in want]
    assert _spark_rows(df) == _want(want)

    # A schema of the key alone, with filter pushdown on (loaded anew per query, as it asks):
    # the key is nullable, so IS [NOT] NULL on it is Spark's to apply, not the planner's.
    def keys():
        return spark.read.format("rmqlog").option("pushdown", "true").schema("key binary")

    no_key = sum(k is None for _, _, k, _ in want)
    assert keys().load(paths).filter(F.col("key").isNull()).count() == no_key
    assert keys().load(paths).filter(F.col("key").isNotNull()).count() == len(want) - no_key
    # A query on the headers' names.
    typed = spark.read.format("rmqlog").schema(SPARK_COLS).load(paths)
    assert typed.filter(F.array_contains("headers.name", "big")).count() == sum(
        any(n == "big" for n, _ in h) for _, _, _, h in want
    )
    # Streaming: the same columns, micro-batch by micro-batch.
    got: list = []
    q = (
        spark.readStream.format("rmqlog")
        .schema(SPARK_COLS)
        .option("max_records_per_trigger", 50)
        .load(paths)
        .writeStream.foreachBatch(lambda d, _: got.extend(_spark_rows(d)))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert q.exception() is None
    assert sorted(got) == _want(want)


def test_spark_reads_a_fleet_with_keys_and_headers(spark_session, fleet, tmp_path):
    url, uploaded = fleet
    want = sorted((s, *r) for s, recs in uploaded.items() for r in _want(recs))

    df = spark_session.read.format("rmqlog").schema(f"store STRING, {SPARK_COLS}").load(url)
    got = sorted(
        (
            r.store,
            r.offset,
            None if r.key is None else bytes(r.key),
            [(h.name, bytes(h.value)) for h in r.headers],
        )
        for r in df.collect()
    )
    assert got == want
    streamed: list = []
    q = (
        spark_session.readStream.format("rmqlog")
        .schema(f"{SPARK_COLS}, store STRING")
        .load(url)
        .writeStream.foreachBatch(
            lambda d, _: streamed.extend(
                (
                    r.store,
                    r.offset,
                    None if r.key is None else bytes(r.key),
                    [(h.name, bytes(h.value)) for h in r.headers],
                )
                for r in d.collect()
            )
        )
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert q.exception() is None
    assert sorted(streamed) == want
