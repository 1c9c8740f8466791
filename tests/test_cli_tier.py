"""``rmqlog tier status``, ``rmqlog tier verify`` and the tier in ``stat``/``verify``/``dump``,
against each tier of conftest.py (moto's S3 server and a ``file://`` directory)."""

from __future__ import annotations

import json
import re
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


def option_args(tier) -> list[str]:
    """``--tier-option`` for each option the tier's store needs (S3: endpoint, credentials)."""
    return [f"--tier-option={k}={v}" for k, v in tier.options.items()]


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


def segment_objects(tier) -> list[str]:
    return [k for k in tier.keys() if re.fullmatch(r"\d{20}", k)]


@pytest.fixture
def tiered(tmp_path, tier):
    """A store over two directories whose tier holds 5 sealed segments: 3 only there, 2 also
    local; then 2 more sealed segments wait for upload (tier_after), and the active one:
    (dirs, tier, offsets)."""
    dirs = [tmp_path / "s0", tmp_path / "s1"]
    common = {"segment_size": SEG, "tier_url": tier.url, "tier_options": tier.options or None}
    with CommitLog(dirs, local_retention_bytes=3 * SEG, flush="sync", **common) as log:
        offsets = fill(log, 6)  # 5 sealed, 3 of them deleted locally once uploaded
        wait_for(log, lambda t: t["uploads"] == 5 and t["local_deleted"] == 3, "uploads")
    # Local retention off from here on (named: the store keeps what an open does not name).
    with CommitLog(
        dirs, tier_after=3600, local_retention_bytes=None, flush="sync", **common
    ) as log:
        offsets += fill(log, 2)
        offsets.append(log.append(BODY))
    assert len(segment_objects(tier)) == 5
    return dirs, tier, offsets


def joined(dirs):
    return ":".join(map(str, dirs))


def one_error_line(proc, pattern, code=2):
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("rmqlog: error: "), proc.stderr
    assert re.search(pattern, lines[0]), lines[0]
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------------------------
# tier status


def test_status_counts_segments_where_they_are(tiered):
    dirs, tier, _ = tiered
    with CommitLog([str(d) for d in dirs], read_only=True) as log:
        api, end = log.tier_status(), log.max_offset
    counts = ("local_segments", "remote_segments", "both_segments", "pending_segments")
    assert tuple(api[k] for k in counts) == (3, 3, 2, 2)
    proc = cli("tier", "status", joined(dirs), *option_args(tier))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    v = api["manifest_version"]
    assert v >= 5
    assert f"tier: {tier.url}\n" in out
    assert f"manifest: version {v} (the store's copy); the tier's: {v}\n" in out
    assert "segments: 3 local, 3 remote, 2 both\n" in out
    assert f"pending upload: 2 segments, {2 * SEG} bytes (8.0 KiB)\n" in out
    assert f"remote: 5 objects, {5 * SEG} bytes (20.0 KiB)\n" in out
    assert f"offsets: min 0  max {end}\n" in out
    assert "last error: none (the tier answered)\n" in out
    assert "OK" not in out
    doc = json.loads(cli("tier", "status", dirs[1], "--json", *option_args(tier)).stdout)
    assert doc["url"] == tier.url and doc["opened"] == "store"
    assert doc["manifest_version"] == doc["remote_manifest_version"] == v
    for key in counts:
        assert doc[key] == api[key], key
    assert doc["pending_bytes"] == api["pending_bytes"] == 2 * SEG
    assert doc["remote_bytes"] == api["remote_bytes"] == 5 * SEG
    assert doc["error"] is None and doc["tier_check"] == "ok"
    assert (doc["min_offset"], doc["max_offset"]) == (0, end)


