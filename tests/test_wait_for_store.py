"""A read-only open of a store not made yet waits for a writer to make it (wait_for_store_ms),
as a consumer worker that starts before the producers."""

from __future__ import annotations

import shutil
import threading
import time

import pytest

from rmqlog import CommitLog, StoreNotFoundError


def test_a_worker_started_first_opens_once_the_writer_made_the_store(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    opened: list[object] = []

    def worker():
        try:
            with CommitLog(dirs[1], read_only=True, wait_for_store_ms=30_000) as ro:
                opened.append([d.path for d in ro.dirs()])
                opened.append(ro.wait(0, timeout=30.0))
                billing = ro.consumer("billing")
                opened.append([bytes(b) for _, b in billing.poll(10, timeout=30.0)])
        except BaseException as e:  # reported below
            opened.append(e)

    t = threading.Thread(target=worker)
    t.start()
    time.sleep(0.2)  # the worker is waiting: nothing exists yet
    assert not (tmp_path / "a").exists() and t.is_alive()
    with CommitLog(dirs, segment_size=8192) as log:
        log.append(b"first")
        t.join(30)
    assert not t.is_alive()
    # Every directory of the store, though it was given one: it opened a made store.
    assert sorted(opened[0]) == dirs, opened
    assert opened[1] > 0 and opened[2] == [b"first"], opened


def test_the_wait_ends_with_store_not_found_saying_it_waited(tmp_path):
    start = time.monotonic()
    with pytest.raises(StoreNotFoundError, match="waited 150 ms"):
        CommitLog(str(tmp_path / "none"), read_only=True, wait_for_store_ms=150)
    assert time.monotonic() - start >= 0.15
    (tmp_path / "empty").mkdir()  # a directory that holds no store is waited for too
    with pytest.raises(StoreNotFoundError, match="waited 50 ms"):
        CommitLog(str(tmp_path / "empty"), read_only=True, wait_for_store_ms=50)


def test_segment_files_without_metadata_are_not_a_made_store(tmp_path):
    """A store being restored file by file (segments sort before rmqlog.meta) is waited for, to
    the limit; then it opens as a store whose metadata is lost (as without the option)."""
    src = tmp_path / "src"
    with CommitLog(str(src), segment_size=4096) as log:
        log.append_batch([b"r" * 100] * 100)
    dst = tmp_path / "dst"
    dst.mkdir()
    for f in sorted(src.iterdir()):
        if f.name.isdigit():
            shutil.copy2(f, dst / f.name)
    start = time.monotonic()
    CommitLog(str(dst), read_only=True, wait_for_store_ms=300).close()  # then opens as found
    assert time.monotonic() - start >= 0.3
    for f in sorted(src.iterdir()):
        if not f.name.isdigit():
            shutil.copy2(f, dst / f.name)
    with CommitLog(str(dst), read_only=True, wait_for_store_ms=100) as ro:
        assert len(list(ro.scan())) == 100


def test_a_made_store_opens_at_once_and_writers_refuse_the_option(tmp_path):
    d = str(tmp_path / "s")
    CommitLog(d).close()
    start = time.monotonic()
    CommitLog(d, read_only=True, wait_for_store_ms=60_000).close()
    assert time.monotonic() - start < 30  # returned without waiting out the limit
    with pytest.raises(ValueError, match="wait_for_store is for read-only opens"):
        CommitLog(d, wait_for_store_ms=1000)
    with pytest.raises(TypeError):
        CommitLog(d, read_only=True, wait_for_store_ms="soon")
