"""Several processes on one store: one writer, read-only followers, forked children."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from rmqlog import ClosedError, CommitLog, StoreLockedError

SEGMENT = 64 * 1024


def run(script: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_second_writer_in_another_process_is_refused(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    with CommitLog(dirs, segment_size=SEGMENT) as log:
        log.append(b"x")
        r = run(
            f"""
            from rmqlog import CommitLog, StoreLockedError
            try:
                CommitLog({dirs!r}, segment_size={SEGMENT})
            except StoreLockedError as e:
                print("locked:", e)
            """
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("locked:") and "rmqlog.lock" in r.stdout
    r = run(
        f"""
        from rmqlog import CommitLog
        with CommitLog({dirs!r}, segment_size={SEGMENT}) as log:
            print(bytes(log.read(0)).decode())
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "x"


def test_read_only_follower_in_another_process(tmp_path):
    """A follower started before the writer's appends catches up through refresh() and sees every
    record intact, across segment rolls, without flushes by the writer."""
    dirs = os.pathsep.join(str(tmp_path / f"d{i}") for i in range(3))
    total = 3000
    with CommitLog(dirs, segment_size=SEGMENT, flush="none") as log:
        log.append(b"first")
        follower = subprocess.Popen(
            [
                sys.executable,
                "-c",
                textwrap.dedent(
                    f"""
                    import sys, time
                    from rmqlog import CommitLog
                    ro = CommitLog({str(tmp_path / "d1")!r}, read_only=True)
                    print("open", flush=True)
                    deadline = time.monotonic() + 60
                    seen = {{}}
                    pos = ro.min_offset
                    while len(seen) < {total + 1} and time.monotonic() < deadline:
                        ro.refresh()
                        for off, body in ro.scan(start=pos):
                            seen[off] = bytes(body)
                        pos = ro.max_offset
                        time.sleep(0.005)
                    print(len(seen), len(ro.segments()), flush=True)
                    for off, body in sorted(seen.items()):
                        sys.stdout.write(f"{{off}} {{body.hex()}}\\n")
                    """
                ),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert follower.stdout is not None
        assert follower.stdout.readline().strip() == "open"
        expected = {0: b"first"}
        for i in range(total):
            body = b"record-%d-" % i + bytes([i % 251]) * (i % 300)
            expected[log.append(body)] = body
            if i % 100 == 0:
                time.sleep(0.002)
        out, _ = follower.communicate(timeout=90)
    lines = out.splitlines()
    count, segments = map(int, lines[0].split())
    assert count == total + 1
    assert segments > 3
    got = {int(off): bytes.fromhex(h) for off, h in (line.split() for line in lines[1:])}
    assert got == expected


def test_forked_child_cannot_write_and_does_not_keep_the_lock(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    log = CommitLog(dirs, segment_size=SEGMENT)
    off = log.append(b"parent")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            try:
                log.append(b"child")
                code = 3
            except ClosedError:
                pass
            os.write(w, b"checked")
            time.sleep(5)  # still alive while the parent closes and a new writer opens
        finally:
            os._exit(code)
    os.close(w)
    assert os.read(r, 16) == b"checked"
    os.close(r)
    log.close()
    # The child still runs; its copy of the lock must not keep the store locked.
    try:
        with CommitLog(dirs, segment_size=SEGMENT) as again:
            assert bytes(again.read(off)) == b"parent"
            assert again.max_offset == off + 32 + len(b"parent")
    finally:
        os.kill(pid, 9)
        _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) or os.WEXITSTATUS(status) == 0


def test_lock_is_released_when_the_writer_process_dies(tmp_path):
    dirs = [str(tmp_path / "a")]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from rmqlog import CommitLog; import time; "
            f"log = CommitLog({dirs!r}, segment_size={SEGMENT}); print('open', flush=True); "
            f"time.sleep(3600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "open"
    with pytest.raises(StoreLockedError):
        CommitLog(dirs, segment_size=SEGMENT)
    proc.kill()
    proc.wait()
    with CommitLog(dirs, segment_size=SEGMENT) as log:
        assert log.max_offset == 0