def test_status_by_url_opens_the_tier_alone(tiered):
    dirs, tier, _ = tiered
    with CommitLog([str(d) for d in dirs], read_only=True) as log:
        v = log.tier_status()["manifest_version"]
        last = [s for s in log.segments() if s.remote][-1]
    proc = cli("tier", "status", tier.url, *option_args(tier))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(
        f"tier: {tier.url}  (opened alone: no directory of the store is read)\n"
    )
    assert f"manifest: version {v}\n" in proc.stdout
    assert "segments: 5 remote\n" in proc.stdout
    assert "pending" not in proc.stdout
    doc = json.loads(cli("tier", "status", tier.url, "--json", *option_args(tier)).stdout)
    assert doc["opened"] == "tier" and doc["paths"] == []
    assert doc["remote_segments"] == 5 and doc["manifest_version"] == v
    assert doc["local_segments"] is None and doc["pending_segments"] is None
    assert doc["max_offset"] == last.start_offset + last.written


def test_status_exit_1_when_the_tier_lost_its_manifest(tiered):
    dirs, tier, _ = tiered
    assert "manifest/CURRENT" in tier.keys()
    tier.delete("manifest/CURRENT")
    proc = cli("tier", "status", joined(dirs), *option_args(tier))
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "the tier's: no manifest\n" in proc.stdout
    assert re.search(
        r"^last error: the tier holds manifest version none, the store's copy is ",
        proc.stdout,
        re.M,
    )
    assert "OK" not in proc.stdout


def test_status_of_an_unreachable_tier_prints_then_fails(tmp_path, s3_bucket, s3_server):
    """The S3 server stopped: the writer's appends go on, its segments wait; status prints the
    local part, then exits 2 naming the failure."""
    store = tmp_path / "s"
    with CommitLog(
        store, segment_size=SEG, tier_url=s3_bucket.url, tier_options=s3_bucket.options
    ) as log:
        fill(log, 2)
        wait_for(log, lambda t: t["uploads"] == 1, "the first upload")
        with s3_server.stopped():
            fill(log, 2)
            wait_for(log, lambda t: t["last_error"] is not None, "a failed upload")
            assert log.tier_status()["pending_segments"] == 2
            proc = cli("tier", "status", store, *option_args(s3_bucket))
            doc = json.loads(cli("tier", "status", store, "--json", *option_args(s3_bucket)).stdout)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert f"tier: {s3_bucket.url}\n" in proc.stdout
    assert "pending upload: 2 segments" in proc.stdout
    assert "the tier's: no answer\n" in proc.stdout
    assert re.search(rf"^last error: .*{re.escape(s3_bucket.url)}", proc.stdout, re.M)
    assert proc.stderr.startswith("rmqlog: error: ") and "Traceback" not in proc.stderr
    assert doc["pending_segments"] == 2 and doc["remote_manifest_version"] is None
    assert doc["tier_check"] == "no answer" and s3_bucket.url in doc["error"]
    proc = cli("tier", "status", store, *option_args(s3_bucket))  # the server is back
    assert proc.returncode == 0, (proc.stdout, proc.stderr)


# ---------------------------------------------------------------------------------------------
# tier verify


def test_verify_reads_back_every_object(tiered):
    dirs, tier, offsets = tiered
    with CommitLog([str(d) for d in dirs], read_only=True) as log:
        # Counted without the tier's options: remote-only segments count from the manifest.
        end, n = log.max_offset, len(log)
        assert n == len(offsets)
    proc = cli("tier", "verify", joined(dirs), *option_args(tier))
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert proc.stdout == (
        f"OK: {n} records, {end} bytes, 8 segments verified, 5 remote objects read back\n"
    )
    doc = json.loads(cli("tier", "verify", dirs[0], "--json", *option_args(tier)).stdout)
    assert doc == {
        "ok": True,
        "records": n,
        "bytes": end,
        "segments": 8,
        "damaged": [],
        "objects": 5,
        "remote_only_skipped": 0,
    }
    proc = cli("tier", "verify", tier.url, *option_args(tier))
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert re.fullmatch(
        r"OK: \d+ records, \d+ bytes, 5 segments verified, 5 remote objects read back\n",
        proc.stdout,
    )


