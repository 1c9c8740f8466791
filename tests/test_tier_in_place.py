"""A ``file://`` tier on a local filesystem: a scan maps each object where it lies, checked whole
against the manifest, and copies nothing into the cache; what it mapped stays readable after
retention deletes the objects. On a FUSE filesystem (not taken for local: a network filesystem
may fault on a page of a file deleted elsewhere) the objects are copied, as from S3."""

from __future__ import annotations

import shutil
from pathlib import Path

from _tier import SEGMENT, append_records, remote_only

from rmqlog import CommitLog, CorruptionError


def _tiered(tmp_path: Path, tier_dir: Path) -> tuple[str, list[tuple[int, bytes]]]:
    """A store whose sealed segments are only in the tier at ``tier_dir``; the tier's URL and the
    records a read of it alone gives."""
    url = tier_dir.as_uri()
    with CommitLog(
        str(tmp_path / "store"), segment_size=SEGMENT, tier_url=url, local_retention_bytes=SEGMENT
    ) as log:
        recs = append_records(log, 300)
        remote_only(log)
        sealed_end = log.segments()[-1].start_offset
    return url, [(r.offset, r.body) for r in recs if r.offset < sealed_end]


def _scan(log: CommitLog) -> list[tuple[int, bytes]]:
    return [(o, bytes(b)) for o, b in log.scan()]


def _cache_files(cache: Path) -> list[Path]:
    return [p for p in cache.rglob("*") if p.is_file()]


def test_a_local_file_tier_is_mapped_in_place(tmp_path):
    tier = tmp_path / "tier"
    url, want = _tiered(tmp_path, tier)
    cache = tmp_path / "cache"
    cache.mkdir()
    with CommitLog(url, read_only=True, tier_cache_dir=str(cache)) as log:
        remote = len(log.segments())
        assert remote >= 4
        assert _scan(log) == want
        st = log.tier_status()
        assert st["mapped_in_place"] == st["downloads"] == remote, st
        assert st["range_reads"] == 0, st
        assert _cache_files(cache) == [], "nothing copied into the cache"
        # Retention deletes the objects: the segments mapped stay readable, from the cache.
        for obj in tier.iterdir():
            if obj.is_file() and obj.name.isdigit():
                obj.unlink()
        assert _scan(log) == want
        assert log.tier_status()["downloads"] == remote
    with CommitLog(url, read_only=True, tier_cache_dir=str(cache)) as log:
        try:
            _scan(log)
            raise AssertionError("a scan of deleted objects read something")
        except CorruptionError as e:
            assert "the object is missing" in str(e), e


def test_a_damaged_object_is_refused_before_it_is_mapped_for_a_scan(tmp_path):
    tier = tmp_path / "tier"
    url, _ = _tiered(tmp_path, tier)
    obj = sorted(p for p in tier.iterdir() if p.name.isdigit())[1]
    data = bytearray(obj.read_bytes())
    data[-1] ^= 0xFF  # in the segment's unused end: no record's CRC covers it
    obj.write_bytes(bytes(data))
    with CommitLog(url, read_only=True, tier_cache_dir=str(tmp_path)) as log:
        try:
            _scan(log)
            raise AssertionError("the damaged object was read")
        except CorruptionError as e:
            assert "CRC32C" in str(e) and obj.name in str(e), e


def test_a_file_tier_on_fuse_is_copied_into_the_cache(faultfs, tmp_path):
    # Written on the local disk, then copied onto the mount (faultfs has no link(2), which a
    # file:// upload uses to create an object without overwriting one).
    _, want = _tiered(tmp_path, tmp_path / "tier")
    shutil.copytree(tmp_path / "tier", faultfs.path / "tier")
    url = (faultfs.path / "tier").as_uri()
    cache = tmp_path / "cache"
    cache.mkdir()
    with CommitLog(url, read_only=True, tier_cache_dir=str(cache)) as log:
        remote = len(log.segments())
        assert _scan(log) == want
        st = log.tier_status()
        assert st["mapped_in_place"] == 0 and st["downloads"] == remote, st
        assert len(_cache_files(cache)) == remote
