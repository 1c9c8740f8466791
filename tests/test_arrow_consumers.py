"""Polars, DuckDB and pandas read a log through its Arrow stream (``BatchScan.__arrow_c_stream__``)
or ``rmqlog.to_arrow``, and get what ``scan()`` gives."""

from __future__ import annotations

import datetime as dt

import pytest

import rmqlog

pl = pytest.importorskip("polars")
duckdb = pytest.importorskip("duckdb")

N = 300


@pytest.fixture
def log(make_log):
    """300 records of 0 to 299 bytes over many 4 KiB segments."""
    log = make_log()
    log.append_batch([bytes([i % 251]) * i for i in range(N)])
    assert len(log.segments()) > 5
    return log


def expected(log):
    offsets, lengths = [], []
    for off, body in log.scan():
        offsets.append(off)
        lengths.append(len(body))
    return offsets, lengths


@pytest.mark.parametrize("body", ["view", "binary"])
def test_polars_dataframe_of_the_stream(log, body):
    offsets, lengths = expected(log)
    df = pl.DataFrame(log.scan_batches(columns=["offset", "timestamp", "body"], body=body))
    assert df.columns == ["offset", "timestamp", "body"]
    assert df.schema["offset"] == pl.Int64
    assert df.schema["timestamp"] == pl.Datetime("ms", "UTC")
    assert df.schema["body"] == pl.Binary
    assert df["offset"].to_list() == offsets
    assert df.select(pl.col("body").bin.size())["body"].to_list() == lengths
    assert df["body"][7] == bytes([7]) * 7


def test_polars_from_arrow_gives_a_struct_series(log):
    offsets, _ = expected(log)
    series = pl.from_arrow(log.scan_batches(columns=["offset", "segment"], max_records=64))
    assert isinstance(series, pl.Series)
    assert series.dtype == pl.Struct({"offset": pl.Int64, "segment": pl.Int64})
    frame = series.struct.unnest()
    assert frame["offset"].to_list() == offsets
    segs = [s.start_offset for s in log.segments()]
    assert frame["segment"].to_list() == [max(s for s in segs if s <= o) for o in offsets]


def test_polars_lazy_query(log):
    offsets, lengths = expected(log)
    df = pl.DataFrame(log.scan_batches(max_records=50))
    out = (
        df.lazy()
        .filter(pl.col("offset") >= offsets[100])
        .select(pl.len(), pl.col("body").bin.size().sum(), pl.col("offset").max())
        .collect()
    )
    assert out.row(0) == (N - 100, sum(lengths[100:]), offsets[-1])


@pytest.mark.parametrize("body", ["view", "binary"])
def test_duckdb_reads_the_stream(log, body):
    offsets, lengths = expected(log)
    scan = log.scan_batches(body=body, max_records=64)
    got = duckdb.sql('select count(*), sum(octet_length(body)), max("offset") from scan').fetchall()
    assert got == [(N, sum(lengths), offsets[-1])]
    # the export did not advance the scan: a second query reads it all again
    again = duckdb.sql('select count(*) from scan where "offset" >= 0').fetchall()
    assert again == [(N,)]
    assert scan.position == offsets[0]


def test_duckdb_types_and_a_filter(log):
    offsets, lengths = expected(log)
    scan = log.scan_batches(columns=["offset", "timestamp", "body", "segment"])
    rel = duckdb.sql(
        f'select "offset", timestamp, octet_length(body), segment from scan '
        f'where "offset" between {offsets[10]} and {offsets[19]} order by "offset"'
    )
    assert rel.types == ["BIGINT", "TIMESTAMP WITH TIME ZONE", "BIGINT", "BIGINT"]
    rows = rel.fetchall()
    assert [r[0] for r in rows] == offsets[10:20]
    assert [r[2] for r in rows] == lengths[10:20]
    assert scan.position == offsets[0]  # DuckDB found it by its name
    ts = log.read_record(offsets[10]).timestamp_ms
    assert rows[0][1] == dt.datetime.fromtimestamp(ts / 1000, dt.UTC)


def test_duckdb_over_to_arrow(log):
    offsets, lengths = expected(log)
    records = rmqlog.to_arrow(log, offsets[5], offsets[50])
    got = duckdb.sql("select count(*), sum(octet_length(body)) from records").fetchall()
    assert got == [(45, sum(lengths[5:50]))]
    assert records.num_rows == 45


def test_pandas_from_the_binary_layout(log):
    pytest.importorskip("pandas")
    offsets, _ = expected(log)
    frame = rmqlog.to_arrow(log, body="binary").to_pandas()
    assert list(frame.columns) == ["offset", "timestamp", "body"]
    assert frame["offset"].tolist() == offsets
    assert frame["body"][9] == bytes([9]) * 9
    assert str(frame["timestamp"].dtype) == "datetime64[ms, UTC]"


def test_a_corrupt_record_fails_each_consumer_with_its_message(make_log):
    """The C stream interface carries a message only: each consumer raises its own error type,
    naming the file and the offset."""
    log = make_log(flush="sync")
    offs = log.append_batch([b"%03d" % i * 100 for i in range(40)])
    seg = next(s for s in log.segments() if s.start_offset <= offs[25] < s.start_offset + s.size)
    log.close()
    with open(seg.path, "r+b") as f:
        f.seek(offs[25] - seg.start_offset + rmqlog.HEADER_LEN + 5)
        f.write(b"!")
    ro = make_log(read_only=True)
    want = f"corruption in {seg.path} at offset {offs[25]}"
    with pytest.raises(pl.exceptions.ComputeError, match=want):
        pl.DataFrame(ro.scan_batches())
    scan = ro.scan_batches()
    with pytest.raises(duckdb.Error, match=want):
        duckdb.sql("select count(*) from scan").fetchall()
    with pytest.raises(rmqlog.CorruptionError, match=want):
        list(scan)  # iterating in Python gives rmqlog's own exception
