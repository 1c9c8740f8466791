"""Bad arguments are refused with TypeError/ValueError naming them, before the disk is touched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rmqlog import CommitLog, CommitLogError


@pytest.fixture
def target(tmp_path):
    """A store directory that does not exist yet."""
    return tmp_path / "store"


def assert_untouched(tmp_path, *names):
    for name in names:
        assert not (tmp_path / name).exists(), f"{name} was created"


# ---------------------------------------------------------------------------------------------
# paths


@pytest.mark.parametrize(
    ("paths", "exc", "words"),
    [
        ([], ValueError, ["paths", "empty"]),
        ((), ValueError, ["paths", "empty"]),
        ("", ValueError, ["paths", "empty"]),
        (123, TypeError, ["paths", "int"]),
        (None, TypeError, ["paths", "NoneType"]),
        (b"bytes", TypeError, ["paths", "bytes"]),
        ([1], TypeError, ["paths[0]", "int"]),
        ([b"raw"], TypeError, ["paths[0]", "bytes"]),
        ([""], ValueError, ["paths[0]", "empty"]),
    ],
)
def test_bad_paths(tmp_path, monkeypatch, paths, exc, words):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(exc) as info:
        CommitLog(paths, segment_size=4096)
    assert not isinstance(info.value, CommitLogError)
    for w in words:
        assert w in str(info.value)
    assert os.listdir(tmp_path) == []


def test_bad_path_later_in_list_creates_nothing(tmp_path):
    with pytest.raises(TypeError, match=r"paths\[1\]"):
        CommitLog([tmp_path / "a", 7, tmp_path / "c"], segment_size=4096)
    assert_untouched(tmp_path, "a", "c")


def test_empty_entry_in_pathsep_string(tmp_path):
    joined = os.pathsep.join([str(tmp_path / "a"), "", str(tmp_path / "b")])
    with pytest.raises(ValueError, match="paths") as info:
        CommitLog(joined, segment_size=4096)
    assert "empty" in str(info.value)
    assert_untouched(tmp_path, "a", "b")
    trailing = str(tmp_path / "a") + os.pathsep
    with pytest.raises(ValueError, match="paths"):
        CommitLog(trailing, segment_size=4096)
    assert_untouched(tmp_path, "a")


def test_path_that_is_a_regular_file(tmp_path):
    f = tmp_path / "file"
    f.write_bytes(b"not a directory")
    for paths in (f, [tmp_path / "a", f], os.pathsep.join([str(tmp_path / "a"), str(f)])):
        with pytest.raises(ValueError, match="not a directory") as info:
            CommitLog(paths, segment_size=4096)
        assert str(f) in str(info.value)
        assert_untouched(tmp_path, "a")
    assert f.read_bytes() == b"not a directory"
    with pytest.raises(ValueError, match="not a directory"):
        CommitLog(f, read_only=True)


@pytest.mark.parametrize(
    "make",
    [
        lambda t: [t / "a", t / "b", t / "a"],
        lambda t: [str(t / "a"), t / "a"],
        lambda t: [t / "a", str(t / "a") + "/"],
        lambda t: [t / "a", t / "a" / "."],
        lambda t: os.pathsep.join([str(t / "a"), str(t / "a")]),
    ],
    ids=["list", "str-and-path", "trailing-slash", "dot", "pathsep"],
)
def test_duplicate_paths(tmp_path, make):
    with pytest.raises(ValueError, match="twice"):
        CommitLog(make(tmp_path), segment_size=4096)
    assert_untouched(tmp_path, "a", "b")


def test_duplicate_path_through_dotdot(tmp_path):
    (tmp_path / "b").mkdir()
    with pytest.raises(ValueError, match="twice"):
        CommitLog([tmp_path / "a", tmp_path / "b" / ".." / "a"], segment_size=4096)
    assert_untouched(tmp_path, "a")


def test_relative_duplicate(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="twice"):
        CommitLog(["a", tmp_path / "a"], segment_size=4096)
    assert_untouched(tmp_path, "a")


def test_writable_directories_are_created_with_parents(tmp_path):
    deep = tmp_path / "x" / "y" / "z"
    other = tmp_path / "p" / "q"
    log = CommitLog([deep, other], segment_size=4096)
    try:
        assert deep.is_dir() and other.is_dir()
        assert log.paths == [str(deep), str(other)]
        off = log.append(b"deep")
        assert bytes(log.read(off)) == b"deep"
    finally:
        log.close()


def test_read_only_does_not_create_directories(tmp_path):
    with pytest.raises(OSError) as info:
        CommitLog(tmp_path / "missing", read_only=True)
    assert "missing" in str(info.value)
    assert_untouched(tmp_path, "missing")


# ---------------------------------------------------------------------------------------------
# options


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"segment_size": 0}, ValueError, "segment_size"),
        ({"segment_size": 1000}, ValueError, "segment_size"),
        ({"segment_size": 4097}, ValueError, "segment_size"),
        ({"segment_size": 4096 * 3 + 1}, ValueError, "segment_size"),
        ({"segment_size": -4096}, ValueError, "segment_size"),
        ({"segment_size": 1 << 41}, ValueError, "segment_size"),
        ({"segment_size": 2**64}, ValueError, "segment_size"),
        ({"segment_size": True}, TypeError, "segment_size"),
        ({"segment_size": "4096"}, TypeError, "segment_size"),
        ({"segment_size": 4096.0}, TypeError, "segment_size"),
        ({"flush": "fast"}, ValueError, "flush"),
        ({"flush": "SYNC"}, ValueError, "flush"),
        ({"flush": 1}, TypeError, "flush"),
        ({"strategy": "nope"}, ValueError, "strategy"),
        ({"strategy": 0}, TypeError, "strategy"),
        ({"flush_interval_ms": 0}, ValueError, "flush_interval_ms"),
        ({"flush_interval_ms": -1}, ValueError, "flush_interval_ms"),
        ({"flush_interval_ms": 1.5}, TypeError, "flush_interval_ms"),
        ({"max_message_size": -1}, ValueError, "max_message_size"),
        ({"max_message_size": 2**40}, ValueError, "max_message_size"),
        ({"max_message_size": 2**32 - 1}, ValueError, "max_message_size"),
        ({"max_message_size": False}, TypeError, "max_message_size"),
        ({"lock_timeout_ms": 0}, ValueError, "lock_timeout_ms"),
        ({"lock_timeout_ms": 1.5}, TypeError, "lock_timeout_ms"),
        # Durations past what a duration holds: refused, not a panic (issue 33).
        ({"retention_hours": 1e16}, ValueError, "retention_hours"),
        ({"retention_hours": float("inf")}, ValueError, "retention_hours"),
        ({"consumer_idle_hours": 1e16}, ValueError, "consumer_idle_hours"),
        ({"read_only": "yes"}, TypeError, "read_only"),
        ({"read_only": 1}, TypeError, "read_only"),
    ],
)
def test_bad_options(tmp_path, target, kwargs, exc, name):
    kwargs = {"segment_size": 4096, **kwargs}
    with pytest.raises(exc) as info:
        CommitLog(target, **kwargs)
    assert type(info.value) is exc
    assert name in str(info.value)
    assert_untouched(tmp_path, "store")


def test_options_are_keyword_only(tmp_path, target):
    with pytest.raises(TypeError):
        CommitLog(target, 4096)
    with pytest.raises(TypeError):
        CommitLog(target, 4096, "round_robin")
    with pytest.raises(TypeError):
        CommitLog(paths=target, segment_size=4096, bogus=1)
    with pytest.raises(TypeError):
        CommitLog()
    assert_untouched(tmp_path, "store")


def test_boundary_options_are_accepted(tmp_path, make_log):
    log = make_log(
        tmp_path / "ok",
        segment_size=4096,
        strategy="round_robin",
        flush="none",
        flush_interval_ms=1,
        max_message_size=0,
        read_only=False,
    )
    assert log.append(b"") == 0
    from rmqlog import MessageTooLargeError

    with pytest.raises(MessageTooLargeError):
        log.append(b"x")


# ---------------------------------------------------------------------------------------------
# method arguments


@pytest.fixture
def log(make_log, tmp_path):
    log = make_log(tmp_path / "m")
    log.append(b"first")
    return log


@pytest.mark.parametrize(
    "value", ["str", 123, None, 1.5, [b"a"], object()], ids=lambda v: type(v).__name__
)
def test_append_refuses_non_buffers(log, value):
    end = log.max_offset
    with pytest.raises(TypeError, match="body") as info:
        log.append(value)
    assert type(value).__name__ in str(info.value)
    assert log.max_offset == end


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (b"abc", ["append_batch", "append()"]),
        (bytearray(b"abc"), ["append_batch", "one bytes-like body", "append()"]),
        ("abc", ["append_batch"]),
        (5, ["bodies", "int"]),
        (None, ["bodies", "NoneType"]),
        ([b"ok", "str"], ["bodies[1]", "str"]),
        ([b"ok", b"ok", 3], ["bodies[2]", "int"]),
        ((x for x in [b"ok", None]), ["bodies[1]", "NoneType"]),
    ],
    ids=["bytes", "bytearray", "str", "int", "none", "list-str", "list-int", "gen-none"],
)
def test_append_batch_refuses_bad_bodies_and_writes_nothing(log, value, words):
    end, segs = log.max_offset, log.segments()
    with pytest.raises(TypeError) as info:
        log.append_batch(value)
    for w in words:
        assert w in str(info.value)
    assert log.max_offset == end
    assert log.segments() == segs
    assert [bytes(v) for _, v in log.scan()] == [b"first"]


@pytest.mark.parametrize(
    "value", ["0", 1.5, 0.0, True, False, None, b"0"], ids=lambda v: f"{type(v).__name__}-{v!r}"
)
def test_offsets_must_be_ints(log, value):
    for call in (log.read, log.read_record):
        with pytest.raises(TypeError, match="offset") as info:
            call(value)
        assert type(value).__name__ in str(info.value)
    if value is not None:  # None means "from the start" / "to the end"
        with pytest.raises(TypeError, match="start"):
            log.scan(start=value)
        with pytest.raises(TypeError, match="end"):
            log.scan(end=value)
    with pytest.raises(TypeError, match="ts_ms"):
        log.offset_for_timestamp(value)
    assert bytes(log.read(0)) == b"first"


def test_int_subclasses_are_offsets(log):
    class Off(int):
        pass

    assert bytes(log.read(Off(0))) == b"first"
    assert log.read_record(Off(0)).offset == 0


def test_positional_only_methods(log):
    with pytest.raises(TypeError):
        log.append(body=b"x")
    with pytest.raises(TypeError):
        log.read(offset=0)
    with pytest.raises(TypeError):
        log.append_batch(bodies=[b"x"])
    assert [bytes(v) for _, v in log.scan()] == [b"first"]


def test_path_objects_with_fspath(make_log, tmp_path):
    class P:
        def __init__(self, p):
            self.p = p

        def __fspath__(self):
            return str(self.p)

    log = make_log(P(tmp_path / "fs"))
    assert log.paths == [str(tmp_path / "fs")]
    log2 = make_log([P(tmp_path / "fs2"), Path(tmp_path / "fs3")])
    assert log2.paths == [str(tmp_path / "fs2"), str(tmp_path / "fs3")]
