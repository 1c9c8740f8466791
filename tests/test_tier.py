"""The remote tier on both stores (moto's S3 server, a file:// directory): sealed segments
uploaded and read back across tiers, the objects and the manifest as a reader of the store sees
them, followers and URL-only opens, reopen, tier_after, and retention over both tiers."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest
from _tier import (
    SEGMENT,
    append_records,
    check_reads,
    crc32c,
    listed,
    manifest,
    object_name,
    objects,
    remote_only,
    status_when,
    tier_kwargs,
    uploaded,
    wait_for,
)

from rmqlog import CommitLog, OffsetOutOfRangeError

# About 60 records of 1000 bytes a segment: 600 records fill 9 segments and part of a tenth.
N = 600


def test_crc32c_helper_matches_the_standard_check_value():
    assert crc32c(b"123456789") == 0xE3069283


def test_reads_across_tiers(make_log, tier):
    log = make_log(segment_size=SEGMENT, local_retention_bytes=SEGMENT, **tier_kwargs(tier))
    recs = append_records(log, N)
    st = remote_only(log)
    segs = log.segments()
    assert len(segs) >= 10
    assert st["local_segments"] + st["remote_segments"] + st["both_segments"] == len(segs)
    assert st["remote_segments"] == len(segs) - 1 and st["uploads"] == len(segs) - 1
    assert st["local_deleted"] == len(segs) - 1
    for s in segs[:-1]:
        assert (s.local, s.remote, s.sealed) == (False, True, True), s
        assert s.path == f"{tier.url}/{object_name(s.start_offset)}"
    assert (segs[-1].local, segs[-1].remote, segs[-1].sealed) == (True, False, False)

    check_reads(log, recs)
    assert [(off, bytes(b)) for off, b in log.scan()] == [(r.offset, r.body) for r in recs]
    mid = recs[N // 2].offset
    assert next(iter(log.scan(mid)))[0] == mid
    table = pa.Table.from_batches(list(log.scan_batches()))
    assert table.column("offset").to_pylist() == [r.offset for r in recs]
    assert table.column("body").to_pylist() == [r.body for r in recs]
    assert table.column("timestamp").cast(pa.int64()).to_pylist() == [r.timestamp_ms for r in recs]
    for r in recs[:: N // 7] + recs[-1:]:
        first = next(x for x in recs if x.timestamp_ms >= r.timestamp_ms)
        assert log.offset_for_timestamp(r.timestamp_ms) == first.offset
    assert log.offset_for_timestamp(recs[0].timestamp_ms - 10_000) == recs[0].offset
    assert log.offset_for_timestamp(recs[-1].timestamp_ms + 1) == log.max_offset
    st = log.tier_status()
    assert st["range_reads"] > 0 and st["downloads"] == len(segs) - 1
    assert st["fetched_bytes"] >= st["remote_bytes"] == (len(segs) - 1) * SEGMENT
    stats = log.stats()
    assert stats["tier_uploads"] == len(segs) - 1 and stats["tier_last_error"] is None


def test_a_scan_downloads_the_next_remote_segment_while_it_reads_one(make_log, tier):
    """The scan's first batch brings its segment, and the next remote segment downloads in the
    background while the scan stays there; each is downloaded once in all. (Small batches on one
    worker: the scan is then at most two batches into the first segment.)"""
    log = make_log(segment_size=SEGMENT, local_retention_bytes=SEGMENT, **tier_kwargs(tier))
    recs = append_records(log, 300)
    remote = len(log.segments()) - 1
    assert remote >= 4
    remote_only(log)
    with CommitLog(tier.url, read_only=True, tier_options=tier.options or None) as url_log:
        scan = iter(url_log.scan_batches(max_records=10, threads=1, body="binary"))
        batches = [next(scan)]
        st = status_when(url_log, lambda s: s["downloads"] >= 2, "the next segment prefetched")
        assert st["downloads"] == 2, st  # that one only: the scan is still in the first
        batches += list(scan)
        got = pa.Table.from_batches(batches)
        assert got.column("offset").to_pylist() == [r.offset for r in recs[: got.num_rows]]
        assert got.column("body").to_pylist() == [r.body for r in recs[: got.num_rows]]
        assert url_log.tier_status()["downloads"] == remote  # each once
    # A scan left in its first segment, then a close: the prefetch thread ends with the close.
    with CommitLog(tier.url, read_only=True, tier_options=tier.options or None) as url_log:
        next(iter(url_log.scan_batches(max_records=10, threads=1)))
    assert prefetch_threads() == 0


def prefetch_threads() -> int:
    """This process's threads named rmqlog-prefetch."""
    names = []
    for comm in Path("/proc/self/task").glob("*/comm"):
        try:
            names.append(comm.read_text().strip())
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return names.count("rmqlog-prefetch")


