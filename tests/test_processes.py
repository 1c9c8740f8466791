"""Several processes on one store: one writer, read-only followers, forked children."""

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from rmqlog import CommitLog, StoreLockedError

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


def _lock_fds() -> list[str]:
    """The descriptors of this process open on a store's lock file (``rmqlog.lock``)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if os.path.basename(target) == "rmqlog.lock":
            out.append(target)
    return sorted(out)


def _outcome(call) -> str:
    """What ``call()`` did: "returned", or the name of the exception it raised."""
    try:
        call()
    except BaseException as e:  # reported to the parent, which asserts it
        return type(e).__name__
    return "returned"


class _Pipe:
    """One JSON message per line over a pipe, with a timeout on the reading side."""

    def __init__(self, rfd: int, wfd: int) -> None:
        self.rfd, self.wfd, self.buf = rfd, wfd, b""

    def send(self, msg) -> None:
        """Sends ``msg``; a reader that is gone shows as end of file at the next ``recv``."""
        data = (json.dumps(msg) + "\n").encode()
        try:
            while data:
                data = data[os.write(self.wfd, data) :]
        except BrokenPipeError:
            pass

    def recv(self, timeout: float = 60):
        """The next message; None at end of file (the writer is gone) or after ``timeout``."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.rfd], [], [], left)[0]:
                return None
            chunk = os.read(self.rfd, 65536)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)


def _forked_child(log: CommitLog, dirs: list[str], off: int, pipe: _Pipe) -> None:
    """Runs in the child: reports what it can do, in three steps the parent paces."""
    # 1. The parent's writer is open.
    report = {
        "closed": log.closed,
        "lock_fds": _lock_fds(),
        "append": _outcome(lambda: log.append(b"child")),
        "append_batch": _outcome(lambda: log.append_batch([b"child"])),
        "read": _outcome(lambda: log.read(off)),
        "max_offset": _outcome(lambda: log.max_offset),
        "flush": _outcome(log.flush),
        "truncate_before": _outcome(lambda: log.truncate_before(2**40)),
        "open_writer": _outcome(lambda: CommitLog(dirs, segment_size=SEGMENT).close()),
        "close": _outcome(log.close),
    }
    pipe.send(report)
    # 2. The parent closed its writer and opened another one, which the child must not block.
    if pipe.recv() != "reopened":
        return
    pipe.send(
        {
            "lock_fds": _lock_fds(),
            "open_writer": _outcome(lambda: CommitLog(dirs, segment_size=SEGMENT).close()),
        }
    )
    # 3. Every writer of the parent is closed: the child takes the lock like any process.
    if pipe.recv() != "released":
        return
    got: dict = {}

    def write() -> None:
        with CommitLog(dirs, segment_size=SEGMENT, flush="none", clean_interval_ms=0) as own:
            got["read"] = bytes(own.read(off)).decode()
            got["offset"] = own.append(b"child")
            got["lock_fds"] = len(_lock_fds())

    got["open_writer"] = _outcome(write)
    pipe.send(got)


def test_forked_child_cannot_write_and_does_not_keep_the_lock(tmp_path):
    """A child forked from the writer: every call on the inherited log raises ClosedError, it
    holds no lock descriptor, it cannot open a writer while the parent's (or a new) one is open,
    and the parent's close releases the store although the child still runs. The child reports
    each outcome through a pipe; a child that reports nothing fails the test."""
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    log = CommitLog(dirs, segment_size=SEGMENT)
    off = log.append(b"parent")
    end = off + 32 + len(b"parent")
    # The control for the child's lock_fds: the writer holds one lock file per directory.
    assert _lock_fds() == sorted(os.path.join(d, "rmqlog.lock") for d in dirs)
    to_child, from_child = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report, never return into pytest
        try:
            os.close(to_child[1])
            os.close(from_child[0])
            _forked_child(log, dirs, off, _Pipe(to_child[0], from_child[1]))
        finally:
            os._exit(0)
    os.close(to_child[0])
    os.close(from_child[1])
    pipe = _Pipe(from_child[0], to_child[1])
    try:
        first = pipe.recv()
        assert first is not None, "the forked child reported nothing"
        assert first == {
            "closed": True,
            "lock_fds": [],
            "append": "ClosedError",
            "append_batch": "ClosedError",
            "read": "ClosedError",
            "max_offset": "ClosedError",
            "flush": "ClosedError",
            "truncate_before": "ClosedError",
            "open_writer": "StoreLockedError",
            "close": "returned",
        }
        # Nothing the child did reached the parent's log or its files.
        assert not log.closed
        assert log.max_offset == end
        assert bytes(log.read(off)) == b"parent"
        log.close()
        # The child still runs; its copy of the lock must not keep the store locked.
        with CommitLog(dirs, segment_size=SEGMENT) as again:
            assert bytes(again.read(off)) == b"parent"
            assert again.max_offset == end
            pipe.send("reopened")
            second = pipe.recv()
            assert second is not None, "the forked child reported nothing after the reopen"
            assert second == {"lock_fds": [], "open_writer": "StoreLockedError"}
        pipe.send("released")
        third = pipe.recv()
        assert third is not None, "the forked child reported nothing once the store was free"
        assert third == {"open_writer": "returned", "read": "parent", "offset": end, "lock_fds": 2}
        _, status = os.waitpid(pid, 0)
        pid = 0
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(from_child[0])
        os.close(to_child[1])
    with CommitLog(dirs, segment_size=SEGMENT) as last:
        assert bytes(last.read(end)) == b"child"


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
