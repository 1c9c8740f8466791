"""Filters on keys and headers (``key=``, ``key_prefix=``, ``headers=``), evaluated in Rust by
``scan``, ``scan_batches``, ``to_arrow``, ``log.consumer(...)`` and ``poll``/``poll_batches``
(docs/producers-consumers.md, "Filters"):

- every path delivers what a plain Python reference (``accepts``) says, on random keys, headers
  and filter shapes: scans (following too), batches on one or several threads, consumers
  exclusive and shared (two opens of one name);
- the records a filter refuses are still checked: a damaged one raises ``CorruptionError`` as
  in a plain scan;
- a consumer moves over what its filter refuses: one that never matches ends with its position
  (and, committed, its committed position) at the end, ``lag`` says what it will receive (exact
  when small, an upper bound otherwise), a poll through more refused records than one poll
  steps over does not spin and a waiting poll keeps waiting for a record that matches;
- bad arguments are refused, with nothing read or created.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time

import pytest

import rmqlog
from rmqlog import CommitLog, CorruptionError

KEYS = [None, b"", b"a", b"ab", b"abc", b"b", "é".encode()]
NAMES = ["t", "u", ""]
VALUES = [b"", b"1", b"2", b"x"]


def random_record(
    rnd: random.Random, i: int
) -> tuple[bytes, bytes | None, list[tuple[str, bytes]]]:
    key = rnd.choice(KEYS)
    headers = [(rnd.choice(NAMES), rnd.choice(VALUES)) for _ in range(rnd.choice([0, 0, 1, 2, 3]))]
    return b"body-%d" % i, key, headers


def as_bytes(v: bytes | str) -> bytes:
    return v.encode() if isinstance(v, str) else bytes(v)


def accepts(f: dict, key: bytes | None, headers: list[tuple[str, bytes]]) -> bool:
    """The reference: what ``f`` (the keywords of a call) accepts, written the plain way."""
    k, prefix, hs = f.get("key"), f.get("key_prefix"), f.get("headers")
    if k is not None:
        accepted = (
            {as_bytes(x) for x in k}
            if isinstance(k, list | tuple | set | frozenset)
            else {as_bytes(k)}
        )
        if key is None or key not in accepted:
            return False
    if prefix is not None and (key is None or not key.startswith(as_bytes(prefix))):
        return False
    for name, want in (hs or {}).items():
        ok = (
            {as_bytes(x) for x in want}
            if isinstance(want, list | tuple | set | frozenset)
            else {as_bytes(want)}
        )
        if not any(n == name and v in ok for n, v in headers):
            return False
    return True


def random_filter(rnd: random.Random) -> dict:
    """A filter's keywords: any mix of key (one or a collection, bytes or str), key_prefix and
    headers (one value or a collection per name), at least one condition."""
    while True:
        f: dict = {}
        if rnd.random() < 0.5:
            some = [k for k in KEYS if k is not None]
            f["key"] = (
                rnd.choice(some)
                if rnd.random() < 0.5
                else rnd.choice([list, tuple, set, frozenset])(rnd.sample(some, rnd.randint(1, 3)))
            )
            if isinstance(f["key"], bytes) and rnd.random() < 0.3 and f["key"].isascii():
                f["key"] = f["key"].decode()  # a str: its UTF-8 bytes
        if rnd.random() < 0.3:
            f["key_prefix"] = rnd.choice([b"", b"a", "ab", b"b"])
        if rnd.random() < 0.6:
            f["headers"] = {
                name: rnd.choice(VALUES)
                if rnd.random() < 0.5
                else rnd.choice([list, set])(rnd.sample(VALUES, rnd.randint(1, 3)))
                for name in rnd.sample(NAMES, rnd.randint(1, 2))
            }
        if f:
            return f


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store of random records (some plain, some with keys and headers) over small segments:
    its directory, and each record's (offset, key, headers)."""
    d = tmp_path_factory.mktemp("filters")
    rnd = random.Random(20261128)
    recs = [random_record(rnd, i) for i in range(400)]
    with CommitLog(str(d), segment_size=4096) as log:
        offs = []
        for chunk in range(0, len(recs), 50):
            part = recs[chunk : chunk + 50]
            offs += log.append_batch(
                [b for b, _, _ in part],
                keys=[k for _, k, _ in part],
                headers=[h for _, _, h in part],
            )
        assert len(log.segments()) > 2
    return str(d), [(o, k, h) for o, (_, k, h) in zip(offs, recs, strict=True)]