def test_verify_names_a_damaged_and_a_missing_object(tiered):
    dirs, tier, _ = tiered
    objects = segment_objects(tier)
    data = bytearray(tier.read(objects[1]))
    data[100] ^= 0xFF
    tier.write(objects[1], bytes(data))  # only in the tier
    tier.delete(objects[3])  # also local
    for target in (joined(dirs), tier.url):
        proc = cli("tier", "verify", target, *option_args(tier))
        assert proc.returncode == 1, (proc.stdout, proc.stderr)
        corrupt = [x for x in proc.stdout.splitlines() if x.startswith("CORRUPT: ")]
        assert len(corrupt) == 2, proc.stdout
        start1, start3 = int(objects[1]), int(objects[3])
        assert corrupt[0].startswith(f"CORRUPT: [{start1}, {start1 + SEG}) ")
        assert f"{tier.url}/{objects[1]}" in corrupt[0] and "CRC32C" in corrupt[0]
        assert corrupt[1].startswith(f"CORRUPT: [{start3}, {start3 + SEG}) ")
        assert f"{tier.url}/{objects[3]}" in corrupt[1] and "missing" in corrupt[1]
        assert proc.stdout.splitlines()[-1].startswith("FAILED: 2 damaged ranges in ")
    doc = json.loads(cli("tier", "verify", tier.url, "--json", *option_args(tier)).stdout)
    assert doc["ok"] is False and len(doc["damaged"]) == 2


def test_verify_of_a_store_whose_tier_lost_its_manifest_fails(tiered):
    """Every object still reads back against the store's copy of the manifest, but the tier's
    own manifest is gone: a reader of the URL finds no log, so verify must not say OK."""
    dirs, tier, _ = tiered
    for key in tier.keys():
        if key.startswith("manifest/"):
            tier.delete(key)
    proc = cli("tier", "verify", joined(dirs), *option_args(tier))
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "OK" not in proc.stdout
    first, last = proc.stdout.splitlines()
    assert first.startswith("CORRUPT: the tier holds manifest version none")
    assert last == "FAILED: the tier does not publish the store's manifest"


def test_plain_verify_says_what_it_did_not_read(tiered):
    dirs, _, _ = tiered
    with CommitLog([str(d) for d in dirs], read_only=True) as log:
        end = log.max_offset
        assert sum(1 for s in log.segments() if s.remote and not s.local) == 3
        local = sum(1 for _ in log.scan(start=3 * SEG))
    proc = cli("verify", joined(dirs))  # no request: the tier's options are not needed
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        f"OK: {local} records, {end - 3 * SEG} bytes, 5 segments verified; 3 remote-only "
        "segments not read "
        "(`rmqlog tier verify` reads them)\n"
    )


# ---------------------------------------------------------------------------------------------
# stat and dump


def test_stat_shows_where_each_segment_is(tiered, tmp_path):
    dirs, tier, _ = tiered
    with CommitLog([str(d) for d in dirs], read_only=True) as log:
        api, segs = log.tier_status(), log.segments()
    doc = json.loads(cli("stat", joined(dirs), "--json").stdout)  # no request either
    wheres = [s["where"] for s in doc["segments"]]
    assert wheres == ["remote"] * 3 + ["both"] * 2 + ["local"] * 3
    assert [s["path"] for s in doc["segments"][:3]] == [
        f"{tier.url}/{s.start_offset:020d}" for s in segs[:3]
    ]
    info = doc["tier"]
    assert info["url"] == tier.url and info["manifest_version"] == api["manifest_version"]
    assert (info["local_segments"], info["remote_segments"], info["both_segments"]) == (3, 3, 2)
    assert [s["where"] for s in info["segments"]] == ["remote"] * 3
    assert sum(d["segment_count"] for d in doc["dirs"]) == 5  # the local files, no stray error
    assert all(d["error"] is None for d in doc["dirs"])
    out = cli("stat", joined(dirs)).stdout
    assert f"tier: {tier.url}  manifest version {api['manifest_version']}\n" in out
    assert "    3 local, 3 remote, 2 both; pending upload 2 segments, 8192 bytes; " in out
    for s in segs:
        line = f"{s.start_offset:020d}  [{s.start_offset}, {s.start_offset + SEG})  "
        assert re.search(
            rf"^    {re.escape(line)}written \d+ / {SEG}  (local|remote|both)$", out, re.M
        )
    # a store without a tier: no tier line, every segment local
    plain = tmp_path / "plain"
    with CommitLog(plain, segment_size=SEG) as log:
        fill(log, 1)
    doc = json.loads(cli("stat", plain, "--json").stdout)
    assert doc["tier"] is None and {s["where"] for s in doc["segments"]} == {"local"}
    assert "tier:" not in cli("stat", plain).stdout


