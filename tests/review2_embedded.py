"""Review 2: the key collision of test_a_store_written_again_at_once_where_ctime_keeps_seconds,
where the new store's first record's BODY holds the old store's bytes (an archive / re-import of
the old store's segment, written as a body). The old store's noted starts then point into that
body, at valid records (CRC, stored offset, timestamp all check): `known()` accepts them and the
walks answer with offsets inside a record.

Run: .venv/bin/python -m pytest -q -p no:cacheprovider tests/review2_embedded.py
"""

from __future__ import annotations

import os
import shutil
import time

from rmqlog import CommitLog

SEG = 1 << 20


def _key(log: CommitLog) -> tuple[int, int]:
    st = os.stat(log.segments()[0].path)
    return st.st_ino, st.st_ctime_ns


def test_old_bytes_in_a_new_body_lead_the_walks(mnt):
    disk = mnt.ext4("coarse", 64 << 20, "-I", "128")
    root = disk / "store"
    for _ in range(5):
        time.sleep(1.0 - time.time() % 1.0 + 0.01)
        shutil.rmtree(root, ignore_errors=True)
        with CommitLog(str(root), segment_size=SEG) as a:
            for _ in range(6):  # timestamps spread over A's records
                a.append_batch([b"a" * 1000] * 100)
                time.sleep(0.003)
            before = _key(a)
            a_end = a.max_offset
            a._record_start_at_or_after(a_end - 1)  # notes A's starts
            a_last_ts = a.read_record(a_end - 1032).timestamp_ms
            a.offset_for_timestamp(a_last_ts)
            with open(a.segments()[0].path, "rb") as f:
                old = f.read(a_end)
        shutil.rmtree(root)
        with CommitLog(str(root), segment_size=SEG) as b:
            # Record 0's body starts at byte 32: the old bytes 32.. land at their own positions.
            b.append(old[32:])
            b.append(b"tail")
            if _key(b) != before:
                continue
            recs = [(r.offset, r.timestamp_ms) for r in map(b.read_record, (o for o, _ in b.scan()))]
            print("B's records:", recs, "A's last timestamp:", a_last_ts)
            want = next(o for o, _ in recs if o >= 70_000)
            got = b._record_start_at_or_after(70_000)
            print(f"record_start_at_or_after(70000): scan says {want}, got {got}")
            want_t = next(o for o, ts in recs if ts >= a_last_ts)
            got_t = b.offset_for_timestamp(a_last_ts)
            print(f"offset_for_timestamp({a_last_ts}): scan says {want_t}, got {got_t}")
            assert (got, got_t) == (want, want_t)
        break
    else:
        raise AssertionError("no try wrote both stores within one second of ctime")