def wanted(records, f: dict, start: int = 0) -> list[int]:
    return [o for o, k, h in records if o >= start and accepts(f, k, h)]


FILTERS = [random_filter(random.Random(seed)) for seed in range(24)] + [
    {"key": b"a"},
    {"key": [b"a", "ab"]},
    {"key_prefix": b""},  # any record with a key
    {"key": b"zz"},  # nothing
    {"headers": {"t": b"1"}},
    {"headers": {"t": [b"1", b"2"], "u": b""}},
    {"key": {b"a", b"ab", b"abc"}, "key_prefix": b"ab", "headers": {}},  # key AND prefix
]


def test_scans_deliver_what_the_reference_accepts(store):
    path, records = store
    end = records[-1][0] + 1
    with CommitLog(path, read_only=True) as log:
        for f in FILTERS:
            want = wanted(records, f)
            got = [o for o, _ in log.scan(**f)]
            assert got == want, f
            # From a record inside the range, bodies as bytes: the same records, the right ones.
            start = records[123][0]
            scanned = list(log.scan(start, body="bytes", **f))
            assert [o for o, _ in scanned] == wanted(records, f, start), f
            assert all(b == log.read(o, body="bytes") for o, b in scanned)
            for threads, max_records in [(1, 7), (3, 5), (2, 65536)]:
                batches = list(
                    log.scan_batches(
                        columns=["offset"], threads=threads, max_records=max_records, **f
                    )
                )
                assert [o for b in batches for o in b.column("offset").to_pylist()] == want, (
                    f,
                    threads,
                )
                assert all(b.num_rows > 0 for b in batches)
            scan = log.scan_batches(**f)
            for _ in scan:
                pass
            assert scan.position >= records[-1][0] and scan.position <= end + 64 * 1024
        # A stream taken from a filtered BatchScan is filtered too; to_arrow takes the keywords.
        f = FILTERS[-3]
        import pyarrow as pa

        stream = pa.RecordBatchReader.from_stream(log.scan_batches(**f))
        assert stream.read_all().column("offset").to_pylist() == wanted(records, f)
        table = rmqlog.to_arrow(log, columns=["offset"], **f)
        assert table.column("offset").to_pylist() == wanted(records, f)


def test_following_scans_filter_the_records_as_they_come(tmp_path):
    with CommitLog(str(tmp_path)) as log:
        log.append(b"before", key=b"k")
        start = log.max_offset
        got: list[int] = []
        batches: list[int] = []

        def follow() -> None:
            got.extend(
                o for o, _ in log.scan(start, follow=True, timeout=0.5, headers={"t": "hit"})
            )

        def follow_batches() -> None:
            for b in log.scan_batches(
                start, follow=True, timeout=0.5, columns=["offset"], headers={"t": "hit"}
            ):
                batches.extend(b.column("offset").to_pylist())

        threads = [threading.Thread(target=follow), threading.Thread(target=follow_batches)]
        for t in threads:
            t.start()
        want = []
        for i in range(30):
            hit = i % 3 == 0
            o = log.append(b"%d" % i, headers={"t": "hit" if hit else "miss"})
            want += [o] if hit else []
            time.sleep(0.005)
        for t in threads:
            t.join(10)
        assert got == want and batches == want


