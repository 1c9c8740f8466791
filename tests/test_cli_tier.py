"""``rmqlog tier status``, ``rmqlog tier verify`` and the tier in ``stat``/``verify``/``dump``,
against a file:// tier (and an S3 endpoint that refuses connections)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rmqlog import CommitLog

SEG = 4096
BODY = b"t" * 200  # 232 bytes a record with its header: 17 records a segment


def cli(*args, timeout=120):
    """The command line in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "rmqlog", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def wait_for(log, done, what):
    deadline = time.monotonic() + 60
    while not done(log.tier_status()):
        assert time.monotonic() < deadline, f"{what}: {log.tier_status()}"
        time.sleep(0.02)


def fill(log, segments):
    """Appends until the log has ``segments`` more segments; the records' offsets."""
    want = len(log.segments()) + segments
    offsets = []
    while len(log.segments()) < want:
        offsets.append(log.append(BODY))
    return offsets


@pytest.fixture
def tiered(tmp_path):
    """A store over two directories whose tier holds 5 sealed segments: 3 only there, 2 also
    local; then 2 more sealed segments wait for upload (tier_after), and the active one:
    (dirs, url, tier directory, offsets)."""
    dirs = [tmp_path / "s0", tmp_path / "s1"]
    tier = tmp_path / "tier"
    url = tier.as_uri()
    with CommitLog(
        dirs, segment_size=SEG, tier_url=url, local_retention_bytes=3 * SEG, flush="sync"
    ) as log:
        offsets = fill(log, 6)  # 5 sealed, 3 of them deleted locally once uploaded
        wait_for(log, lambda t: t["uploads"] == 5 and t["local_deleted"] == 3, "uploads")
    with CommitLog(dirs, segment_size=SEG, tier_url=url, tier_after=3600, flush="sync") as log:
        offsets += fill(log, 2)
        offsets.append(log.append(BODY))
    return dirs, url, tier, offsets


def joined(dirs):
    return ":".join(map(str, dirs))


def api_status(target):
    with CommitLog(target, read_only=True) as log:
        return log.tier_status(), log.segments(), log.max_offset


def one_error_line(proc, pattern, code=2):
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("rmqlog: error: "), proc.stderr
    assert re.search(pattern, lines[0]), lines[0]
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------------------------
# tier status


def test_status_counts_segments_where_they_are(tiered):
    dirs, url, _, _ = tiered
    api, _, end = api_status([str(d) for d in dirs])
    expected = {"local": 3, "remote": 3, "both": 2, "pending": 2}
    assert (
        api["local_segments"],
        api["remote_segments"],
        api["both_segments"],
        api["pending_segments"],
    ) == tuple(expected.values())
    proc = cli("tier", "status", joined(dirs))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    v = api["manifest_version"]
    assert v >= 5
    assert f"tier: {url}\n" in out
    assert f"manifest: version {v} (the store's copy); the tier's: {v}\n" in out
    assert "segments: 3 local, 3 remote, 2 both\n" in out
    assert f"pending upload: 2 segments, {2 * SEG} bytes (8.0 KiB)\n" in out
    assert f"remote: 5 objects, {5 * SEG} bytes (20.0 KiB)\n" in out
    assert f"offsets: min 0  max {end}\n" in out
    assert "last error: none (the tier answered)\n" in out
    assert "OK" not in out
    doc = json.loads(cli("tier", "status", dirs[1], "--json").stdout)
    assert doc["url"] == url and doc["opened"] == "store"
    assert doc["manifest_version"] == doc["remote_manifest_version"] == v
    for key in ("local_segments", "remote_segments", "both_segments", "pending_segments"):
        assert doc[key] == api[key], key
    assert doc["pending_bytes"] == api["pending_bytes"] == 2 * SEG
    assert doc["remote_bytes"] == api["remote_bytes"] == 5 * SEG
    assert doc["error"] is None and doc["tier_check"] == "ok"
    assert (doc["min_offset"], doc["max_offset"]) == (0, end)


def test_status_by_url_opens_the_tier_alone(tiered):
    dirs, url, _, _ = tiered
    with CommitLog([str(d) for d in dirs], read_only=True) as log:
        v = log.tier_status()["manifest_version"]
        fifth_end = [s for s in log.segments() if s.remote][-1]
        remote_end = fifth_end.start_offset + fifth_end.written
    proc = cli("tier", "status", url)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"tier: {url}  (opened alone: no directory of the store is read)")
    assert f"manifest: version {v}\n" in proc.stdout
    assert "segments: 5 remote\n" in proc.stdout
    assert "pending" not in proc.stdout
    doc = json.loads(cli("tier", "status", url, "--json").stdout)
    assert doc["opened"] == "tier" and doc["paths"] == []
    assert doc["remote_segments"] == 5 and doc["manifest_version"] == v
    assert doc["local_segments"] is None and doc["pending_segments"] is None
    assert doc["max_offset"] == remote_end


