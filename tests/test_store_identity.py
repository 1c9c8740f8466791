"""Stores that can be copied and moved, and opens that name the wrong folder or a wrong set of
directories as what they are.

Each directory of a store carries ``rmqlog.id`` (the store's id and its own); the metadata records
directories by id and the path they last had. A copy (``cp -a``) or a moved store opens as
itself and never reaches back to the original's files; a copy given with its original, a
directory of another store, or a directory left out is a ``ConfigurationError`` naming the
directories and the fix; a read-only open of a folder without a store is a
``StoreNotFoundError``. Stores written by rmqlog 0.1 (``tests/fixtures/store-0.1``) open and are
upgraded in place.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import zlib
from pathlib import Path

import pytest

import rmqlog
from rmqlog import (
    CommitLog,
    CommitLogError,
    ConfigurationError,
    CorruptionError,
    StoreNotFoundError,
)

FIXTURE = Path(__file__).parent / "fixtures" / "store-0.1"
# Where tests/fixtures/store-0.1/make.py wrote the fixture stores (their metadata records it).
FIXTURE_HOME = Path("/tmp/rmqlog-fixture-0.1")


def body(i: int) -> bytes:
    return f"rec-{i:05d}-".encode() * 30


def write_store(dirs, n=60, **kw) -> list[int]:
    """A closed store of ``n`` records spread over ``dirs`` (round robin, 4 KiB segments)."""
    with CommitLog([str(d) for d in dirs], segment_size=4096, **kw) as log:
        offsets = log.append_batch([body(i) for i in range(n)])
        used = {Path(s.path).parent for s in log.segments()}
        assert len(used) == min(len(dirs), len(log.segments()))
    return offsets


def bodies(log: CommitLog) -> list[bytes]:
    return [bytes(b) for _, b in log.scan()]


def meta(d: Path) -> dict:
    return json.loads((d / "rmqlog.meta").read_text().splitlines()[0])


def identity(d: Path) -> dict:
    return json.loads((d / "rmqlog.id").read_text().splitlines()[0])


# ---------------------------------------------------------------------------------------------
# Identity files and what the metadata records


def test_each_directory_gets_an_identity_and_the_metadata_records_ids(tmp_path):
    dirs = [tmp_path / "s" / "a", tmp_path / "s" / "b"]
    write_store(dirs, n=10)
    ids = [identity(d) for d in dirs]
    assert ids[0]["store_id"] == ids[1]["store_id"] == meta(dirs[0])["store_id"]
    assert ids[0]["dir_id"] != ids[1]["dir_id"]
    recorded = meta(dirs[0])["dirs"]
    assert [r["id"] for r in recorded] == [i["dir_id"] for i in ids]
    assert [r["path"] for r in recorded] == [str(d) for d in dirs]
    # A new store writes format-2 records, which may carry keys and headers: metadata format 4,
    # which rmqlog 0.1 (and 0.2 before keys) refuses.
    assert (meta(dirs[0])["format"], meta(dirs[0])["record_format"]) == (4, 2)


# ---------------------------------------------------------------------------------------------
# Copies and moves


def test_a_copied_store_opens_as_itself_and_never_reads_the_original(tmp_path):
    orig = [tmp_path / "store" / "a", tmp_path / "store" / "b"]
    write_store(orig, n=80)
    shutil.copytree(tmp_path / "store", tmp_path / "store2", symlinks=True)
    copy = [tmp_path / "store2" / "a", tmp_path / "store2" / "b"]
    # The original changes after the copy: the copy must not see any of it.
    with CommitLog([str(d) for d in orig], segment_size=4096) as log:
        log.append_batch([b"only in the original"] * 40)
        log.truncate_before(log.segments()[2].start_offset)
    with CommitLog(str(copy[0]), read_only=True) as ro:  # any one directory finds the others
        assert [d.path for d in ro.dirs()] == [str(copy[0]), str(copy[1])]
        assert bodies(ro) == [body(i) for i in range(80)]
        assert ro.verify() == []
    with CommitLog([str(d) for d in copy], segment_size=4096) as log:
        assert bodies(log) == [body(i) for i in range(80)]
        log.append(b"only in the copy")
        assert {Path(s.path).parent for s in log.segments()} <= set(copy)
    # The writer recorded where the copy is; the original still records its own paths.
    assert [r["path"] for r in meta(copy[0])["dirs"]] == [str(d) for d in copy]
    assert [r["path"] for r in meta(orig[0])["dirs"]] == [str(d) for d in orig]
    with CommitLog(str(orig[1]), read_only=True) as ro:
        assert b"only in the copy" not in bodies(ro)
        assert bodies(ro)[-1] == b"only in the original"


def test_a_moved_store_opens_read_only_from_one_directory_and_as_a_writer(tmp_path):
    dirs = [tmp_path / "old" / "a", tmp_path / "old" / "b", tmp_path / "old" / "c"]
    write_store(dirs, n=90)
    (tmp_path / "old").rename(tmp_path / "new")
    moved = [tmp_path / "new" / "a", tmp_path / "new" / "b", tmp_path / "new" / "c"]
    with CommitLog(str(moved[1]), read_only=True) as ro:
        assert sorted(d.path for d in ro.dirs()) == sorted(str(d) for d in moved)
        assert bodies(ro) == [body(i) for i in range(90)]
    with CommitLog([str(d) for d in moved], segment_size=4096) as log:
        assert bodies(log) == [body(i) for i in range(90)]
        log.append(b"after the move")
    assert [r["path"] for r in meta(moved[0])["dirs"]] == [str(d) for d in moved]


def test_directories_moved_to_separate_places_open_when_all_are_given(tmp_path):
    dirs = [tmp_path / "d0" / "store", tmp_path / "d1" / "store"]
    write_store(dirs, n=40)
    # Each disk mounted elsewhere: no common prefix to follow; the writer is given both.
    new = [tmp_path / "mnt0" / "log", tmp_path / "elsewhere" / "x"]
    for d, n in zip(dirs, new, strict=True):
        n.parent.mkdir(parents=True)
        d.rename(n)
    with CommitLog([str(d) for d in new], segment_size=4096) as log:
        assert bodies(log) == [body(i) for i in range(40)]
    # From then on any one of them finds the other at its recorded path.
    with CommitLog(str(new[1]), read_only=True) as ro:
        assert bodies(ro) == [body(i) for i in range(40)]


def test_an_interrupted_move_is_finished_by_directory_id_after_the_store_moved(tmp_path):
    dirs = [tmp_path / "old" / "a", tmp_path / "old" / "b"]
    write_store(dirs, n=60)
    name = f"{0:020d}"
    # A writer killed between a move's rename and its unlink: the segment is in both directories
    # and the intent (by directory id) says which copy is complete.
    shutil.copy2(dirs[0] / name, dirs[1] / name)
    for d in dirs:
        m = meta(d)
        m["moving"] = {"start": 0, "from": m["dirs"][0], "to": m["dirs"][1]}
        line = json.dumps(m, separators=(",", ":"))
        (d / "rmqlog.meta").write_text(f"{line}\n{zlib.crc32(line.encode()):08x}\n")
    (tmp_path / "old").rename(tmp_path / "new")
    new = [tmp_path / "new" / "a", tmp_path / "new" / "b"]
    with CommitLog(str(new[0]), read_only=True) as ro:
        assert bodies(ro) == [body(i) for i in range(60)]
    with CommitLog([str(d) for d in new], segment_size=4096) as log:
        assert bodies(log) == [body(i) for i in range(60)]
        assert log.segments()[0].path == str(new[1] / name)
    assert not (new[0] / name).exists()
    assert meta(new[0])["moving"] is None


def test_a_copy_given_with_its_original_is_refused_naming_both(tmp_path):
    orig = [tmp_path / "store" / "a", tmp_path / "store" / "b"]
    write_store(orig, n=30)
    shutil.copytree(orig[0], tmp_path / "a-copy")
    before = {p: p.read_bytes() for p in (tmp_path / "store").rglob("0*")}
    for read_only in (False, True):
        with pytest.raises(ConfigurationError) as e:
            CommitLog(
                [str(orig[0]), str(orig[1]), str(tmp_path / "a-copy")],
                segment_size=4096,
                read_only=read_only,
            )
        msg = str(e.value)
        assert str(orig[0]) in msg and str(tmp_path / "a-copy") in msg, msg
        assert "copy" in msg and len(msg) < 300, msg
        assert isinstance(e.value, ValueError) and isinstance(e.value, CommitLogError)
    assert {p: p.read_bytes() for p in (tmp_path / "store").rglob("0*")} == before


# ---------------------------------------------------------------------------------------------
# Missing and extra directories: configuration errors, not corruption


def test_a_writer_given_some_of_the_directories_gets_a_short_configuration_error(tmp_path):
    dirs = [tmp_path / "s" / f"d{i}" for i in range(4)]
    write_store(dirs, n=400)  # ~100 segments
    before = {p: p.read_bytes() for p in (tmp_path / "s").rglob("0*")}
    with pytest.raises(ConfigurationError) as e:
        CommitLog([str(dirs[0]), str(dirs[1])], segment_size=4096)
    msg = str(e.value)
    assert not isinstance(e.value, CorruptionError)
    # One error names every directory left out, each once, so the paths are fixed in one go.
    assert len(msg) < 200 + len(str(dirs[2])) + len(str(dirs[3])), (len(msg), msg)
    assert "left out" in msg and "add them to paths" in msg, msg
    assert msg.count(str(dirs[2])) == 1 and msg.count(str(dirs[3])) == 1, msg
    assert {p: p.read_bytes() for p in (tmp_path / "s").rglob("0*")} == before
    # Given all of them, the store is whole.
    with CommitLog([str(d) for d in dirs], segment_size=4096) as log:
        assert bodies(log) == [body(i) for i in range(400)]


def test_every_missing_directory_is_named_in_one_error(tmp_path):
    dirs = [tmp_path / "s" / f"d{i}" for i in range(5)]
    write_store(dirs, n=400)
    gone = dirs[1:4]
    for i, d in enumerate(gone):
        shutil.move(d, tmp_path / f"unmounted{i}")
    for read_only in (False, True):
        with pytest.raises(ConfigurationError) as e:
            CommitLog([str(dirs[0]), str(dirs[4])], segment_size=4096, read_only=read_only)
        msg = str(e.value)
        assert "not found" in msg, msg
        # Each in the list of directories and in the accept_lost the message offers.
        assert all(msg.count(str(d)) == 2 for d in gone), msg
    # Named where they are now, the store opens.
    moved = [str(tmp_path / f"unmounted{i}") for i in range(3)]
    with CommitLog([str(dirs[0]), *moved, str(dirs[4])], segment_size=4096) as log:
        assert bodies(log) == [body(i) for i in range(400)]


def test_a_writer_missing_some_directories_and_leaving_out_others_gets_one_error(tmp_path):
    dirs = [tmp_path / "s" / f"d{i}" for i in range(4)]
    write_store(dirs, n=400)
    shutil.move(dirs[3], tmp_path / "unmounted")
    with pytest.raises(ConfigurationError) as e:
        CommitLog([str(dirs[0]), str(dirs[1])], segment_size=4096)
    msg = str(e.value)
    assert str(dirs[2]) in msg and "left out" in msg, msg
    assert str(dirs[3]) in msg and "also not found" in msg and "accept_lost" in msg, msg


def test_a_missing_directory_is_named_by_its_last_path_with_the_fix(tmp_path):
    dirs = [tmp_path / "s" / "a", tmp_path / "s" / "b"]
    write_store(dirs, n=60)
    shutil.move(dirs[1], tmp_path / "unmounted")
    for read_only in (False, True):
        with pytest.raises(ConfigurationError) as e:
            CommitLog(str(dirs[0]), segment_size=4096, read_only=read_only)
        msg = str(e.value)
        assert str(dirs[1]) in msg and "not found" in msg, msg
        assert "accept_lost" in msg and len(msg) < 300, msg
    # Named where it is now, the store opens.
    with CommitLog([str(dirs[0]), str(tmp_path / "unmounted")], segment_size=4096) as log:
        assert bodies(log) == [body(i) for i in range(60)]


def test_a_lost_directory_is_accepted_only_when_named(tmp_path):
    dirs = [tmp_path / "s" / "a", tmp_path / "s" / "b"]
    write_store(dirs, n=60)
    shutil.rmtree(dirs[1])
    with CommitLog(str(dirs[0]), segment_size=4096, accept_lost=[str(dirs[1])]) as log:
        assert [h[2] for h in log.holes()] and all(h[2] == str(dirs[1]) for h in log.holes())
        kept = bodies(log)
        assert 0 < len(kept) < 60 and set(kept) <= {body(i) for i in range(60)}


def test_a_directory_left_out_that_holds_nothing_needed_leaves_the_store(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="rmqlog")
    a, b = tmp_path / "s" / "a", tmp_path / "s" / "b"
    write_store([a], n=30)
    # b joins, takes no segment (read-only from the start), then is left out.
    b.mkdir()
    CommitLog(str(a), read_only_paths=[str(b)], segment_size=4096).close()
    assert [r["path"] for r in meta(a)["read_only_dirs"]] == [str(b)]
    with CommitLog(str(a), segment_size=4096) as log:
        assert bodies(log) == [body(i) for i in range(30)]
    rmqlog._native._flush_logging()
    assert any("leaves the store" in r.getMessage() for r in caplog.records), caplog.text
    assert [r["path"] for r in meta(a)["dirs"]] == [str(a)]
    assert meta(a)["read_only_dirs"] == []


def test_a_directory_of_another_store_is_refused(tmp_path):
    write_store([tmp_path / "one"], n=10)
    write_store([tmp_path / "two"], n=10)
    for read_only in (False, True):
        with pytest.raises(ConfigurationError) as e:
            CommitLog([str(tmp_path / "one"), str(tmp_path / "two")], read_only=read_only)
        msg = str(e.value)
        assert "different stores" in msg and str(tmp_path / "two") in msg, msg
        assert len(msg) < 300


def test_a_foreign_folder_of_segment_files_is_refused_and_an_empty_one_added(tmp_path):
    a = tmp_path / "a"
    write_store([a], n=20)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    shutil.copy(a / f"{0:020d}", foreign / "00000000000001048576")
    theirs = (foreign / "00000000000001048576").read_bytes()
    with pytest.raises(ConfigurationError, match="not a directory of this store"):
        CommitLog([str(a), str(foreign)], segment_size=4096)
    assert not (foreign / "rmqlog.id").exists() and not (foreign / "rmqlog.meta").exists()
    assert (foreign / "00000000000001048576").read_bytes() == theirs
    fresh = tmp_path / "fresh"
    with CommitLog([str(a), str(fresh)], segment_size=4096) as log:
        assert bodies(log) == [body(i) for i in range(20)]
        log.append_batch([body(i) for i in range(20, 60)])
    assert identity(fresh)["store_id"] == identity(a)["store_id"]
    with CommitLog(str(fresh), read_only=True) as ro:
        assert bodies(ro) == [body(i) for i in range(60)]


# ---------------------------------------------------------------------------------------------
# No store there


@pytest.mark.parametrize("where", ["empty", "missing", "parent", "unrelated files"])
def test_a_read_only_open_of_a_folder_without_a_store_raises_store_not_found(tmp_path, where):
    write_store([tmp_path / "parent" / "store"], n=5)
    path = {
        "empty": tmp_path / "empty",
        "missing": tmp_path / "nope",
        "parent": tmp_path / "parent",
        "unrelated files": tmp_path / "docs",
    }[where]
    if where == "empty":
        path.mkdir()
    if where == "unrelated files":
        path.mkdir()
        (path / "notes.txt").write_text("hello")
    with pytest.raises(StoreNotFoundError) as e:
        CommitLog(str(path), read_only=True)
    assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, CommitLogError)
    assert f"no rmqlog store at {path}" in str(e.value)
    assert e.value.filename == str(path)
    assert not (tmp_path / "empty").exists() or list((tmp_path / "empty").iterdir()) == []


def test_a_writer_open_of_an_empty_directory_creates_a_store(tmp_path):
    (tmp_path / "empty").mkdir()
    with CommitLog(str(tmp_path / "empty")) as log:
        assert log.max_offset == 0
    with CommitLog(str(tmp_path / "empty"), read_only=True) as ro:
        assert ro.max_offset == 0 and bodies(ro) == []


# ---------------------------------------------------------------------------------------------
# Stores written by rmqlog 0.1


def fixture_bodies(tag: str, n: int) -> list[bytes]:
    return [(f"{tag} record {i} ".encode()) * (1 + i % 7) for i in range(n)]


@pytest.fixture(params=["at its recorded path", "moved elsewhere"])
def old_store(request, tmp_path):
    """A copy of the 0.1 fixture, where its metadata says it is or somewhere else."""
    if request.param == "at its recorded path":
        shutil.rmtree(FIXTURE_HOME, ignore_errors=True)
        shutil.copytree(FIXTURE, FIXTURE_HOME)
        yield FIXTURE_HOME
        shutil.rmtree(FIXTURE_HOME, ignore_errors=True)
    else:
        shutil.copytree(FIXTURE, tmp_path / "restored")
        yield tmp_path / "restored"


# Its cases share FIXTURE_HOME, one fixed path: one pytest-xdist worker runs them all.
@pytest.mark.xdist_group("fixture-home")
@pytest.mark.parametrize(("tag", "n"), [("clean", 150), ("crashed", 120)])
def test_a_0_1_store_opens_and_is_upgraded_in_place(old_store, tag, n):
    dirs = [old_store / tag / "a", old_store / tag / "b"]
    assert meta(dirs[0])["format"] == 1 and not (dirs[0] / "rmqlog.id").exists()
    # A reader changes nothing, and finds the other directory from either one.
    with CommitLog(str(dirs[1]), read_only=True) as ro:
        assert bodies(ro) == fixture_bodies(tag, n)
    assert meta(dirs[0])["format"] == 1 and not (dirs[0] / "rmqlog.id").exists()
    with CommitLog([str(d) for d in dirs], segment_size=4096) as log:
        assert bodies(log) == fixture_bodies(tag, n)
        log.append(b"written after the upgrade")
    ids = [identity(d) for d in dirs]
    m = meta(dirs[0])
    # Upgraded in place, its records stay format 1 (the one appended now too).
    assert m["format"] == 2 and "record_format" not in m
    assert [r["id"] for r in m["dirs"]] == [i["dir_id"] for i in ids]
    assert [r["path"] for r in m["dirs"]] == [str(d) for d in dirs]
    assert {i["store_id"] for i in ids} == {m["store_id"]}
    # Upgraded, it is copyable like any store.
    shutil.copytree(old_store / tag, old_store / f"{tag}-copy")
    with CommitLog(str(old_store / f"{tag}-copy" / "b"), read_only=True) as ro:
        assert bodies(ro) == [*fixture_bodies(tag, n), b"written after the upgrade"]
        assert ro.verify() == []


def test_the_fixture_is_what_0_1_wrote():
    """The fixture stays format 1: the upgrade tests work on copies."""
    for tag in ("clean", "crashed"):
        for d in ("a", "b"):
            assert meta(FIXTURE / tag / d)["format"] == 1
            assert not (FIXTURE / tag / d / "rmqlog.id").exists()


# ---------------------------------------------------------------------------------------------
# What a hostile user tried


def test_metadata_lost_everywhere_keeps_the_store_id_of_the_identities(tmp_path):
    d = tmp_path / "s"
    write_store([d], n=20)
    store_id = identity(d)["store_id"]
    (d / "rmqlog.meta").unlink()
    with CommitLog(str(d), segment_size=4096) as log:  # rebuilt from the segments
        assert bodies(log) == [body(i) for i in range(20)]
    assert meta(d)["store_id"] == store_id == identity(d)["store_id"]
    with CommitLog(str(d), read_only=True) as ro:
        assert bodies(ro) == [body(i) for i in range(20)]


def test_a_backup_under_other_names_never_reads_the_original(tmp_path):
    orig = [tmp_path / "d0" / "store", tmp_path / "d1" / "store"]
    write_store(orig, n=60)
    backup = [tmp_path / "backup" / "d0-store", tmp_path / "backup" / "d1-store"]
    for o, b in zip(orig, backup, strict=True):
        shutil.copytree(o, b, symlinks=True)
    with CommitLog([str(d) for d in orig], segment_size=4096) as log:
        log.append_batch([b"ONLY-IN-ORIGINAL"] * 30)
        log.truncate_before(log.segments()[3].start_offset)
    # One directory of the backup: the other is not where the original's are; it is named.
    with pytest.raises(ConfigurationError) as e:
        CommitLog(str(backup[0]), read_only=True)
    assert str(orig[1]) in str(e.value) and len(str(e.value)) < 300, e.value
    # Both: the backup as it was.
    with CommitLog([str(d) for d in backup], read_only=True) as ro:
        assert bodies(ro) == [body(i) for i in range(60)]
        assert all(str(tmp_path / "backup") in s.path for s in ro.segments())


def test_a_writer_given_one_directory_of_a_copy_is_told_the_copys_other_directory(tmp_path):
    orig = [tmp_path / "c1" / "d0", tmp_path / "c1" / "d1"]
    write_store(orig, n=60)
    shutil.copytree(tmp_path / "c1", tmp_path / "c2", symlinks=True)
    copy = [tmp_path / "c2" / "d0", tmp_path / "c2" / "d1"]
    with pytest.raises(ConfigurationError) as e:
        CommitLog(str(copy[0]), segment_size=4096)
    msg = str(e.value)
    # The fix it names is the copy's own directory (what the read-only open finds by itself).
    assert "left out" in msg and str(copy[1]) in msg and str(orig[1]) not in msg, msg
    with CommitLog(str(copy[0]), read_only=True) as ro:
        assert [d.path for d in ro.dirs()] == [str(d) for d in copy]
    with CommitLog([str(d) for d in copy], segment_size=4096) as log:
        assert bodies(log) == [body(i) for i in range(60)]
    # A copy that lacks a directory names the copy's path as not found, never the original's.
    shutil.rmtree(tmp_path / "c2")
    shutil.copytree(orig[0], copy[0])
    with pytest.raises(ConfigurationError) as e:
        CommitLog(str(copy[0]), segment_size=4096)
    msg = str(e.value)
    assert "not found" in msg and str(copy[1]) in msg and str(orig[1]) not in msg, msg
    # The original's directory is there: accepting it as lost is refused, naming the copy's.
    with pytest.raises(ConfigurationError, match="the original's directory") as e:
        CommitLog(str(copy[0]), segment_size=4096, accept_lost=[str(orig[1])])
    assert str(copy[1]) in str(e.value)
    # The copy's lacking directory, by the copy's path: the copy opens with its holes.
    with CommitLog(str(copy[0]), segment_size=4096, accept_lost=[str(copy[1])]) as log:
        kept = bodies(log)
        assert kept and set(kept) < {body(i) for i in range(60)}
    with CommitLog([str(d) for d in orig], segment_size=4096) as log:  # the original: whole
        assert bodies(log) == [body(i) for i in range(60)]


def test_a_copy_of_one_directory_mixed_with_the_originals_others_is_refused(tmp_path):
    dirs = [tmp_path / "s" / d for d in "abc"]
    write_store(dirs, n=90)
    shutil.copytree(dirs[0], tmp_path / "copy" / "a")
    before = {p: p.read_bytes() for p in (tmp_path / "s").rglob("*") if p.is_file()}
    for read_only in (False, True):
        with pytest.raises(ConfigurationError) as e:
            CommitLog(
                [str(tmp_path / "copy" / "a"), str(dirs[1]), str(dirs[2])],
                segment_size=4096,
                read_only=read_only,
            )
        msg = str(e.value)
        assert "copy" in msg and str(dirs[0]) in msg and len(msg) < 300, msg
    after = {p: p.read_bytes() for p in (tmp_path / "s").rglob("*") if p.is_file()}
    assert {p: v for p, v in after.items() if p.name != "rmqlog.lock"} == {
        p: v for p, v in before.items() if p.name != "rmqlog.lock"
    }


def test_accept_lost_must_name_a_directory_the_store_lacks_and_is_remembered(tmp_path):
    dirs = [tmp_path / "s" / d for d in "abc"]
    write_store(dirs, n=90)
    paths = [str(dirs[0]), str(dirs[2])]
    with pytest.raises(ConfigurationError, match="not a directory this store lacks"):
        CommitLog(paths, segment_size=4096, accept_lost=[str(tmp_path / "typo")])
    with pytest.raises(ConfigurationError, match="that directory is there: give it in paths"):
        CommitLog(paths, segment_size=4096, accept_lost=[str(dirs[1])])
    shutil.rmtree(dirs[1])
    with CommitLog(paths, segment_size=4096, accept_lost=[str(dirs[1])]) as log:
        holes = log.holes()
        assert holes and {h[2] for h in holes} == {str(dirs[1])}
        kept = bodies(log)
    # Accepted once, remembered: the next opens need not say it again.
    with CommitLog(paths, segment_size=4096) as log:
        assert log.holes() == holes and bodies(log) == kept
    with CommitLog(paths[1], read_only=True) as ro:
        assert ro.holes() == holes and bodies(ro) == kept


def test_a_directory_whose_identity_was_lost_is_found_at_its_recorded_path(tmp_path):
    dirs = [tmp_path / "s" / "a", tmp_path / "s" / "b"]
    write_store(dirs, n=60)
    (dirs[1] / "rmqlog.id").unlink()
    with CommitLog(str(dirs[0]), read_only=True) as ro:
        assert bodies(ro) == [body(i) for i in range(60)]
    (dirs[1] / "rmqlog.id").write_bytes(b"damaged")
    with CommitLog(str(dirs[0]), read_only=True) as ro:
        assert bodies(ro) == [body(i) for i in range(60)]
    with CommitLog([str(d) for d in dirs], segment_size=4096) as log:  # the writer repairs it
        assert bodies(log) == [body(i) for i in range(60)]
    assert identity(dirs[1])["dir_id"] == meta(dirs[0])["dirs"][1]["id"]


@pytest.mark.parametrize("name", ["rmqlog.meta", "rmqlog.id", "rmqlog.tail"])
def test_metadata_files_that_are_fifos_or_huge_are_ignored_without_hanging(tmp_path, name):
    dirs = [tmp_path / "s" / "a", tmp_path / "s" / "b"]
    write_store(dirs, n=40)
    (dirs[1] / name).unlink()
    os.mkfifo(dirs[1] / name)
    with CommitLog([str(d) for d in dirs], read_only=True) as ro:  # would block on open(2)
        assert bodies(ro) == [body(i) for i in range(40)]
    (dirs[1] / name).unlink()
    with open(dirs[1] / name, "wb") as f:
        f.truncate(8 << 30)  # sparse: 8 GiB that must never be read into memory
    with CommitLog([str(d) for d in dirs], read_only=True) as ro:
        assert bodies(ro) == [body(i) for i in range(40)]


def test_the_same_directory_twice_is_a_configuration_error(tmp_path):
    d = tmp_path / "s"
    write_store([d], n=5)
    for twice in ([str(d), f"{d}/."], [str(d), f"{d}/../s"]):
        with pytest.raises(ConfigurationError, match="given twice"):
            CommitLog(twice)


def test_a_refused_open_removes_no_leftover(tmp_path):
    dirs = [tmp_path / "s" / d for d in "abc"]
    write_store(dirs, n=90)
    leftover = dirs[0] / "00000000000099999744.tmp"  # an interrupted segment creation
    leftover.write_bytes(b"\0" * 4096)
    with pytest.raises(ConfigurationError, match="left out"):
        CommitLog([str(dirs[0]), str(dirs[1])], segment_size=4096)
    assert leftover.exists()
    with pytest.raises(ConfigurationError, match="not a directory this store lacks"):
        CommitLog([str(d) for d in dirs], segment_size=4096, accept_lost=[str(tmp_path / "x")])
    assert leftover.exists()
    CommitLog([str(d) for d in dirs], segment_size=4096).close()  # a writer's open removes it
    assert not leftover.exists()
