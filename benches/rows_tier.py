"""Row tier_scan_vs_local: a full Arrow scan of a log's sealed segments read from a file:// tier
with a cold cache (a fresh URL open per run) against the same records read from the local store.
The tier directory is on a local filesystem, so each object is mapped where it lies and checked
whole against the manifest's CRC32C (an S3 tier, or a file:// tier on a network filesystem,
copies each object into the cache instead: docs/tiering.md).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from harness import BODY_1K, Row, Sizes, Workdir, alternate, say, skipped, throughput, timed

NAMES = ("tier_scan_vs_local",)
# How long the writer may take to upload its sealed segments before the row gives up.
UPLOAD_TIMEOUT_S = 600.0


def run(s: Sizes, wd: Workdir) -> list[Row]:
    try:
        import pyarrow  # noqa: F401  (scan_batches yields pyarrow batches)
    except ImportError as e:
        return [
            skipped(n, f"pyarrow is not installed ({e}); pip install 'rmqlog[arrow]'")
            for n in NAMES
        ]
    return [_scan_row(s, wd)]


def _scan_row(s: Sizes, wd: Workdir) -> Row:
    from rmqlog import CommitLog

    d = wd.new()
    store = os.path.join(d, "store")
    tier = os.path.join(d, "tier")
    url = Path(tier).as_uri()
    per_batch = 1024
    batches = max(1, s.tier_bytes // (len(BODY_1K) * per_batch))
    with CommitLog(store, segment_size=s.tier_segment, tier_url=url, tier_cache_dir=d) as log:
        offsets: list[int] = []
        for _ in range(batches):
            offsets.extend(log.append_batch([BODY_1K] * per_batch))
        sealed = sum(1 for seg in log.segments() if seg.sealed)
        say(f"tier: {len(offsets)} records of 1 KiB, {sealed} sealed segments; uploading")
        _wait(lambda: log.tier_status()["uploads"] >= sealed, "the sealed segments' upload")
        status = log.tier_status()
        assert status["pending_segments"] == 0 and status["upload_errors"] == 0, status
    with CommitLog(url, read_only=True) as remote:
        end = remote.max_offset
    n = sum(1 for o in offsets if o < end)
    assert n > 0, "no sealed segment: raise tier_bytes"

    def scan(open_log: Callable[[], CommitLog]) -> Callable[[], float]:
        def one() -> float:
            rows = 0
            logs: list[CommitLog] = []

            def go() -> None:
                nonlocal rows
                log = open_log()  # a fresh open: for the tier, a fresh (cold) cache directory
                logs.append(log)
                for batch in log.scan_batches(end=end, body="binary"):
                    rows += batch.num_rows

            t = timed(go)
            for log in logs:
                log.close()
            logs.clear()  # the drop removes the cache directory: outside the clock
            assert rows == n, (rows, n)
            return t

        return one

    say(f"tier: scan of {n} records ({end >> 20} MiB), file:// tier (cold cache) vs local")
    t_tier, t_local = alternate(
        s.reps,
        scan(lambda: CommitLog(url, read_only=True, tier_cache_dir=d)),
        scan(lambda: CommitLog(store, read_only=True)),
    )
    shutil.rmtree(d)
    return throughput(
        "tier_scan_vs_local",
        n,
        t_tier,
        t_local,
        'CommitLog("file://...", read_only=True) (the tier alone, a fresh open and cache per '
        'run): scan_batches(body="binary"), rows counted; every object mapped where it lies (a '
        "local file:// tier) and its CRC32C checked, the next one while the scan reads one",
        "the same records from the local store (read-only open of its directory, files in the "
        'page cache): scan_batches(body="binary")',
        segment_size=s.tier_segment,
        segments=sealed,
    )


def _wait(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + UPLOAD_TIMEOUT_S
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} took more than {UPLOAD_TIMEOUT_S:.0f} s")
        time.sleep(0.05)