def test_status_exit_1_when_the_tier_lost_its_manifest(tiered):
    dirs, _, tier, _ = tiered
    pointer = [p for p in tier.rglob("*") if p.name.endswith("CURRENT")]  # manifest/CURRENT
    assert len(pointer) == 1, list(tier.rglob("*"))
    pointer[0].unlink()
    proc = cli("tier", "status", joined(dirs))
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "the tier's: no manifest\n" in proc.stdout
    assert re.search(
        r"last error: the tier holds manifest version none, the store's copy is ", proc.stdout
    )
    assert "OK" not in proc.stdout


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_status_of_an_unreachable_tier_prints_then_fails(tmp_path):
    """An S3 endpoint that refuses connections: the writer's appends go on, its segments wait;
    status prints the local part, then exits 2 naming the failure."""
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    opts = {
        "endpoint": endpoint,
        "allow_http": "true",
        "access_key_id": "k",
        "secret_access_key": "s",
        "region": "us-east-1",
    }
    store = tmp_path / "s"
    with CommitLog(store, segment_size=SEG, tier_url="s3://bucket/log", tier_options=opts) as log:
        fill(log, 3)  # 2 sealed
        wait_for(log, lambda t: t["last_error"] is not None, "a failed upload")
        assert log.tier_status()["uploads"] == 0
    args = [f"--tier-option={k}={v}" for k, v in opts.items()]
    proc = cli("tier", "status", store, *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "tier: s3://bucket/log\n" in proc.stdout
    assert "pending upload: 2 segments" in proc.stdout
    assert "the tier's: no answer\n" in proc.stdout
    assert re.search(r"^last error: .*s3://bucket/log", proc.stdout, re.M), proc.stdout
    assert proc.stderr.startswith("rmqlog: error: ") and "Traceback" not in proc.stderr
    doc = json.loads(cli("tier", "status", store, "--json", *args).stdout)
    assert doc["pending_segments"] == 2 and doc["error"] and doc["remote_manifest_version"] is None
    assert doc["tier_check"] == "no answer"


# ---------------------------------------------------------------------------------------------
# tier verify


def test_verify_reads_back_every_object(tiered):
    dirs, url, _, _ = tiered
    _, _, end = api_status([str(d) for d in dirs])
    proc = cli("tier", "verify", joined(dirs))
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert proc.stdout == f"OK: {end} bytes, 8 segments verified, 5 remote objects read back\n"
    doc = json.loads(cli("tier", "verify", dirs[0], "--json").stdout)
    assert doc == {
        "ok": True,
        "bytes": end,
        "segments": 8,
        "damaged": [],
        "objects": 5,
        "remote_only_skipped": 0,
    }
    proc = cli("tier", "verify", url)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert re.fullmatch(
        r"OK: \d+ bytes, 5 segments verified, 5 remote objects read back\n", proc.stdout
    )


def test_verify_names_a_damaged_and_a_missing_object(tiered):
    dirs, url, tier, _ = tiered
    objects = sorted(p for p in tier.iterdir() if re.fullmatch(r"\d{20}", p.name))
    assert len(objects) == 5
    data = bytearray(objects[1].read_bytes())
    data[100] ^= 0xFF
    objects[1].write_bytes(bytes(data))
    objects[3].unlink()
    for target in (joined(dirs), url):
        proc = cli("tier", "verify", target)
        assert proc.returncode == 1, (proc.stdout, proc.stderr)
        corrupt = [x for x in proc.stdout.splitlines() if x.startswith("CORRUPT: ")]
        assert len(corrupt) == 2, proc.stdout
        start1, start3 = int(objects[1].name), int(objects[3].name)
        assert corrupt[0].startswith(f"CORRUPT: [{start1}, {start1 + SEG}) ")
        assert f"{url}/{objects[1].name}" in corrupt[0] and "CRC32C" in corrupt[0]
        assert corrupt[1].startswith(f"CORRUPT: [{start3}, {start3 + SEG}) ")
        assert f"{url}/{objects[3].name}" in corrupt[1] and "missing" in corrupt[1]
        assert proc.stdout.splitlines()[-1].startswith("FAILED: 2 damaged ranges in ")
    doc = json.loads(cli("tier", "verify", url, "--json").stdout)
    assert doc["ok"] is False and len(doc["damaged"]) == 2


def test_plain_verify_says_what_it_did_not_read(tiered):
    dirs, _, _, _ = tiered
    _, segs, end = api_status([str(d) for d in dirs])
    remote_only = [s for s in segs if s.remote and not s.local]
    assert len(remote_only) == 3
    local_bytes = end - 3 * SEG
    proc = cli("verify", joined(dirs))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        f"OK: {local_bytes} bytes, 5 segments verified; 3 remote-only segments not read "
        "(`rmqlog tier verify` reads them)\n"
    )


# ---------------------------------------------------------------------------------------------
# stat and dump


