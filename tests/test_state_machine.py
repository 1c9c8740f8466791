"""A hypothesis state machine drives one store against an in-memory model (``_model.LogModel``).

Rules: append and append_batch (rolls, exact fits, implicit fillers, empty batches, oversize
bodies that must write nothing), reads of records and of every other kind of offset, the
next_offset chain, scans with start/end, offset_for_timestamp, flush, truncate_before,
close + reopen, a read-only follower, and a writer in another process SIGKILLed at a random
point (whatever it reported survives; anything more is the next bodies it was given, in order).
Invariants after every step: min/max offsets equal the model's, the log ends at a record
boundary, segments are contiguous and cover [min_offset, max_offset).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest
from _model import KILLED_WRITER, LogModel, predict_offsets
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from rmqlog import (
    HEADER_LEN,
    ClosedError,
    CommitLog,
    InvalidOffsetError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
)

MAX_BODY = 3000
OPTIONS = {"clean_interval_ms": 0, "max_used_ratio": 1.0, "flush_interval_ms": 20}
FLUSH_MODES = ["async", "sync", "none"]


def pick(data, seq, label: str):
    """An element of ``seq`` (None if empty), chosen by a draw whose shape never depends on the
    state: a killed writer leaves a nondeterministic number of unacknowledged records, and
    hypothesis replays choice sequences, so a draw shaped by the state would be flaky."""
    i = data.draw(st.integers(0, 2**16), label=label)
    return seq[i % len(seq)] if seq else None


def kind(data, n: int, label: str) -> int:
    return data.draw(st.integers(0, n - 1), label=label)


def seg_key(log: CommitLog) -> list[tuple[int, str, int]]:
    return [(s.start_offset, s.path, s.size) for s in log.segments()]


def scan_list(log: CommitLog, start=None, end=None) -> list[tuple[int, bytes]]:
    return [(o, bytes(v)) for o, v in log.scan(start, end)]


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="rmqlog-sm-")
        self.model = LogModel()
        self.log: CommitLog | None = None
        self.follower: CommitLog | None = None
        self.counter = 0
        self.child: subprocess.Popen | None = None

    # -----------------------------------------------------------------------------------------
    # setup and helpers

    @initialize(
        segment_size=st.sampled_from([4096, 8192]),
        ndirs=st.integers(1, 3),
        flush=st.sampled_from(FLUSH_MODES),
    )
    def open_store(self, segment_size, ndirs, flush):
        self.segment_size = segment_size
        self.dirs = [os.path.join(self.tmp, f"d{i}") for i in range(ndirs)]
        self.log = self.open(flush)

    def open(self, flush: str) -> CommitLog:
        return CommitLog(self.dirs, segment_size=self.segment_size, flush=flush, **OPTIONS)

    def body(self, size: int) -> bytes:
        self.counter += 1
        head = b"<%d>" % self.counter
        return (head * (size // len(head) + 1))[:size]

    def sizes(self, data, label: str) -> int:
        """A body size: small, anything up to MAX_BODY, or one that just fits (or just does
        not) in the rest of the current segment, to hit exact fits and implicit fillers."""
        segs = self.log.segments()
        room = MAX_BODY
        if segs:
            room = segs[-1].start_offset + segs[-1].size - self.log.max_offset - HEADER_LEN
        near = [n for n in range(room - 9, room + 2) if 0 <= n <= self.segment_size - HEADER_LEN]
        k = kind(data, 3, f"{label} kind")
        n = data.draw(st.integers(0, MAX_BODY), label=label)
        close_fit = pick(data, near, f"{label} near the segment end")
        if k == 0:
            return n % 65
        if k == 1 or close_fit is None:
            return n
        return close_fit

    def too_large(self, data) -> int:
        limit = self.segment_size - HEADER_LEN
        return data.draw(st.integers(limit + 1, limit + 3 * self.segment_size), label="oversize")

    def add_appended(self, offsets, bodies, predicted) -> None:
        assert list(offsets) == [o for o, _ in predicted]
        for off, b in zip(offsets, bodies, strict=True):
            if off % self.segment_size == 0 and off:
                event("record at a segment start")
            if (off + HEADER_LEN + len(b)) % self.segment_size > self.segment_size - 8:
                event("record leaves an implicit filler")
        for off, b, (_, end) in zip(offsets, bodies, predicted, strict=True):
            self.model.add(off, b, end)
        assert self.log.max_offset == self.model.max_offset

    def check_all(self, log: CommitLog) -> None:
        """Everything in the model reads back; the scan is exactly the model."""
        assert log.min_offset == self.model.min_offset
        assert log.max_offset == self.model.max_offset
        assert scan_list(log) == self.model.items()
        assert len(log) == len(self.model.items())
        for off, b in self.model.items():
            assert bytes(log.read(off)) == b

    def teardown(self):
        if self.child is not None and self.child.poll() is None:
            self.child.kill()
            self.child.wait()
        for log in (self.follower, self.log):
            if log is not None:
                with contextlib.suppress(Exception):
                    log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -----------------------------------------------------------------------------------------
    # appends

    @rule(data=st.data())
    def append(self, data):
        b = self.body(self.sizes(data, "size"))
        predicted = predict_offsets(self.log, [len(b)], self.segment_size)
        off = self.log.append(b)
        self.add_appended([off], [b], predicted)
        assert bytes(self.log.read(off)) == b

    @rule(data=st.data(), as_generator=st.booleans())
    def append_batch(self, data, as_generator):
        n = data.draw(st.integers(0, 6), label="count")
        bodies = [self.body(self.sizes(data, f"size[{i}]")) for i in range(n)]
        predicted = predict_offsets(self.log, [len(b) for b in bodies], self.segment_size)
        arg = (b for b in bodies) if as_generator else bodies
        offsets = self.log.append_batch(arg)
        assert isinstance(offsets, list)
        self.add_appended(offsets, bodies, predicted)

    @rule(data=st.data(), batch=st.booleans())
    def append_too_large(self, data, batch):
        """An oversize body (alone or anywhere in a batch) is refused and nothing is written."""
        end, segs = self.log.max_offset, seg_key(self.log)
        big = b"x" * self.too_large(data)
        with pytest.raises(MessageTooLargeError):
            if batch:
                bodies = [self.body(data.draw(st.integers(0, 500))) for _ in range(3)]
                bodies.insert(data.draw(st.integers(0, 3), label="where"), big)
                self.log.append_batch(bodies)
            else:
                self.log.append(big)
        assert self.log.max_offset == end
        assert seg_key(self.log) == segs

    # -----------------------------------------------------------------------------------------
    # reads

    @rule(data=st.data())
    def read_existing(self, data):
        off = pick(data, self.model.offsets, "offset")
        if off is None:
            return
        assert bytes(self.log.read(off)) == self.model.bodies[off]
        rec = self.log.read_record(off)
        assert rec.offset == off
        assert bytes(rec.body) == self.model.bodies[off]
        assert rec.next_offset == self.model.next_of(off)

    @rule(data=st.data())
    def read_other(self, data):
        """Any int that is not a record start: out of range outside [min, max), else invalid;
        never data."""
        m = self.model
        near = [m.min_offset - 1, m.min_offset, m.max_offset, m.max_offset + 1, 2**64, -(2**63)]
        for off in m.offsets[-5:] + m.offsets[:3]:
            near += [off + 1, off + HEADER_LEN - 1, off + HEADER_LEN, off - 1]
        for s in self.log.segments():
            end = s.start_offset + s.size
            near += [end - 1, end - 8, end + 1]
        x = [
            pick(data, near, "near a boundary"),
            data.draw(st.integers(-(2**70), 2**70), label="any"),
            data.draw(st.integers(-10, 10**6), label="small") % (m.max_offset + 11) - 10,
        ][kind(data, 3, "offset kind")]
        if x in m.bodies:
            return
        expected = (
            OffsetOutOfRangeError if x < m.min_offset or x >= m.max_offset else InvalidOffsetError
        )
        with pytest.raises(expected):
            self.log.read(x)
        with pytest.raises(expected):
            self.log.read_record(x)

    @rule()
    def read_record_chain(self):
        """next_offset links every record, from min_offset to exactly max_offset, and the
        timestamps never go down."""
        off, seen, last_ts = self.log.min_offset, [], 0
        while off < self.log.max_offset:
            rec = self.log.read_record(off)
            assert rec.timestamp_ms >= last_ts
            last_ts = rec.timestamp_ms
            seen.append(off)
            assert rec.next_offset > off
            off = rec.next_offset
        assert off == self.model.max_offset
        assert seen == self.model.offsets

    @rule(data=st.data())
    def scan(self, data):
        m = self.model
        start = [
            None,
            pick(data, sorted(m.past_ends), "start: a past max_offset"),
            pick(data, m.offsets, "start: a record"),
        ][kind(data, 3, "start kind")]
        span = m.max_offset - m.min_offset + 2 * self.segment_size + 6
        end = [
            None,
            m.min_offset - 5 + data.draw(st.integers(0, 10**6), label="end") % span,
            pick(data, [*m.offsets[-3:], 2**64, 2**63 - 1], "end: a record or huge"),
        ][kind(data, 3, "end kind")]
        if start is not None and start < m.min_offset:
            with pytest.raises(OffsetOutOfRangeError):
                scan_list(self.log, start, end)
            return
        assert scan_list(self.log, start, end) == m.items(start, end)
        assert self.log.records_between(start, end) == len(m.items(start, end))

    @rule(data=st.data())
    def offset_for_timestamp(self, data):
        stamps = [(o, self.log.read_record(o).timestamp_ms) for o in self.model.offsets]
        candidates = [0, 1, 2**63] + [
            t + d for _, t in stamps[-5:] + stamps[:2] for d in (-1, 0, 1)
        ]
        ts = pick(data, candidates, "ts")
        expected = next((o for o, t in stamps if t >= ts), self.model.max_offset)
        assert self.log.offset_for_timestamp(ts) == expected

    # -----------------------------------------------------------------------------------------
    # flush, clean, reopen, followers, crashes

    @rule()
    def flush(self):
        assert self.log.flush() == self.model.max_offset
        assert self.log.flushed_offset == self.log.max_offset

    @rule(data=st.data())
    def truncate_before(self, data):
        before = self.log.segments()
        bounds = [s.start_offset + d for s in before for d in (-1, 0, 1)]
        bounds += [s.start_offset + s.size + d for s in before for d in (-1, 0)]
        span = self.model.max_offset + 2 * self.segment_size + 11
        x = [
            pick(data, bounds or [0], "x: near a segment boundary"),
            data.draw(st.integers(0, 10**6), label="x") % span - 10,
        ][kind(data, 2, "x kind")]
        # The sealed segments (all but the last) that end at or before x, as a prefix.
        gone = 0
        while gone < len(before) - 1 and before[gone].start_offset + before[gone].size <= x:
            gone += 1
        expected_min = before[gone].start_offset if gone else self.model.min_offset

        if x < 0:
            event("truncate_before a negative offset")
            with pytest.raises(OffsetOutOfRangeError):
                self.log.truncate_before(x)
            assert [(s.start_offset, s.path) for s in self.log.segments()] == [
                (s.start_offset, s.path) for s in before
            ]
            return
        event(f"truncate_before deletes {min(gone, 2)}+ segments")
        new_min = self.log.truncate_before(x)
        assert new_min == expected_min == self.log.min_offset
        if gone:
            assert new_min in {s.start_offset for s in before}
        after = self.log.segments()
        assert [(s.start_offset, s.path) for s in after] == [
            (s.start_offset, s.path) for s in before[gone:]
        ]
        for s in before[:gone]:
            assert not os.path.exists(s.path), s.path
        dropped = self.model.drop_below(new_min)
        for off in dropped:
            with pytest.raises(OffsetOutOfRangeError):
                self.log.read(off)
        for off, b in self.model.items():
            assert bytes(self.log.read(off)) == b

    @rule(force=st.booleans())
    def clean_deletes_nothing_young(self, force):
        """A cleaning pass with the default retention (72 h), no size limit and no disk
        pressure deletes nothing: every segment is young."""
        segs = seg_key(self.log)
        assert self.log.clean(force) == 0
        assert seg_key(self.log) == segs
        assert self.log.min_offset == self.model.min_offset

    @rule(flush=st.sampled_from(FLUSH_MODES), data=st.data())
    def close_and_reopen(self, flush, data):
        self.log.close()
        assert self.log.closed
        with pytest.raises(ClosedError):
            self.log.read(self.model.min_offset)
        with pytest.raises(ClosedError):
            self.log.append(b"after close")
        self.log.close()  # a second close does nothing
        self.log = self.open(flush)
        self.check_all(self.log)
        # Appends continue where the log ended.
        b = self.body(self.sizes(data, "size"))
        predicted = predict_offsets(self.log, [len(b)], self.segment_size)
        self.add_appended([self.log.append(b)], [b], predicted)

    @rule(reopen=st.booleans())
    def follower(self, reopen):
        """A read-only follower (kept across steps, refreshed) sees exactly the model."""
        if reopen and self.follower is not None:
            self.follower.close()
            self.follower = None
        if self.follower is None:
            self.follower = CommitLog(self.dirs[-1], read_only=True)
        assert self.follower.refresh() == self.model.max_offset
        self.check_all(self.follower)

    @rule(data=st.data(), flush=st.sampled_from(FLUSH_MODES))
    def kill_writer_process(self, data, flush):
        """The writer moves to another process, appends, and is SIGKILLed after reporting
        ``k`` offsets: all ``k`` survive; anything more is the next bodies, in order."""
        n = data.draw(st.integers(0, 8), label="count")
        bodies = [self.body(self.sizes(data, f"size[{i}]")) for i in range(n)]
        k = data.draw(st.integers(0, n), label="kill after")
        predicted = predict_offsets(self.log, [len(b) for b in bodies], self.segment_size)
        old_max = self.model.max_offset
        self.log.close()
        self.log = None

        self.child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                KILLED_WRITER,
                os.pathsep.join(self.dirs),
                str(self.segment_size),
                flush,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.child.stdin.write("".join(b.hex() + "\n" for b in bodies))
        self.child.stdin.close()
        assert self.child.stdout.readline().strip() == "open"
        reported = [int(self.child.stdout.readline()) for _ in range(k)]
        self.child.send_signal(signal.SIGKILL)
        self.child.wait(timeout=30)
        self.child.stdout.close()
        assert self.child.returncode == -signal.SIGKILL
        self.child = None
        assert reported == [o for o, _ in predicted[:k]]

        self.log = self.open(flush)
        found = scan_list(self.log, start=old_max)
        assert len(found) >= k
        event(f"killed writer: {len(found) - k} unreported records survived")
        assert found == [(o, b) for (o, _), b in zip(predicted, bodies, strict=False)][: len(found)]
        self.add_appended([o for o, _ in found], [b for _, b in found], predicted[: len(found)])
        self.check_all(self.log)

    # -----------------------------------------------------------------------------------------
    # invariants

    @invariant()
    def offsets_and_segments_are_consistent(self):
        log = self.log
        if log is None:
            return
        lo, hi = log.min_offset, log.max_offset
        assert lo <= hi
        assert (lo, hi) == (self.model.min_offset, self.model.max_offset)
        assert len(log) == len(self.model.offsets)
        assert log.flushed_offset <= hi
        segs = log.segments()
        for a, b in itertools.pairwise(segs):
            assert a.start_offset + a.size == b.start_offset, (a, b)
        if segs:
            assert segs[0].start_offset == lo
            assert segs[-1].start_offset <= hi <= segs[-1].start_offset + segs[-1].size
        else:
            assert lo == hi
        if self.model.offsets:
            last = self.model.offsets[-1]
            assert log.read_record(last).next_offset == hi
            assert self.model.offsets[0] == lo
        else:
            assert lo == hi


TestCommitLogStateMachine = LogMachine.TestCase
TestCommitLogStateMachine.settings = settings(
    max_examples=int(os.environ.get("RMQLOG_SM_EXAMPLES", "40")),
    stateful_step_count=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