def drain(consumer, *, batches: bool = False, max_records: int = 7) -> list[int]:
    """Polls ``consumer`` until a poll finds nothing; the offsets it delivered (committed every
    few polls, and at the end: over what the last polls refused)."""
    out: list[int] = []
    for polls in range(1, 1 << 20):
        if batches:
            polled = consumer.poll_batches(max_records, timeout=0, columns=["offset"])
            offs = [o for b in polled for o in b.column("offset").to_pylist()]
        else:
            offs = [o for o, _ in consumer.poll(max_records, timeout=0)]
        if not offs and not consumer._has_more_now():
            consumer.commit()
            return out
        out += offs
        if polls % 8 == 0:
            consumer.commit()  # a shared name keeps at most 120 polls uncommitted
    raise AssertionError("a million polls")


@pytest.mark.parametrize("exclusive", [True, False])
def test_consumers_deliver_what_the_reference_accepts(store, exclusive):
    path, records = store
    end = records[-1][0]
    with CommitLog(path, read_only=True) as log:
        for i, f in enumerate(FILTERS):
            name = f"c{i}-{exclusive}"
            c = log.consumer(name, exclusive=exclusive, **f)
            got = drain(c, batches=i % 2 == 1)
            assert got == wanted(records, f), f
            assert c.position > end and c.committed == c.position  # over what it refused, too
            assert c.lag == {"records": 0, "bytes": 0, "exact": True}
            c.close()
            listed = next(x for x in log.consumers() if x["name"] == name)
            assert (listed["position"], listed["lag_records"]) == (log.max_offset, 0)


def test_two_opens_sharing_a_name_split_what_the_filter_accepts(store):
    path, records = store
    with CommitLog(path, read_only=True) as log:
        for i, f in enumerate(FILTERS[::3]):
            name = f"shared-{i}"
            a, b = log.consumer(name, **f), log.consumer(name, **f)
            seen: list[int] = []
            rnd = random.Random(i)
            idle = 0
            while idle < 4:
                c = rnd.choice([a, b])
                offs = [o for o, _ in c.poll(rnd.randint(1, 9), timeout=0)]
                idle = 0 if offs or c._has_more_now() else idle + 1
                seen += offs
                if rnd.random() < 0.7:
                    c.commit()
            a.commit()
            b.commit()
            assert sorted(seen) == wanted(records, f) and len(set(seen)) == len(seen), f
            listed = next(x for x in log.consumers() if x["name"] == name)
            assert listed["position"] == log.max_offset and listed["pending"] == 0
            a.close()
            b.close()


def test_a_poll_narrows_the_opens_filter(store):
    path, records = store
    with CommitLog(path, read_only=True) as log:
        c = log.consumer("narrow", exclusive=True, key_prefix=b"a")
        f = {"key_prefix": b"a", "headers": {"t": [b"1", b"2"]}}
        got = [o for o, _ in c.poll(1000, timeout=0, headers={"t": [b"1", b"2"]})]
        assert got == wanted(records, f)
        # The next poll, with the open's filter alone, goes on from there: what the narrowed
        # poll refused is behind the position.
        assert [o for o, _ in c.poll(1000, timeout=0)] == []
        c.seek("earliest")
        assert [o for o, _ in c.poll(1000, timeout=0)] == wanted(records, {"key_prefix": b"a"})


def flip_byte(log: CommitLog, offset: int, at: int) -> None:
    seg = next(s for s in log.segments() if s.start_offset <= offset < s.start_offset + s.size)
    log.close()
    with open(seg.path, "r+b") as f:
        f.seek(offset - seg.start_offset + at)
        old = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([old[0] ^ 0xFF]))