def test_point_reads_fetch_each_byte_about_once(make_log, tier):
    """Reading every record of remote segments in order costs one 64 KiB range request per
    window, not one per record: a record an earlier window brought is read from the cache."""
    big = 1 << 20
    log = make_log(segment_size=big, local_retention_bytes=big, **tier_kwargs(tier))
    recs = append_records(log, 2300)
    st = remote_only(log)
    assert st["remote_segments"] == 2
    for r in recs:
        if r.offset < 2 * big:
            assert bytes(log.read(r.offset)) == r.body
    st = log.tier_status()
    windows = 2 * (big // (64 << 10) + 1)
    assert st["downloads"] == 0 and 2 * 16 <= st["range_reads"] <= windows, st
    assert st["fetched_bytes"] <= st["remote_bytes"] + windows * 1024, st
    assert st["cache_bytes"] <= st["remote_bytes"]


def test_objects_and_manifest(make_log, tier):
    log = make_log(segment_size=SEGMENT, **tier_kwargs(tier))
    append_records(log, 300)
    st = uploaded(log)
    segs = log.segments()
    sealed = [s for s in segs if s.sealed]
    assert len(sealed) >= 4 and st["both_segments"] == len(sealed)
    names = objects(tier)
    assert names == [object_name(s.start_offset) for s in sealed]
    assert all(len(n) == 20 and n.isdigit() for n in names)

    m = manifest(tier)
    assert m["version"] == st["manifest_version"] >= len(sealed)
    assert m["min_offset"] == log.min_offset == 0
    assert f"manifest/{m['version']:020d}.json" in tier.keys()
    assert [e["start"] for e in m["segments"]] == [s.start_offset for s in sealed]
    for e, s in zip(m["segments"], sealed, strict=True):
        data = tier.read(object_name(e["start"]))
        assert len(data) == e["size"] == s.size == SEGMENT
        assert crc32c(data) == e["crc32c"]
        assert e["written"] == s.written
        with open(s.path, "rb") as f:
            assert f.read() == data
        if tier.kind == "s3":
            head = tier.client.head_object(
                Bucket=tier.bucket, Key=f"{tier.prefix}/{object_name(e['start'])}"
            )
            assert head["Metadata"] == {
                "rmqlog-crc32c": f"{e['crc32c']:08x}",
                "rmqlog-length": str(e["size"]),
            }


def url_log(tier, **kwargs) -> CommitLog:
    """The tier opened by its URL alone."""
    return CommitLog(tier.url, read_only=True, tier_options=tier.options or None, **kwargs)


def test_follower_and_url_open_see_the_same_records(make_log, dirs, tier):
    log = make_log(segment_size=SEGMENT, local_retention_bytes=2 * SEGMENT, **tier_kwargs(tier))
    recs = append_records(log, N)
    remote_only(log, keep_local=2)
    log.flush()
    # A follower of the local store finds the tier in the checkpoint; S3 needs its options again.
    follower = make_log(read_only=True, **(tier_kwargs(tier) if tier.kind == "s3" else {}))
    assert follower.tier_status()["url"] == tier.url
    check_reads(follower, recs)
    with url_log(tier) as remote:
        # The URL open sees the uploaded (sealed) segments: every record below the active one.
        active = log.segments()[-1].start_offset
        up = [r for r in recs if r.offset < active]
        end = log.read_record(up[-1].offset).next_offset
        assert (remote.min_offset, remote.max_offset) == (0, end)
        assert remote.paths == []
        check_reads(remote, up)
        assert all(s.remote and not s.local for s in remote.segments())
        assert remote.verify() == []

        more = append_records(log, N // 2, first=N)
        remote_only(log, keep_local=2)
        log.flush()
        assert remote.refresh() > up[-1].offset
        active = log.segments()[-1].start_offset
        up = [r for r in recs + more if r.offset < active]
        assert remote.max_offset == log.read_record(up[-1].offset).next_offset
        check_reads(remote, up)
        follower.refresh()
        check_reads(follower, recs + more)


def test_url_open_needs_no_segment_size(make_log, tier):
    log = make_log(segment_size=SEGMENT, **tier_kwargs(tier))
    recs = append_records(log, 200)
    uploaded(log)
    active = log.segments()[-1].start_offset
    with url_log(tier) as remote:
        check_reads(remote, [r for r in recs if r.offset < active])
        assert [s.size for s in remote.segments()] == [SEGMENT] * len(remote.segments())


def test_reopen_reads_everything_and_appends_continue(make_log, tier):
    log = make_log(segment_size=SEGMENT, local_retention_bytes=SEGMENT, **tier_kwargs(tier))
    recs = append_records(log, N)
    remote_only(log)
    log.close()
    # file:// needs nothing: the store recorded its tier. S3 needs the endpoint again.
    again = make_log(segment_size=SEGMENT, **(tier_kwargs(tier) if tier.kind == "s3" else {}))
    st = again.tier_status()
    assert st["url"] == tier.url and st["pending_segments"] == 0
    assert st["remote_segments"] == len(again.segments()) - 1
    check_reads(again, recs)
    more = append_records(again, N // 2, first=N)
    uploaded(again)
    check_reads(again, recs + more)
    assert listed(tier) == [s.start_offset for s in again.segments() if s.sealed]
    assert again.verify(remote=True) == []


def test_reopen_with_another_tier_url_is_refused(make_log, tmp_path, tier):
    log = make_log(segment_size=SEGMENT, **tier_kwargs(tier))
    append_records(log, 100)
    uploaded(log)
    log.close()
    other = (tmp_path / "elsewhere").as_uri()
    with pytest.raises(Exception, match="not this store's tier") as info:
        make_log(segment_size=SEGMENT, tier_url=other)
    assert tier.url in str(info.value) and other in str(info.value)


def test_tier_after_delays_uploads(make_log, tier):
    after = 2.0
    log = make_log(segment_size=SEGMENT, tier_after=after, **tier_kwargs(tier))
    started = time.monotonic()
    append_records(log, 200)
    sealed = sum(s.sealed for s in log.segments())
    # Without tier_after the thread uploads one segment every 100 ms pass.
    time.sleep(max(0.0, started + after / 2 - time.monotonic()))
    st = log.tier_status()
    assert time.monotonic() - started < after, "the machine is too slow for this check"
    assert st["uploads"] == 0 and st["pending_segments"] == sealed >= 3
    uploaded(log)
    assert time.monotonic() - started >= after
    assert listed(tier) == [s.start_offset for s in log.segments() if s.sealed]


def test_truncate_before_removes_remote_segments(make_log, tier):
    log = make_log(segment_size=SEGMENT, local_retention_bytes=3 * SEGMENT, **tier_kwargs(tier))
    recs = append_records(log, N)
    remote_only(log, keep_local=3)
    segs = log.segments()
    cut = segs[5].start_offset
    before = manifest(tier)
    assert log.truncate_before(cut) == cut == log.min_offset
    st = status_when(
        log, lambda s: s["remote_deleted"] == 5, "5 objects deleted below the new head"
    )
    assert st["manifest_version"] > before["version"]
    m = manifest(tier)
    assert m["min_offset"] == cut and listed(tier)[0] == cut
    assert objects(tier) == [object_name(s.start_offset) for s in segs[5:] if s.sealed]
    assert [s.start_offset for s in log.segments()] == [s.start_offset for s in segs[5:]]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(recs[0].offset)
    check_reads(log, [r for r in recs if r.offset >= cut])
    with url_log(tier) as remote:
        assert remote.min_offset == cut
        check_reads(remote, [r for r in recs if cut <= r.offset < segs[-1].start_offset])


def test_retention_bytes_removes_remote_segments(make_log, tier):
    log = make_log(
        segment_size=SEGMENT,
        retention_bytes=4 * SEGMENT,
        clean_interval_ms=0,  # cleaning passes by hand: after the uploads, so objects go too
        local_retention_bytes=2 * SEGMENT,
        **tier_kwargs(tier),
    )
    recs = append_records(log, 2 * N)
    log.flush()  # only durable segments are uploaded
    status_when(log, lambda s: s["pending_segments"] == 0, "every sealed segment uploaded")
    while log.clean(force=True):  # at most max_deletes_per_pass segments a pass
        pass
    # Deleting a segment must leave at least retention_bytes: 4 full ones and the active one.
    assert len(log.segments()) <= 5
    st = status_when(
        log,
        lambda s: s["remote_deleted"] > 0 and s["pending_segments"] == 0,
        "objects below the head deleted",
    )
    assert st["last_error"] is None
    head = log.min_offset
    assert head > 0 and log.segments()[0].start_offset == head
    wait_for(lambda: manifest(tier)["min_offset"] == head, "the manifest's head moved")
    sealed = [object_name(s.start_offset) for s in log.segments() if s.sealed]
    wait_for(lambda: objects(tier) == sealed, f"only {sealed} left in the tier")
    assert listed(tier) == [s.start_offset for s in log.segments() if s.sealed]
    check_reads(log, [r for r in recs if r.offset >= head])
