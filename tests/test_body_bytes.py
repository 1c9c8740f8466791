"""``body="bytes"``: every call that hands out bodies (read, read_record, scan, a following scan,
Consumer.poll exclusive and shared) gives ``bytes`` equal to the memoryviews' contents, which
``json.loads`` and pickle take and which outlive the log and its files; a bad ``body`` is refused,
naming the choices, before anything is read."""

from __future__ import annotations

import gc
import json
import pickle
import shutil

import pytest

BODIES = [json.dumps({"n": i, "pad": "x" * (i * 37 % 300)}).encode() for i in range(40)]
BODIES.append(b"")  # an empty body is b"", not a view of nothing


@pytest.fixture
def log(make_log):
    log = make_log()  # 4 KiB segments: the records span several
    log.append_batch(BODIES)
    assert len(log.segments()) > 1
    return log


def reads(log, body=None):
    """Each call that hands out bodies, as a function of ``body=`` giving ``[(offset, body)]``."""
    kw = {} if body is None else {"body": body}
    offsets = [o for o, _ in log.scan()]
    end = log.max_offset
    return {
        "read": lambda: [(o, log.read(o, **kw)) for o in offsets],
        "read_record": lambda: [(o, log.read_record(o, **kw).body) for o in offsets],
        "scan": lambda: list(log.scan(**kw)),
        "scan(follow=True)": lambda: list(log.scan(follow=True, timeout=5, end=end, **kw)),
        "poll": lambda: _poll(log, "exclusive", exclusive=True, **kw),
        "poll (shared)": lambda: _poll(log, "shared", **kw),
    }


def _poll(log, name, exclusive=False, **kw):
    with log.consumer(name, exclusive=exclusive) as c:
        return c.poll(1000, timeout=0, **kw)


def test_bytes_equal_the_views_and_load_as_json(log):
    views = reads(log)
    for name, get in reads(log, "bytes").items():
        got = get()
        want = views[name]()
        assert all(type(b) is bytes for _, b in got), name
        assert all(type(v) is memoryview for _, v in want), name
        assert [(o, bytes(v)) for o, v in want] == got, name
        assert [b for _, b in got] == BODIES, name
        assert [json.loads(b) for _, b in got if b] == [json.loads(b) for b in BODIES[:-1]]
        assert pickle.loads(pickle.dumps(got)) == got, name  # sent to other processes as they are
    with pytest.raises(TypeError, match="memoryview"):
        pickle.dumps(views["scan"]())  # which a view cannot be


def test_view_is_the_default_and_may_be_named(log):
    off = log.min_offset
    assert type(log.read(off, body="view")) is memoryview
    assert type(log.read_record(off, body="view").body) is memoryview
    assert type(next(log.scan(body="view"))[1]) is memoryview
    assert type(next(iter(log))[1]) is memoryview
    assert type(log.read(off, body=None)) is memoryview  # None: the default, as elsewhere


BAD = [
    (True, TypeError, r'^body must be "view" or "bytes" \(a str\), got bool$'),
    (bytes, TypeError, r"got type$"),
    (b"bytes", TypeError, r"got bytes$"),
    ("binary", ValueError, r'^body must be "view" \(.*\) or "bytes" \(a copy\), got "binary"$'),
    ("BYTES", ValueError, r'got "BYTES"$'),
]


def test_a_bad_body_is_refused_by_every_call_before_it_reads(log):
    end = log.max_offset
    for bad, error, match in BAD:
        for name, get in reads(log, bad).items():
            with pytest.raises(error, match=match):
                get()
            assert log.max_offset == end, name
    with log.consumer("exclusive", exclusive=True) as c:
        assert c.position == log.min_offset  # the refused polls took nothing


def test_bytes_outlive_the_log_and_its_files(make_log, dirs):
    log = make_log()
    log.append_batch(BODIES)
    got = {name: get() for name, get in reads(log, "bytes").items()}
    log.close()
    for d in dirs:
        shutil.rmtree(d)
    gc.collect()
    for name, pairs in got.items():
        assert [b for _, b in pairs] == BODIES, name