@pytest.mark.parametrize("exclusive", [True, False])
def test_a_damaged_record_the_filter_refuses_still_raises(tmp_path, exclusive):
    log = CommitLog(str(tmp_path), segment_size=16 * 1024)
    offs = [
        log.append(b"record-%d" % i, headers={"t": "hit" if i % 10 == 0 else "miss"})
        for i in range(60)
    ]
    victim = offs[33]  # a miss
    flip_byte(log, victim, rmqlog.HEADER_LEN + 12)  # in its properties or body: under the CRC
    with CommitLog(str(tmp_path), read_only=True) as ro:
        for f in [{"headers": {"t": "hit"}}, {"headers": {"t": "none"}}, {"key": b"k"}]:
            with pytest.raises(CorruptionError, match=str(victim)):
                for _ in ro.scan(**f):
                    pass
            for threads in [1, 3]:
                with pytest.raises(CorruptionError, match=str(victim)):
                    list(ro.scan_batches(threads=threads, max_records=4, **f))
            c = ro.consumer(f"c{len(f)}-{exclusive}", exclusive=exclusive, **f)
            with pytest.raises(CorruptionError, match=str(victim)):
                drain(c)
            c.close()
        # The plain scan refuses it the same way.
        with pytest.raises(CorruptionError, match=str(victim)):
            list(ro.scan())


@pytest.fixture(scope="module")
def long_store(tmp_path_factory):
    """More records than two polls step over (``FILTER_SKIP_RECORDS``, 262,144 each), plain
    ones (no key, no header: every filter below refuses them). Its tests share one worker."""
    d = tmp_path_factory.mktemp("long")
    n = (2 << 18) + 5000
    with CommitLog(str(d), segment_size=32 << 20) as log:
        log.append_batch([b"x"] * n)
    return str(d), n


@pytest.mark.xdist_group("filters-long")
@pytest.mark.parametrize("exclusive", [True, False])
def test_a_poll_through_refused_records_is_bounded_and_a_waiting_one_waits_for_a_match(
    long_store, exclusive
):
    path, _ = long_store
    hit = f"hit-{exclusive}"  # the module's store is shared: this run's own records
    with CommitLog(path) as log:
        end = log.max_offset
        c = log.consumer(f"bounded-{exclusive}", exclusive=exclusive, headers={"t": hit})
        # timeout=0: one poll's worth of refused records, then [] with more there now.
        assert c.poll(timeout=0) == []
        assert c._has_more_now() and 0 < c.position < end
        # A waiting poll goes on through them, then waits for a record that matches.
        appended: list[int] = []

        def append_later() -> None:
            time.sleep(0.3)
            log.append(b"miss", headers={"t": "miss"})
            time.sleep(0.1)
            appended.append(log.append(b"hit", headers={"t": hit}))

        t = threading.Thread(target=append_later)
        t.start()
        got = c.poll(timeout=20)
        t.join()
        assert [o for o, _ in got] == appended
        assert c.commit() == log.max_offset
        assert c.lag == {"records": 0, "bytes": 0, "exact": True}
        # A poll whose time is up returns [] having gone on as far as it could.
        log.append_batch([b"m"] * 10, headers=[[("t", b"miss")]] * 10)
        assert c.poll(timeout=0.2) == [] and c.position == log.max_offset
        c.close()


@pytest.mark.xdist_group("filters-long")
@pytest.mark.parametrize("exclusive", [True, False])
def test_poll_async_goes_on_through_refused_records(long_store, exclusive):
    path, _ = long_store

    async def main() -> list:
        with CommitLog(path, read_only=True) as log:
            c = log.consumer(f"async-{exclusive}", exclusive=exclusive, headers={"t": "never"})
            started = time.monotonic()
            got = await c.poll_async(timeout=0.3)
            return [got, time.monotonic() - started, c.position, log.max_offset]

    got, took, position, end = asyncio.run(main())
    assert got == [] and position == end and took < 10


def test_lag_counts_what_the_filter_accepts_when_small_and_says_when_it_does_not(tmp_path):
    with CommitLog(str(tmp_path), segment_size=64 << 20) as log:
        for i in range(100):
            log.append(b"x" * 100, key=b"hit" if i % 4 == 0 else b"miss")
        plain = log.consumer("plain", exclusive=True)
        c = log.consumer("lag", exclusive=True, key=b"hit")
        assert c.lag == {"records": 25, "bytes": log.max_offset, "exact": True}
        assert plain.lag == {"records": 100, "bytes": log.max_offset}
        # Over 8 MiB behind: every record, an upper bound, and said so.
        log.append_batch([b"y" * (1 << 20)] * 9, keys=[b"miss"] * 9)
        assert c.lag == {"records": 109, "bytes": log.max_offset, "exact": False}
        assert [o for o, _ in c.poll(100, timeout=0)] and c.commit() == log.max_offset
        assert c.lag == {"records": 0, "bytes": 0, "exact": True}


