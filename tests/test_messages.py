"""Keys and headers: what append takes, what reads give back, what the CRC covers, and what
stores of record format 1 and older rmqlogs do with them (docs/messages.md)."""

from __future__ import annotations

import random
import re

import pytest

from rmqlog import (
    MAX_KEY_LEN,
    CommitLog,
    CommitLogError,
    CorruptionError,
)

HEADERS = [("type", b"payment"), ("type", b"refund"), ("trace", b"\xff\x00\xfe"), ("", b"")]


def test_keys_and_headers_round_trip_through_append_and_append_batch(tmp_path):
    big = bytes(range(256)) * 4096  # 1 MiB header value
    with CommitLog(str(tmp_path), segment_size=1 << 22) as log:
        plain = log.append(b"plain")
        keyed = log.append(b"body", key=b"order-4711", headers=HEADERS)
        empty = log.append(b"", key=b"", headers=[])
        text = log.append(b"t", key="clé", headers={"kind": "über", "n": b"1"})
        large = log.append(b"x", key=b"k" * MAX_KEY_LEN, headers=[("blob", big)])
        batch = log.append_batch(
            [b"a", b"b", b"c"],
            keys=[b"ka", None, bytearray(b"kc")],
            headers=[None, [("h", b"1")], [("h", memoryview(b"3"))]],
        )
        recs = {
            o: log.read_record(o, body="bytes") for o in [plain, keyed, empty, text, large, *batch]
        }
    assert (recs[plain].key, recs[plain].headers, recs[plain].body) == (None, [], b"plain")
    assert (recs[keyed].key, recs[keyed].headers, recs[keyed].body) == (
        b"order-4711",
        HEADERS,
        b"body",
    )
    assert (recs[empty].key, recs[empty].headers, recs[empty].body) == (b"", [], b"")
    assert recs[text].key == "clé".encode()
    assert recs[text].headers == [("kind", "über".encode()), ("n", b"1")]
    assert recs[large].key == b"k" * MAX_KEY_LEN and recs[large].headers == [("blob", big)]
    got = [(recs[o].key, recs[o].headers, recs[o].body) for o in batch]
    assert got == [(b"ka", [], b"a"), (None, [("h", b"1")], b"b"), (b"kc", [("h", b"3")], b"c")]
    # Plain reads give the body alone, whatever the record carries.
    with CommitLog(str(tmp_path), read_only=True) as ro:
        assert bytes(ro.read(keyed)) == b"body"
        assert [bytes(b) for _, b in ro.scan()][:3] == [b"plain", b"body", b""]
        assert ro.verify() == []


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"key": 5}, TypeError, "key must be bytes-like or a str"),
        ({"key": b"k" * (MAX_KEY_LEN + 1)}, ValueError, "at most 65535 bytes"),
        ({"headers": b"type=x"}, TypeError, "list of (name, value) tuples or a dict"),
        ({"headers": [("a",)]}, TypeError, "(name, value) tuple"),
        ({"headers": [(b"name", b"v")]}, TypeError, "header names are str"),
        ({"headers": [("n", 3)]}, TypeError, "headers[0]'s value"),
        ({"headers": {"n": None}}, TypeError, "headers[0]'s value"),
    ],
)
def test_bad_keys_and_headers_are_refused_before_anything_is_written(
    tmp_path, kwargs, error, words
):
    with CommitLog(str(tmp_path)) as log:
        log.append(b"before")
        end = log.max_offset
        with pytest.raises(error, match=re.escape(words)):
            log.append(b"body", **kwargs)
        assert log.max_offset == end


def test_batch_keys_and_headers_must_match_the_bodies(tmp_path):
    with CommitLog(str(tmp_path)) as log:
        with pytest.raises(ValueError, match="keys has 1 items for 2 bodies"):
            log.append_batch([b"a", b"b"], keys=[b"k"])
        with pytest.raises(TypeError, match="keys must be a sequence"):
            log.append_batch([b"a"], keys=b"k")
        with pytest.raises(ValueError, match=r"record \[1\]"):
            log.append_batch([b"a", b"b"], keys=[b"k", b"k" * (MAX_KEY_LEN + 1)])
        assert log.max_offset == 0


def test_a_flipped_bit_in_a_key_or_a_header_fails_every_read(tmp_path):
    with CommitLog(str(tmp_path)) as log:
        off = log.append(b"body", key=b"the-key", headers=[("name", b"value")])
        seg = log.segments()[0].path
    data = bytearray(open(seg, "rb").read())
    at = data.index(b"the-key", off)
    for pos in (at, data.index(b"value", at)):
        damaged = bytearray(data)
        damaged[pos] ^= 0x04
        open(seg, "wb").write(damaged)
        with CommitLog(str(tmp_path), read_only=True) as ro:
            with pytest.raises(CorruptionError):
                ro.read_record(off)
            with pytest.raises(CorruptionError):
                list(ro.scan())
            assert ro.verify() != []
    open(seg, "wb").write(data)


def test_a_format_1_store_refuses_keys_and_headers_but_appends_bodies(tmp_path):
    with CommitLog(str(tmp_path), record_format=1) as log:
        with pytest.raises(CommitLogError, match="record format 2"):
            log.append(b"b", key=b"k")
        with pytest.raises(CommitLogError, match="record format 2"):
            log.append_batch([b"b"], headers=[[("h", b"v")]])
        off = log.append(b"b")
        assert log.read_record(off).key is None


def test_random_messages_read_back_as_written(tmp_path):
    rng = random.Random(36)
    want = []
    with CommitLog(str(tmp_path), segment_size=1 << 16) as log:
        for _ in range(400):
            key = rng.choice([None, b"", rng.randbytes(rng.randrange(1, 40))])
            headers = [
                (rng.choice(["a", "b", "é"]), rng.randbytes(rng.randrange(0, 30)))
                for _ in range(rng.randrange(0, 4))
            ]
            body = rng.randbytes(rng.randrange(0, 300))
            want.append((log.append(body, key=key, headers=headers), key, headers, body))
    with CommitLog(str(tmp_path), read_only=True) as ro:
        for off, key, headers, body in want:
            r = ro.read_record(off, body="bytes")
            assert (r.key, r.headers, r.body) == (key, headers, body)
