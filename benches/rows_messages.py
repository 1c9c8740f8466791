"""Rows append_key_headers_100_vs_plain, lookup_key_vs_sqlite_index, lookup_key_vs_scan,
dedup_append_100_vs_plain: records that carry a key and headers (docs/messages.md), ``lookup(key)``
through the segments' key indexes against what a user without it would do (an indexed sqlite3
table of (key, offset), or a scan of the log comparing each record's key), and appends with
message ids.

``dedup_append_100_vs_plain``: ``append(body, msg_id=...)`` of 100 B bodies, each with a fresh
16 B id (every append is looked up in the window and written), against ``append`` of the same
bodies alone, a fresh log per repetition, the store's default window (2 minutes).

``append_key_headers_100_vs_plain``: ``append`` of 100 B bodies, each with a 16 B key and two
headers, against ``append`` of the same bodies alone (``py_append_100``'s loop), a fresh log per
repetition. The keys and headers come from a pool of KEYED_POOL distinct (key, headers) pairs
made before the clock, handed out in turn from a prebuilt list (one tuple a record: what a loop
over a user's messages iterates).

The lookup rows share one log, built once per pass outside the clock: LOOKUP_RECORDS records of
100 B (quick: LOOKUP_RECORDS_QUICK), each with a 16 B random key, LOOKUP_RECORDS / PER_KEY
distinct keys each on exactly PER_KEY records, placed in a random order (so a key's records are
spread over the whole log, as an order id's events are over a day). The lookups: LOOKUPS keys a
repetition (quick: LOOKUPS_QUICK), drawn at random, ABSENT_PCT % of them keys no record has (each
of the others finds PER_KEY records). Every timed run counts what it found and checks the total.

``lookup_key_vs_sqlite_index``: the same lookups against sqlite3 (the standard library) in the
same process: a table ``(key BLOB, "offset" INTEGER)`` holding the log's (key, offset) pairs,
filled with one ``executemany`` in one transaction (WAL, ``synchronous=NORMAL``), then ``CREATE
INDEX`` on ``key`` and ``ANALYZE``; the query ``SELECT "offset" FROM t WHERE key = ?`` with
``fetchall()``, through one cursor. The tables are built, and every side warmed by one untimed
pass of the lookups, before the clock. Two stronger setups run in the same alternation and are
kept as extras: the same table with ``PRAGMA mmap_size`` (``mmap_*``), and the pairs in a table
whose index is on ``(key, "offset")``, so that the query reads the index alone, with
``mmap_size`` (``covering_*``).

``lookup_key_vs_scan``: the same lookups against a walk of the log with the public API for each
key (``scan`` and ``scan_batches`` give no key): every record read with ``read_record(offset,
body="bytes")`` (its ``.key`` compared, its ``.next_offset`` the next), the whole log per lookup (a
key's records are anywhere). One walk, of a present key, per repetition (seconds at 10,000,000
records), at most SCAN_REPS repetitions; its rate is lookups per second like ours.
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
from collections.abc import Callable

from harness import (
    BODY_100,
    SEGMENT,
    Row,
    Sizes,
    Workdir,
    alternate,
    rates,
    say,
    skipped,
    throughput,
    timed,
)

NAMES = (
    "append_key_headers_100_vs_plain",
    "lookup_key_vs_sqlite_index",
    "lookup_key_vs_scan",
    "dedup_append_100_vs_plain",
)

KEY_LEN = 16
# Distinct (key, headers) pairs the append row cycles through.
KEYED_POOL = 1 << 16
# The lookup log: records, and how many of them carry each key.
LOOKUP_RECORDS = 10_000_000
LOOKUP_RECORDS_QUICK = 200_000
PER_KEY = 10
# Lookups a repetition, and the share of them for keys no record has.
LOOKUPS = 100_000
LOOKUPS_QUICK = 2_000
ABSENT_PCT = 10
# Repetitions (at most) of lookup_key_vs_scan: a walk of the whole log each, one lookup.
SCAN_REPS = 3
FILL_BATCH = 1_000
TABLE = 'CREATE TABLE t (key BLOB NOT NULL, "offset" INTEGER NOT NULL)'
INSERT = 'INSERT INTO t (key, "offset") VALUES (?, ?)'
SQL = 'SELECT "offset" FROM t WHERE key = ?'
# PRAGMA mmap_size of the extras: this sqlite's limit (SQLITE_MAX_MMAP_SIZE, 0x7fff0000).
MMAP_SIZE = 0x7FFF0000


def _missing() -> str | None:
    from rmqlog import CommitLog

    if not hasattr(CommitLog, "lookup"):
        return "this rmqlog has no keys (CommitLog.lookup)"
    return None


def _appends(
    wd: Workdir, n: int, loop: Callable[[Callable[..., int]], None]
) -> Callable[[], float]:
    """A side of an append row: ``loop(log.append)`` on a fresh log of 1 GiB segments, timed
    (open and close outside the clock); it must append ``n`` records."""
    from rmqlog import CommitLog

    def side() -> float:
        d = wd.new()
        log = CommitLog(os.path.join(d, "log"), segment_size=SEGMENT)
        append = log.append
        t = timed(lambda: loop(append))
        assert len(log) == n, len(log)
        log.close()
        shutil.rmtree(d)
        return t

    return side


def _plain(n: int) -> Callable[[Callable[..., int]], None]:
    def loop(append: Callable[..., int]) -> None:
        for _ in range(n):
            append(BODY_100)

    return loop


def _append_row(s: Sizes, wd: Workdir) -> Row:
    n = s.records_100
    rng = random.Random(7)
    pool = []
    seen: set[bytes] = set()
    while len(pool) < KEYED_POOL:
        key = rng.randbytes(KEY_LEN)
        if key in seen:
            continue
        seen.add(key)
        pool.append((key, [("type", b"payment"), ("trace", rng.randbytes(16))]))
    items = [pool[i % KEYED_POOL] for i in range(n)]

    def keyed(append: Callable[..., int]) -> None:
        for key, headers in items:
            append(BODY_100, key=key, headers=headers)

    ours, base = _appends(wd, n, keyed), _appends(wd, n, _plain(n))
    say(f"appends with a key and two headers (100 B, single) against plain appends ({n})")
    to, tb = alternate(s.reps, ours, base)
    return throughput(
        NAMES[0],
        n,
        to,
        tb,
        "CommitLog(path, segment_size=1 GiB) (flush='async'), append(100 B, key=16 B, "
        "headers=[('type', b'payment'), ('trace', 16 B)]), for key, headers in a list of "
        f"pairs ({KEYED_POOL:,} distinct, in turn)",
        "the same log's append(100 B) alone, for _ in range(n) (py_append_100's loop)",
        key_len=KEY_LEN,
        pool=KEYED_POOL,
    )


def _dedup_row(s: Sizes, wd: Workdir) -> Row:
    n = s.records_100
    ids = [b"evt-%012d" % i for i in range(n)]

    def with_ids(append: Callable[..., int]) -> None:
        for i in ids:
            append(BODY_100, msg_id=i)

    ours, base = _appends(wd, n, with_ids), _appends(wd, n, _plain(n))
    say(f"appends with a fresh message id (100 B, single) against plain appends ({n})")
    to, tb = alternate(s.reps, ours, base)
    return throughput(
        NAMES[3],
        n,
        to,
        tb,
        "CommitLog(path, segment_size=1 GiB) (flush='async', dedup_window_ms 120,000), "
        "append(100 B, msg_id=16 B), a fresh id each, for i in a list of ids",
        "the same log's append(100 B) alone, for _ in range(n)",
        id_len=16,
    )


class _Lookups:
    """The lookup log, its sqlite3 tables and the keys looked up: built once, outside the clock,
    for both lookup rows."""

    def __init__(self, s: Sizes, wd: Workdir) -> None:
        from rmqlog import CommitLog

        self.records = LOOKUP_RECORDS_QUICK if s.quick else LOOKUP_RECORDS
        self.keys = self.records // PER_KEY
        n_lookups = LOOKUPS_QUICK if s.quick else LOOKUPS
        rng = random.Random(11)
        keys: list[bytes] = []
        seen: set[bytes] = set()
        while len(keys) < self.keys:
            k = rng.randbytes(KEY_LEN)
            if k not in seen:
                seen.add(k)
                keys.append(k)
        order = list(range(self.keys)) * PER_KEY
        rng.shuffle(order)
        scaled = f", scaled down from {LOOKUP_RECORDS:,} (quick mode)" if s.quick else ""
        say(
            f"lookup log: {self.records:,} records of 100 B{scaled}; {self.keys:,} distinct 16 B "
            f"keys x {PER_KEY}, in random order; sqlite3 tables of the (key, offset) pairs"
        )
        self.dir = wd.new()
        self.log = CommitLog(os.path.join(self.dir, "log"), segment_size=SEGMENT)
        append_batch = self.log.append_batch
        bodies = [BODY_100] * FILL_BATCH

        def pairs():
            for i in range(0, self.records, FILL_BATCH):
                batch_keys = [keys[j] for j in order[i : i + FILL_BATCH]]
                offsets = append_batch(bodies[: len(batch_keys)], keys=batch_keys)
                yield from zip(batch_keys, offsets, strict=True)

        # The row's table: an index on key. The extra's: the same pairs copied into a table
        # whose index holds (key, offset), so the query reads the index alone.
        self.db_path = os.path.join(self.dir, "keys.db")
        self.covering_path = os.path.join(self.dir, "covering.db")
        db = sqlite3.connect(self.db_path)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(TABLE)
        with db:  # one transaction
            db.executemany(INSERT, pairs())
        self.log.flush()
        assert len(self.log) == self.records, len(self.log)
        say("  filled; sqlite3: CREATE INDEX, and the covering table")
        db.execute("CREATE INDEX t_key ON t (key)")
        db.execute("ANALYZE")
        db.execute(f"ATTACH '{self.covering_path}' AS c")
        db.execute("PRAGMA c.journal_mode=WAL")
        db.execute(TABLE.replace("TABLE t", "TABLE c.t"))
        with db:
            db.execute("INSERT INTO c.t SELECT * FROM main.t")
        db.execute('CREATE INDEX c.t_key_offset ON t (key, "offset")')
        db.execute("ANALYZE c")
        db.execute("DETACH c")
        for path in (self.db_path, self.covering_path):
            con = sqlite3.connect(path)
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            con.close()
        db.close()
        absent = n_lookups * ABSENT_PCT // 100
        sample = rng.sample(keys, n_lookups - absent)
        while len(sample) < n_lookups:
            k = rng.randbytes(KEY_LEN)
            if k not in seen:
                sample.append(k)
        rng.shuffle(sample)
        self.sample = sample
        self.present = [k for k in sample if k in seen]
        self.expect = (n_lookups - absent) * PER_KEY
        self.scans = 0
        self.dbs = [
            sqlite3.connect(self.db_path),
            sqlite3.connect(self.db_path),
            sqlite3.connect(self.covering_path),
        ]
        self.dbs[1].execute(f"PRAGMA mmap_size={MMAP_SIZE}")
        self.dbs[2].execute(f"PRAGMA mmap_size={MMAP_SIZE}")
        plans = [db.execute("EXPLAIN QUERY PLAN " + SQL, (b"",)).fetchall() for db in self.dbs]
        assert all("INDEX t_key " in str(p) for p in plans[:2]), plans
        assert "COVERING INDEX t_key_offset" in str(plans[2]), plans
        self.cursors = [db.cursor() for db in self.dbs]
        os.sync()
        # Warm: one untimed pass of each side (the files are in the page cache since the fill).
        for side in (self.ours, *self.sqlite):
            side()

    def _ours(self) -> None:
        lookup = self.log.lookup
        found = 0
        for k in self.sample:
            found += len(lookup(k))
        assert found == self.expect, (found, self.expect)

    def ours(self) -> float:
        return timed(self._ours)

    @property
    def sqlite(self) -> list[Callable[[], float]]:
        """The row's baseline (an index on key, defaults), the same with PRAGMA mmap_size, and
        the covering index (key, offset) with mmap_size."""

        def side(cur: sqlite3.Cursor) -> Callable[[], float]:
            def go() -> None:
                execute = cur.execute
                found = 0
                for k in self.sample:
                    found += len(execute(SQL, (k,)).fetchall())
                assert found == self.expect, (found, self.expect)

            return lambda: timed(go)

        return [side(c) for c in self.cursors]

    def scan(self) -> float:
        """One lookup (of a present key: each scan takes the next) by a walk of the whole log
        with ``read_record``."""
        log = self.log
        key = self.present[self.scans % len(self.present)]
        self.scans += 1
        found: list[int] = []

        def go() -> None:
            read_record = log.read_record
            off, end = log.min_offset, log.max_offset
            while off < end:
                r = read_record(off, body="bytes")
                if r.key == key:
                    found.append(off)
                off = r.next_offset

        t = timed(go)
        assert found == log.lookup(key) and len(found) == PER_KEY, found
        return t

    def close(self) -> None:
        for c in self.cursors:
            c.close()
        for db in self.dbs:
            db.close()
        self.log.close()
        shutil.rmtree(self.dir)


def _lookup_rows(s: Sizes, wd: Workdir) -> list[Row]:
    lk = _Lookups(s, wd)
    n = len(lk.sample)
    common = {
        "records": lk.records,
        "distinct_keys": lk.keys,
        "per_key": PER_KEY,
        "absent_pct": ABSENT_PCT,
        "lookups": n,
    }
    scaled = f" (quick: scaled down from {LOOKUP_RECORDS:,})" if s.quick else ""
    ours_desc = (
        f"CommitLog.lookup(key) of {n:,} random 16 B keys ({ABSENT_PCT} % absent) in a "
        f"{lk.records:,}-record log{scaled} of 100 B bodies ({lk.keys:,} keys x {PER_KEY}, "
        "random order, 1 GiB segments), results counted"
    )
    try:
        say(f"lookups by key against sqlite3 ({n:,} lookups, {lk.records:,} records{scaled})")
        to, tb, tm, tc = alternate(s.reps, lk.ours, *lk.sqlite)
        say(f"  sqlite3 with mmap_size: {n / tm:,.0f}/s, ratio {tm / to:.3g}")
        say(
            f"  sqlite3, covering index (key, offset), mmap_size: {n / tc:,.0f}/s, "
            f"ratio {tc / to:.3g}"
        )
        rows = [
            rates(
                NAMES[1],
                n / to,
                n / tb,
                ours_desc,
                'sqlite3 table (key BLOB, "offset" INTEGER) of the same pairs (WAL, one '
                "executemany, CREATE INDEX on key, ANALYZE), same process, defaults, warm: "
                f"cursor.execute('{SQL}', (key,)).fetchall() per key (mmap_*: with PRAGMA "
                "mmap_size; covering_*: an index on (key, offset) and mmap_size)",
                **common,
                mmap_per_s=n / tm,
                mmap_ratio=tm / to,
                covering_per_s=n / tc,
                covering_ratio=tc / to,
            )
        ]
        reps = min(s.reps, SCAN_REPS)
        say(
            f"lookups by key against a walk of the log with read_record (a walk a lookup, "
            f"{reps} repetitions)"
        )
        to, tb = alternate(reps, lambda: lk.ours() / n, lk.scan)
        rows.append(
            rates(
                NAMES[2],
                1 / to,
                1 / tb,
                ours_desc,
                "a walk of the whole log per key with the public API: read_record(offset, "
                "body='bytes'), .key compared, .next_offset the next (one walk a repetition)",
                **common,
            )
        )
    finally:
        lk.close()
    return rows


def run(s: Sizes, wd: Workdir) -> list[Row]:
    why = _missing()
    if why is not None:
        return [skipped(n, why) for n in NAMES]
    return [_append_row(s, wd), *_lookup_rows(s, wd), _dedup_row(s, wd)]