def test_opens_of_a_shared_name_with_different_filters(tmp_path):
    """Documented as a misuse (every open of a name should give the same filter): a claim one
    open left goes to another, which delivers what its own filter accepts and moves over the
    rest; a claim committed by an open whose filter refused some of its records takes them from
    the name. Nothing fails, and the name's position reaches the end."""
    with CommitLog(str(tmp_path)) as log:
        keys = [b"a", b"a", b"a", b"b", b"a", b"b"]
        offs = [log.append(b"%d" % i, key=k) for i, k in enumerate(keys)]
        a = log.consumer("q", key=b"a")
        assert [o for o, _ in a.poll(3, timeout=0)] == offs[:3]
        a.close()  # its claim goes back, uncommitted: none of b's records in it
        b = log.consumer("q", key=b"b")
        assert [o for o, _ in b.poll(100, timeout=0)] == [offs[3], offs[5]]
        assert b.commit() == log.max_offset
        more = [log.append(b"late", key=k) for k in [b"b", b"a"]]
        a = log.consumer("q", key=b"a")
        assert [o for o, _ in a.poll(100, timeout=0)] == [more[1]]  # its claim holds more[0]
        a.commit()
        assert b.poll(100, timeout=0) == []  # committed by a: gone for the name
        assert next(x for x in log.consumers() if x["name"] == "q")["position"] == log.max_offset


BAD = [
    (
        {"key": 5},
        TypeError,
        "key must be bytes-like, a str, or a list, tuple or set of them, got int",
    ),
    ({"key": []}, ValueError, "key is an empty list: no record would match"),
    ({"key": frozenset()}, ValueError, "key is an empty frozenset"),
    ({"key": [b"a", 3]}, TypeError, "key's items must be bytes-like or str; item 1 is int"),
    ({"key": {"a": b"x"}}, TypeError, "got dict"),
    ({"key_prefix": [b"a"]}, TypeError, "key_prefix must be bytes-like or a str, got list"),
    ({"headers": [("t", b"x")]}, TypeError, "headers must be a dict"),
    ({"headers": {b"t": b"x"}}, TypeError, "header names are str"),
    ({"headers": {"t": 1}}, TypeError, 'headers\\["t"\\] must be bytes-like'),
    ({"headers": {"t": []}}, ValueError, 'headers\\["t"\\] is an empty list'),
    ({"headers": {"t": [None]}}, TypeError, "item 0 is NoneType"),
]


def test_bad_filters_are_refused_before_anything_is_read_or_created(tmp_path):
    with CommitLog(str(tmp_path)) as log:
        log.append(b"r", key=b"a", headers={"t": "x"})
        c = log.consumer("c", exclusive=True)
        for kwargs, error, words in BAD:
            with pytest.raises(error, match=words):
                log.scan(**kwargs)
            with pytest.raises(error, match=words):
                log.scan_batches(**kwargs)
            with pytest.raises(error, match=words):
                rmqlog.to_arrow(log, **kwargs)
            with pytest.raises(error, match=words):
                log.consumer("other", **kwargs)
            with pytest.raises(error, match=words):
                c.poll(timeout=0, **kwargs)
            with pytest.raises(error, match=words):
                c.poll_batches(timeout=0, **kwargs)
        assert [x["name"] for x in log.consumers()] == ["c"]  # no other name was created
        assert c.position == 0  # nothing was read
        # None is "no condition": every record.
        assert [o for o, _ in log.scan(key=None, key_prefix=None, headers=None)] == [0]
        assert [o for o, _ in c.poll(timeout=0, key=None, headers=None)] == [0]
