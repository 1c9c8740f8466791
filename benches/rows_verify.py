"""Row verify_vs_read: ``CommitLog.verify()`` of a store of 1 KiB records whose segment files are
in the page cache, against reading the same bytes of those files with plain Python into one
preallocated buffer (the fastest reasonable plain read of them). Both as bytes per second."""

from __future__ import annotations

import os
import shutil

from harness import BODY_1K, Row, Sizes, Workdir, alternate, say, throughput, timed

NAMES = ("verify_vs_read",)
# The library's default segment size: the store (records_1k records of 1 KiB, about 1 GiB) spans
# 16 segment files, as a verify walks them. --quick: 1 MiB, still several files.
SEGMENT_FULL = 64 << 20
SEGMENT_QUICK = 1 << 20


def run(s: Sizes, wd: Workdir) -> list[Row]:
    from rmqlog import CommitLog

    d = wd.new()
    store = os.path.join(d, "store")
    segment_size = SEGMENT_QUICK if s.quick else SEGMENT_FULL
    n = s.records_1k // s.batch * s.batch
    with CommitLog(store, segment_size=segment_size) as log:
        for _ in range(n // s.batch):
            log.append_batch([BODY_1K] * s.batch)
        log.flush()
        lo, hi = log.min_offset, log.max_offset
        # Each segment file and its bytes in use: all of a sealed one, the records of the last.
        files = [(seg.path, seg.written) for seg in log.segments()]
    total = sum(w for _, w in files)
    assert total == hi - lo, (total, lo, hi)

    buf = bytearray(max(w for _, w in files))
    view = memoryview(buf)

    def read_files() -> int:
        """Plain Python: each segment file's bytes in use, read into the one buffer."""
        got = 0
        for path, size in files:
            with open(path, "rb", buffering=0) as f:
                k = 0
                while k < size:
                    r = f.readinto(view[k:size])
                    if not r:
                        break
                    k += r
            got += k
        return got

    warm = read_files()  # untimed: the files in the page cache (they are, after the writes)
    assert warm == total, (warm, total)

    def ours() -> float:
        # A fresh read-only open per run, outside the clock: verify maps the segments itself.
        log = CommitLog(store, read_only=True)
        seen: list[tuple[int, int]] = []
        bad: list[tuple[int, int, str]] = []

        def go() -> None:
            bad.extend(log.verify(lambda done, of: seen.append((done, of))))

        t = timed(go)
        log.close()
        assert bad == [], bad[:5]
        assert seen and seen[-1] == (total, total), (seen[-1:], total)
        return t

    def base() -> float:
        got = 0

        def go() -> None:
            nonlocal got
            got = read_files()

        t = timed(go)
        assert got == total, (got, total)
        return t

    say(f"verify ({n} records of 1 KiB: {total >> 20} MiB in {len(files)} segment files)")
    to, tb = alternate(s.reps, ours, base)
    shutil.rmtree(d)
    return [
        throughput(
            NAMES[0],
            total,
            to,
            tb,
            f"CommitLog.verify() (every header, stored offset and body CRC) of {n:,} records of "
            f"1 KiB, {len(files)} segment files of {segment_size >> 20} MiB in the page cache; a "
            "fresh read-only open per run (outside the clock); bytes/s of the segment bytes it "
            "covered (max_offset - min_offset); no damage reported",
            "plain Python read of the same bytes: each segment file opened (buffering=0) and "
            "readinto a memoryview of one preallocated bytearray as large as the largest file, "
            "every segment file per run",
            records=n,
            segments=len(files),
            segment_size=segment_size,
        )
    ]
