"""The per-record paths (`read`, `read_record`, `scan`, `append`, `append_batch` of a list):
each record's memoryview is made straight from its segment's exporter, with nothing leaked and
nothing of one export left over for the next."""

from __future__ import annotations

import gc
import random
import sys

import pytest


@pytest.fixture
def filled(make_log, body):
    """``make(tmp_path)``: a log over one directory with several 4 KiB segments, and what it
    holds: ``{offset: body}``."""

    def make(tmp_path, n=200):
        log = make_log([tmp_path / "d"], clean_interval_ms=0)
        written = {log.append(body(i, 20 + i % 50)): body(i, 20 + i % 50) for i in range(n)}
        assert len(log.segments()) > 2
        return log, written

    return make


def _views(log, written):
    offsets = sorted(written)
    yield from ((o, log.read(o)) for o in offsets)
    yield from ((o, log.read_record(o).body) for o in offsets)
    yield from log.scan()


def test_every_path_hands_out_its_record_bytes(tmp_path, filled):
    log, written = filled(tmp_path)
    seen = 0
    for off, view in _views(log, written):
        assert isinstance(view, memoryview)
        assert view.readonly
        assert (view.nbytes, view.format, view.ndim) == (len(written[off]), "B", 1)
        assert bytes(view) == written[off], off
        seen += 1
    assert seen == 3 * len(written)


def test_the_exporter_still_exports_its_whole_segment(tmp_path, filled):
    """A record's range is set on its segment's exporter for that one export only: an export
    asked for afterwards (``memoryview(view.obj)``) is the whole map again."""
    log, written = filled(tmp_path)
    sizes = {s.start_offset: s.size for s in log.segments()}
    for off, view in _views(log, written):
        start = max(s for s in sizes if s <= off)
        whole = memoryview(view.obj)
        assert whole.nbytes == sizes[start]
        pos = off - start + 32  # the body follows the 32-byte header
        assert whole[pos : pos + view.nbytes] == view


def test_views_of_one_segment_share_its_exporter(tmp_path, filled):
    log, written = filled(tmp_path)
    first = log.segments()[0]
    offsets = [o for o in sorted(written) if o < first.start_offset + first.size]
    exporters = {id(log.read(o).obj) for o in offsets} | {
        id(v.obj) for o, v in log.scan(offsets[0], offsets[-1] + 1)
    }
    assert len(exporters) == 1


def test_random_reads_over_many_segments_leak_nothing(tmp_path, filled):
    """Reads spread over every segment (the exporter cache switching between them) allocate
    nothing that outlives them."""
    log, written = filled(tmp_path, n=400)
    offsets = sorted(written)
    rng = random.Random(7)
    picks = [rng.choice(offsets) for _ in range(50_000)]
    read, read_record = log.read, log.read_record
    for o in picks[:1000]:
        read(o)
        read_record(o)
    gc.collect()
    before = sys.getallocatedblocks()
    for o in picks:
        read(o)
        read_record(o)
    gc.collect()
    grown = sys.getallocatedblocks() - before
    assert grown < 500, f"{2 * len(picks)} reads grew the allocated blocks by {grown}"


def test_offsets_are_plain_ints_in_order(tmp_path, make_log, body):
    """append_batch's list and scan's pairs hold plain ints (built from signed values now)."""
    log = make_log([tmp_path / "d"], clean_interval_ms=0)
    bodies = [body(i, 60) for i in range(300)]
    offsets = log.append_batch(bodies)
    assert type(offsets) is list and all(type(o) is int for o in offsets)
    assert offsets == sorted(offsets) and len(set(offsets)) == len(bodies)
    pairs = list(log.scan())
    assert all(type(p) is tuple and len(p) == 2 and type(p[0]) is int for p in pairs)
    assert [o for o, _ in pairs] == offsets
    assert [bytes(v) for _, v in pairs] == bodies