def test_stat_and_dump_by_url(tiered):
    _, tier, offsets = tiered
    doc = json.loads(cli("stat", tier.url, "--json", *option_args(tier)).stdout)
    assert doc["paths"] == [] and doc["segment_count"] == 5
    assert {s["where"] for s in doc["segments"]} == {"remote"}
    assert doc["tier"]["local_segments"] is None
    out = cli("stat", tier.url, *option_args(tier)).stdout
    assert out.startswith(f"store: the tier {tier.url} alone")
    proc = cli("dump", tier.url, "--json", *option_args(tier))
    assert proc.returncode == 0, proc.stderr
    dumped = [json.loads(x)["offset"] for x in proc.stdout.splitlines()]
    assert dumped == [o for o in offsets if o < doc["max_offset"]] and len(dumped) > 50


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


def test_a_bucket_prefix_without_a_manifest_is_exit_2(s3_bucket):
    for action in ("status", "verify"):
        proc = cli("tier", action, s3_bucket.url, *option_args(s3_bucket))
        one_error_line(
            proc, rf"no rmqlog store at {re.escape(s3_bucket.url)} \(no rmqlog tier manifest"
        )
        assert proc.stdout == ""


def test_bad_tier_options_and_arguments(tmp_path, file_tier):
    store = tmp_path / "s"
    with CommitLog(store, segment_size=SEG, tier_url=file_tier.url) as log:
        fill(log, 1)
    proc = cli("tier", "status", store)  # nothing sealed, nothing uploaded: that is no damage
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "manifest: version 0 (the store's copy); the tier's: none (nothing uploaded yet)\n" in (
        proc.stdout
    )
    assert "segments: 1 local, 0 remote, 0 both\npending upload: 0 segments, 0 bytes" in proc.stdout
    proc = cli("tier", "status", store, "--tier-option", "novalue")
    one_error_line(proc, r"invalid tier option 'novalue': expected KEY=VALUE")
    proc = cli("tier", "status", store, "--tier-option", "endpoint=http://x")
    one_error_line(proc, r"tier_options \"endpoint\" is not accepted for a file:// tier")
    proc = cli("tier", "status", file_tier.url, store)
    one_error_line(proc, "a tier URL opens the tier alone")
    proc = cli("tier", "verify", file_tier.url, "--tier-option", "region=x")
    one_error_line(proc, "not accepted for a file:// tier")
    proc = cli("tier", "status", "gopher://x/y")
    one_error_line(proc, r"scheme \"gopher\" is not supported")
    proc = cli("tier", "status", "s3://bucket/log", "--tier-option", "colour=blue")
    one_error_line(proc, r"tier_options key \"colour\" is not an S3 option")
    plain = tmp_path / "plain"
    CommitLog(plain).close()
    proc = cli("stat", plain, "--tier-option", "region=x")
    one_error_line(proc, "--tier-option: the store at .* has no tier")
    proc = cli("tier")
    one_error_line(proc, "the following arguments are required: ACTION")


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
