"""Helpers shared by the state-machine, hostile-input and stress tests.

- ``LogModel``: an in-memory model of a commit log (offset -> body, in order, min/max offsets).
- ``predict_offsets``: where appends of given sizes land, rolls included, from the live segments.
- ``KILLED_WRITER``: a writer script run in a subprocess that is SIGKILLed mid-work.
- ``make_body``/``check_body``: self-describing bodies a reader in another process can verify
  without shared state.
"""

from __future__ import annotations

import bisect
import hashlib
import re
import textwrap

from rmqlog import HEADER_LEN, CommitLog

FILLER_MIN = 8  # fewer bytes left at the end of a segment are an implicit filler


class LogModel:
    """What the log should hold: records in offset order, min_offset and max_offset."""

    def __init__(self) -> None:
        self.bodies: dict[int, bytes] = {}
        self.offsets: list[int] = []  # sorted
        self.min_offset = 0
        self.max_offset = 0
        # Every max_offset the log ever had: a tailing reader may scan from any of them.
        self.past_ends: set[int] = {0}

    def add(self, offset: int, body: bytes, end: int) -> None:
        assert offset >= self.max_offset, (offset, self.max_offset)
        assert offset not in self.bodies
        self.bodies[offset] = body
        self.offsets.append(offset)
        self.max_offset = end
        self.past_ends.add(end)

    def drop_below(self, new_min: int) -> list[int]:
        """Forgets the records below ``new_min``; returns their offsets."""
        cut = bisect.bisect_left(self.offsets, new_min)
        gone = self.offsets[:cut]
        del self.offsets[:cut]
        for off in gone:
            del self.bodies[off]
        self.min_offset = new_min
        return gone

    def items(self, start: int | None = None, end: int | None = None) -> list[tuple[int, bytes]]:
        lo = 0 if start is None else bisect.bisect_left(self.offsets, start)
        hi = len(self.offsets) if end is None else bisect.bisect_left(self.offsets, end)
        return [(o, self.bodies[o]) for o in self.offsets[lo:hi]]

    def next_of(self, offset: int) -> int:
        """The offset after the record at ``offset``: the next record's, or max_offset."""
        i = bisect.bisect_right(self.offsets, offset)
        return self.offsets[i] if i < len(self.offsets) else self.max_offset


def record_end(offset: int, size: int, seg_end: int) -> int:
    """Where the record ends, as ``next_offset`` reports it (an implicit filler is skipped)."""
    end = offset + HEADER_LEN + size
    return seg_end if seg_end - end < FILLER_MIN else end


def predict_offsets(log: CommitLog, sizes: list[int], segment_size: int) -> list[tuple[int, int]]:
    """``(offset, next_offset)`` of sequential appends of bodies of ``sizes``, from the live
    segments and max_offset: a record that does not fit in the rest of a segment goes to the
    start of the next one, of ``segment_size``."""
    segs = log.segments()
    pos = log.max_offset
    seg_end = segs[-1].start_offset + segs[-1].size if segs else None
    out = []
    for n in sizes:
        if seg_end is None:  # no segment yet: the first one starts at max_offset
            seg_end = pos + segment_size
        elif pos + HEADER_LEN + n > seg_end:  # a roll: the rest of the segment is filler
            pos = seg_end
            seg_end = pos + segment_size
        end = record_end(pos, n, seg_end)
        out.append((pos, end))
        pos = end
    return out


# A writer in another process: opens the store, prints "open", appends the bodies given (hex,
# one per line on stdin) one by one, printing each offset as soon as append returns, then
# "done", then waits to be killed.
KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    from rmqlog import CommitLog
    dirs, segment_size, flush = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    bodies = [bytes.fromhex(line.strip()) for line in sys.stdin.read().splitlines()]
    log = CommitLog(dirs, segment_size=segment_size, flush=flush, flush_interval_ms=5,
                    clean_interval_ms=0, max_used_ratio=1.0)
    print("open", flush=True)
    for b in bodies:
        print(log.append(b), flush=True)
    print("done", flush=True)
    time.sleep(3600)
    """
)


def make_body(i: int) -> bytes:
    """Body of record ``i``: its number, a digest of it, then filler bytes derived from both.
    Sizes vary from 26 to ~2 KiB; any body can be checked from its own bytes."""
    digest = hashlib.sha256(b"%d" % i).digest()
    head = b"%d:%s:" % (i, digest[:8].hex().encode())
    size = (i * 7919) % 2000
    return head + (digest * (size // len(digest) + 1))[:size]


_HEAD = re.compile(rb"^(\d+):")


def check_body(body: bytes) -> int:
    """The record number of a body made by ``make_body``; raises AssertionError if the body is
    not exactly one ``make_body`` made (torn, shifted, mixed)."""
    m = _HEAD.match(body)
    assert m is not None, f"body without a record number: {body[:40]!r}"
    i = int(m.group(1))
    assert body == make_body(i), f"body of record {i} is damaged: {body[:60]!r}"
    return i