def test_stat_shows_where_each_segment_is(tiered):
    dirs, url, _, _ = tiered
    api, segs, _ = api_status([str(d) for d in dirs])
    doc = json.loads(cli("stat", joined(dirs), "--json").stdout)
    wheres = [s["where"] for s in doc["segments"]]
    assert wheres == ["remote"] * 3 + ["both"] * 2 + ["local"] * 3
    assert [s["path"] for s in doc["segments"][:3]] == [
        f"{url}/{s.start_offset:020d}" for s in segs[:3]
    ]
    tier = doc["tier"]
    assert tier["url"] == url and tier["manifest_version"] == api["manifest_version"]
    assert (tier["local_segments"], tier["remote_segments"], tier["both_segments"]) == (3, 3, 2)
    assert [s["where"] for s in tier["segments"]] == ["remote"] * 3
    assert sum(d["segment_count"] for d in doc["dirs"]) == 5  # the local files, no stray error
    assert all(d["error"] is None for d in doc["dirs"])
    out = cli("stat", joined(dirs)).stdout
    assert f"tier: {url}  manifest version {api['manifest_version']}\n" in out
    assert "    3 local, 3 remote, 2 both; pending upload 2 segments, 8192 bytes; " in out
    for s in segs:
        line = f"{s.start_offset:020d}  [{s.start_offset}, {s.start_offset + SEG})  "
        assert re.search(
            rf"^    {re.escape(line)}written \d+ / {SEG}  (local|remote|both)$", out, re.M
        )
    # a store without a tier: no tier line, every segment local
    plain = dirs[0].parent / "plain"
    with CommitLog(plain, segment_size=SEG) as log:
        fill(log, 1)
    doc = json.loads(cli("stat", plain, "--json").stdout)
    assert doc["tier"] is None and {s["where"] for s in doc["segments"]} == {"local"}
    assert "tier:" not in cli("stat", plain).stdout


def test_stat_and_dump_by_url(tiered):
    _, url, _, offsets = tiered
    doc = json.loads(cli("stat", url, "--json").stdout)
    assert doc["paths"] == [] and doc["segment_count"] == 5
    assert {s["where"] for s in doc["segments"]} == {"remote"}
    assert doc["tier"]["local_segments"] is None
    out = cli("stat", url).stdout
    assert out.startswith(f"store: the tier {url} alone")
    proc = cli("dump", url, "--json")
    assert proc.returncode == 0, proc.stderr
    dumped = [json.loads(x)["offset"] for x in proc.stdout.splitlines()]
    end = doc["max_offset"]
    assert dumped == [o for o in offsets if o < end] and len(dumped) > 50


# ---------------------------------------------------------------------------------------------
# mistakes


@pytest.mark.parametrize("action", ["status", "verify"])
def test_no_store_or_no_manifest_is_exit_2_never_ok(tmp_path, action):
    (tmp_path / "empty").mkdir()
    proc = cli("tier", action, tmp_path / "empty")
    one_error_line(proc, rf"no rmqlog store at {re.escape(str(tmp_path / 'empty'))}")
    assert proc.stdout == ""
    url = (tmp_path / "empty").as_uri()
    proc = cli("tier", action, url)
    one_error_line(proc, rf"no rmqlog store at {re.escape(url)} \(no rmqlog tier manifest")
    assert proc.stdout == ""
    proc = cli("tier", action, (tmp_path / "nope").as_uri())
    one_error_line(proc, "the tier directory does not exist")
    # a store without a tier
    with CommitLog(tmp_path / "plain", segment_size=SEG) as log:
        fill(log, 1)
    proc = cli("tier", action, tmp_path / "plain")
    one_error_line(proc, r"has no tier \(it records no tier_url\)")
    assert "OK" not in proc.stdout


def test_bad_tier_options_and_arguments(tiered, tmp_path):
    dirs, url, _, _ = tiered
    proc = cli("tier", "status", dirs[0], "--tier-option", "novalue")
    one_error_line(proc, r"invalid tier option 'novalue': expected KEY=VALUE")
    proc = cli("tier", "status", dirs[0], "--tier-option", "endpoint=http://x")
    one_error_line(proc, r"tier_options \"endpoint\" is not accepted for a file:// tier")
    proc = cli("tier", "status", url, dirs[0])
    one_error_line(proc, "a tier URL opens the tier alone")
    proc = cli("tier", "verify", url, "--tier-option", "region=x")
    one_error_line(proc, "not accepted for a file:// tier")
    proc = cli("tier", "status", "gopher://x/y")
    one_error_line(proc, r"scheme \"gopher\" is not supported")
    plain = tmp_path / "plain"
    CommitLog(plain).close()
    proc = cli("stat", plain, "--tier-option", "region=x")
    one_error_line(proc, "--tier-option: the store at .* has no tier")
    proc = cli("tier")
    one_error_line(proc, "required: ACTION|the following arguments are required")


def test_help_lists_the_tier_actions():
    proc = cli("tier", "--help")
    assert proc.returncode == 0
    for action in ("status", "verify"):
        assert re.search(rf"^\s+{action}\s+\S", proc.stdout, re.M), action
    text = " ".join(cli("tier", "status", "--help").stdout.split())
    assert "--tier-option KEY=VALUE" in text and "(default: none)" in text
    assert "tier URL" in text


def test_readme_and_docs_link_tiering():
    root = Path(__file__).parents[1]
    assert "docs/tiering.md" in (root / "README.md").read_text()
    assert "tiering.md" in (root / "docs" / "recovery.md").read_text()
