"""Helpers of the remote tier tests: records to write and check, the tier's objects and manifest
as a reader of the store sees them, waiting on ``tier_status()`` with a deadline, and CRC32C."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SEGMENT = 64 * 1024
MANIFEST = "manifest/"


def tier_kwargs(tier) -> dict[str, Any]:
    """``tier_url`` and ``tier_options`` of a ``tier`` fixture (no options for file://)."""
    return {"tier_url": tier.url, "tier_options": tier.options or None}


@dataclass(frozen=True)
class Rec:
    offset: int
    body: bytes
    timestamp_ms: int


def payload(i: int, size: int = 1000) -> bytes:
    """A distinct body for record ``i``: its index, then filler that differs per record."""
    head = f"{i:08d}|".encode()
    return (head + bytes((i * 7 + k) % 251 for k in range(size)))[:size]


def append_records(log, n: int, first: int = 0, size: int = 1000) -> list[Rec]:
    """Appends records ``first .. first + n``; a short pause every 20 so that timestamps differ."""
    out = []
    for i in range(first, first + n):
        off = log.append(payload(i, size))
        out.append(Rec(off, payload(i, size), log.read_record(off).timestamp_ms))
        if i % 20 == 19:
            time.sleep(0.002)
    return out


def wait_for(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Polls ``check`` until it returns something true (returned), or fails after ``timeout``
    seconds naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout} s: {what} (last: {got!r})")
        time.sleep(0.02)


def status_when(log, pred: Callable[[dict], bool], what: str, timeout: float = 30.0) -> dict:
    """``tier_status()`` once ``pred`` holds for it."""
    last: dict = {}

    def check():
        nonlocal last
        last = log.tier_status()
        return pred(last)

    try:
        wait_for(check, what, timeout)
    except AssertionError as e:
        raise AssertionError(f"{e}; tier_status: {last}") from None
    return last


def uploaded(log, timeout: float = 30.0) -> dict:
    """Waits until every sealed segment is uploaded and the tier reports no error."""
    return status_when(
        log,
        lambda s: s["pending_segments"] == 0 and s["last_error"] is None,
        "every sealed segment uploaded",
        timeout,
    )


def remote_only(log, keep_local: int = 1, timeout: float = 30.0) -> dict:
    """Waits until everything sealed is uploaded and at most ``keep_local`` segments (the active
    one included) still have a local copy."""
    return status_when(
        log,
        lambda s: (
            s["pending_segments"] == 0
            and s["last_error"] is None
            and s["local_segments"] + s["both_segments"] <= keep_local
        ),
        f"sealed segments uploaded, at most {keep_local} local",
        timeout,
    )


def object_name(start: int) -> str:
    return f"{start:020d}"


def objects(tier) -> list[str]:
    """The segment objects under the tier's root (the manifest's objects left out, and a file://
    store's staging files: object_store writes ``NAME#N`` and links it into place, so a writer
    killed mid-put leaves one, which no listing of the store shows as an object)."""
    return [k for k in tier.keys() if not k.startswith(MANIFEST) and "#" not in k]


def exists(tier, name: str) -> bool:
    """Whether the object ``name`` is there (one request)."""
    if tier.kind == "file":
        return (tier.path / name).exists()
    try:
        tier.client.head_object(Bucket=tier.bucket, Key=f"{tier.prefix}/{name}")
    except Exception as e:  # botocore's ClientError, 404
        if "404" not in str(e):
            raise
        return False
    return True


def manifest(tier) -> dict:
    """The manifest ``manifest/CURRENT`` points at, parsed."""
    version = int(tier.read(MANIFEST + "CURRENT").decode().strip())
    m = json.loads(tier.read(f"{MANIFEST}{version:020d}.json"))
    assert m["version"] == version
    return m


def listed(tier) -> list[int]:
    """Start offsets of the segments the current manifest lists (none before the first)."""
    if MANIFEST + "CURRENT" not in tier.keys():
        return []
    return [e["start"] for e in manifest(tier)["segments"]]


def check_reads(log, recs: list[Rec]) -> None:
    """Every record reads back with its offset and body, by read, read_record and scan."""
    for r in recs:
        assert bytes(log.read(r.offset)) == r.body, f"read({r.offset})"
        rec = log.read_record(r.offset)
        assert (rec.offset, rec.timestamp_ms, bytes(rec.body)) == (
            r.offset,
            r.timestamp_ms,
            r.body,
        )
    scanned = [(off, bytes(b)) for off, b in log.scan(recs[0].offset, recs[-1].offset + 1)]
    assert scanned == [(r.offset, r.body) for r in recs]


def flip_byte(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


def _crc_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    """CRC32C (Castagnoli), as the manifest and the object metadata give it."""
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF
