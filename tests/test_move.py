"""Moving sealed segments between directories: online, crash-safe, and rebalancing."""

import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path

import pytest

from rmqlog import CommitLog, CommitLogError, InvalidOffsetError

SEG = 64 * 1024


def fill(dirs, n=200, size=1000, **kw):
    log = CommitLog(dirs, segment_size=SEG, **kw)
    offs = log.append_batch([bytes([i % 251]) * size for i in range(n)])
    return log, offs


def copies(dirs, start):
    name = f"{start:020d}"
    return [d for d in dirs if (Path(d) / name).exists()]


def write_meta(dirs, update):
    """Rewrites rmqlog.meta in every directory as a crashed writer could have left it."""
    for d in dirs:
        p = Path(d) / "rmqlog.meta"
        if not p.exists():
            continue
        line = p.read_text().splitlines()[0]
        meta = json.loads(line)
        update(meta)
        line = json.dumps(meta, separators=(",", ":"))
        p.write_text(f"{line}\n{zlib.crc32(line.encode()):08x}\n")


def test_move_keeps_records_views_and_mtime(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    log, offs = fill(dirs)
    seg = log.segments()[0]
    assert Path(seg.path).parent == Path(dirs[0])
    old = os.stat(seg.path).st_mtime_ns
    view = log.read(offs[0])
    log.move_segment(seg.start_offset, dirs[1])
    moved = log.segments()[0]
    assert Path(moved.path).parent == Path(dirs[1])
    assert copies(dirs, seg.start_offset) == [dirs[1]]
    assert os.stat(moved.path).st_mtime_ns == old  # retention is not reset
    assert bytes(view) == bytes([0]) * 1000  # a view over the old map stays valid
    for i, off in enumerate(offs):
        assert bytes(log.read(off)) == bytes([i % 251]) * 1000
    log.close()
    with CommitLog(dirs, segment_size=SEG) as again:
        assert [bytes(b) for _, b in again.scan()] == [bytes([i % 251]) * 1000 for i in range(200)]


def test_move_refusals(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    log, _ = fill(dirs)
    with pytest.raises(CommitLogError, match="active segment"):
        log.move_segment(log.segments()[-1].start_offset, dirs[0])
    with pytest.raises(ValueError, match="not a directory of this store"):
        log.move_segment(0, str(tmp_path / "elsewhere"))
    with pytest.raises(InvalidOffsetError, match=r"offset 5 .* no segment starts there"):
        log.move_segment(5, dirs[1])
    log.close()


@pytest.mark.parametrize("stage", ["copying", "renamed", "source_deleted"])
def test_interrupted_move_leaves_exactly_one_copy(tmp_path, stage):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    log, offs = fill(dirs)
    start = log.segments()[0].start_offset
    src = Path(dirs[0]) / f"{start:020d}"
    log.close()
    # The state a writer killed at each step of a move leaves on disk.
    # The intent names the directories by their records (id, and the path they had).
    write_meta(
        dirs, lambda m: m.update(moving={"start": start, "from": m["dirs"][0], "to": m["dirs"][1]})
    )
    if stage == "copying":
        with open(src, "rb") as f:
            (Path(dirs[1]) / f"{start:020d}.tmp").write_bytes(f.read(SEG // 3))
    else:
        shutil.copy2(src, Path(dirs[1]) / f"{start:020d}")
        if stage == "source_deleted":
            src.unlink()
    # A reader during the interrupted move reads one copy without error.
    with CommitLog(dirs[1], read_only=True) as ro:
        assert bytes(ro.read(offs[0])) == bytes([0]) * 1000
    with CommitLog(dirs, segment_size=SEG) as log:
        assert len(copies(dirs, start)) == 1
        assert copies(dirs, start) == ([dirs[0]] if stage == "copying" else [dirs[1]])
        assert not (Path(dirs[1]) / f"{start:020d}.tmp").exists()
        for i, off in enumerate(offs):
            assert bytes(log.read(off)) == bytes([i % 251]) * 1000
    meta = json.loads((Path(dirs[0]) / "rmqlog.meta").read_text().splitlines()[0])
    assert meta["moving"] is None


def meta_in_force(dirs) -> dict:
    """The copy of rmqlog.meta a reopen goes by: the valid one (JSON line, then its CRC32 in hex)
    with the highest ``seq``."""
    best = None
    for d in dirs:
        try:
            lines = (Path(d) / "rmqlog.meta").read_text().split("\n")
        except FileNotFoundError:
            continue
        if len(lines) < 2 or lines[1].strip() != f"{zlib.crc32(lines[0].encode()):08x}":
            continue
        meta = json.loads(lines[0])
        if best is None or meta["seq"] > best["seq"]:
            best = meta
    assert best is not None, f"no valid rmqlog.meta in {dirs}"
    return best


def move_stage(moving: dict | None) -> str:
    """How far the move recorded in the metadata got, from the files on disk."""
    if moving is None:
        return "between moves"
    name = f"{moving['start']:020d}"
    src, dst = Path(moving["from"]["path"]) / name, Path(moving["to"]["path"]) / name
    if dst.with_name(name + ".tmp").exists():
        return "copying"
    if dst.exists():
        return "renamed" if src.exists() else "source deleted"
    return "intent recorded"


def test_sigkill_during_moves(tmp_path):
    """A writer moving segments back and forth is frozen (SIGSTOP) at a random point, the move in
    flight is read from the store's metadata (``moving``) and the files, and the writer is then
    SIGKILLed: most kills land inside a move, at its various steps. After every reopen each
    segment exists exactly once, no temporary copy is left and every record reads back."""
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    big = 4 << 20
    log = CommitLog(dirs, segment_size=big, flush="none")
    offs = log.append_batch([bytes([i % 251]) * 60_000 for i in range(400)])
    log.close()
    script = textwrap.dedent(
        f"""
        from rmqlog import CommitLog
        log = CommitLog({dirs!r}, segment_size={big}, flush="none")
        print("open", flush=True)
        segs = log.segments()[:-1]
        n = 0
        while True:
            for s in segs:
                cur = log.segments()
                here = next(x for x in cur if x.start_offset == s.start_offset)
                dest = {dirs!r}[1] if here.path.startswith({dirs[0]!r}) else {dirs!r}[0]
                n += 1
                print("start", n, s.start_offset, flush=True)
                log.move_segment(s.start_offset, dest)
                print("done", n, flush=True)
        """
    )
    rng = random.Random(5)
    stages: collections.Counter[str] = collections.Counter()
    rounds = 8
    in_call = 0  # kills between the child's "start N" and "done N"
    intent = 0  # kills with a move recorded in rmqlog.meta
    for _ in range(rounds):
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "open"
        seen = []
        while not seen or not seen[-1].startswith("done "):  # one move done, then a random time
            seen.append(proc.stdout.readline())
            assert seen[-1], f"the writer ended: {seen}"
        time.sleep(rng.uniform(0.0, 0.25))
        proc.send_signal(signal.SIGSTOP)
        _, status = os.waitpid(proc.pid, os.WUNTRACED)  # stopped: the files stay as they are now
        assert os.WIFSTOPPED(status), status
        moving = meta_in_force(dirs)["moving"]
        stage = move_stage(moving)
        proc.send_signal(signal.SIGKILL)
        lines = "".join([*seen, proc.stdout.read()]).splitlines()
        proc.stdout.close()
        assert proc.wait(timeout=30) == -signal.SIGKILL
        last = lines[-1].split()
        if last[0] == "start":
            in_call += 1
            if moving is None:
                stage = "in the call, no intent on disk"
        if moving is not None:
            intent += 1
            # The child agrees: its last word was the start of that move, never its end.
            assert last[0] == "start" and int(last[2]) == moving["start"], (lines[-3:], moving)
        stages[stage] += 1
        with CommitLog(dirs, segment_size=big) as log:
            names = {f"{s.start_offset:020d}" for s in log.segments()}
            for s in log.segments():
                assert len(copies(dirs, s.start_offset)) == 1, stage
            for i, off in enumerate(offs):
                assert bytes(log.read(off)) == bytes([i % 251]) * 60_000, stage
        on_disk = sorted(p.name for d in dirs for p in Path(d).iterdir() if p.name[:1].isdigit())
        assert on_disk == sorted(names), stage  # one copy each, no NAME.tmp left
        assert meta_in_force(dirs)["moving"] is None
    # Most kills land inside move_segment, and some with the intent on disk (a move half done).
    assert in_call > rounds // 2, f"too few kills inside a move: {dict(stages)}"
    assert intent > 0, f"no kill with a move recorded in rmqlog.meta: {dict(stages)}"


def test_rebalance_evens_out_two_filesystems(tmp_path):
    """Two real filesystems of the same size (tmpfs), all sealed segments on one: rebalance moves
    about half across, never past the middle, and respects max_bytes."""
    mounts = []
    for name in ("a", "b"):
        p = tmp_path / name
        p.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(p)])
        if r.returncode != 0:
            pytest.skip("mounting a tmpfs is not permitted here (needs root)")
        mounts.append(p)
    try:
        dirs = [str(m) for m in mounts]
        with CommitLog([dirs[0]], segment_size=SEG) as log:
            offs = log.append_batch([bytes([i % 251]) * 1000 for i in range(1500)])
        with CommitLog(dirs, segment_size=SEG) as log:
            first = log.rebalance(max_bytes=3 * SEG)
            assert len(first) == 3 and all(to == dirs[1] for _, _, to in first)
            rest = log.rebalance()
            ratios = [d.used_ratio for d in log.dirs()]
            assert abs(ratios[0] - ratios[1]) <= 2 * SEG / (8 << 20) + 1e-9
            assert len(first) + len(rest) > 5
            for i, off in enumerate(offs):
                assert bytes(log.read(off)) == bytes([i % 251]) * 1000
    finally:
        for m in mounts:
            subprocess.run(["umount", str(m)])
