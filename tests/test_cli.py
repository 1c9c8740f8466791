"""The ``rmqlog`` command line, run as ``python -m rmqlog`` and as the installed console script."""

from __future__ import annotations

import argparse
import fcntl
import io
import itertools
import json
import logging
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
from datetime import UTC, datetime
from pathlib import Path

import pytest

import rmqlog
from rmqlog import HEADER_LEN, CommitLog, CommitLogError
from rmqlog import cli as rmqlog_cli
from rmqlog.cli import UsageError

SEG = 4096
SUBCOMMANDS = [
    "demo",
    "stat",
    "consumers",
    "dump",
    "lookup",
    "verify",
    "tier",
    "bench",
    "move",
    "rebalance",
]
BIN = Path(sys.executable).parent
SPECIAL = (
    "tab\there, nl\n, quote' \" back\\slash, é ü 日本, nul\x00 bell\x07".encode() + b"\xff\xfe"
)


def _script() -> str:
    found = shutil.which("rmqlog", path=str(BIN))
    if found is None:
        pytest.fail(f"console script 'rmqlog' not in {BIN}: run pip install -e '.[test]'")
    return found


RUNNERS = {
    "module": lambda: [sys.executable, "-m", "rmqlog"],
    "script": lambda: [_script()],
}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("COLUMNS", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture(params=sorted(RUNNERS))
def run(request, tmp_path):
    """``run(*args)``: the CLI in a subprocess (one test per way of starting it)."""
    base = RUNNERS[request.param]()

    def call(*args, timeout=120, **kwargs):
        return subprocess.run(
            [*base, *map(str, args)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=tmp_path,
            env=_env(),
            **kwargs,
        )

    call.runner = request.param
    return call


def body_of(i: int) -> bytes:
    """Distinct bodies of varied sizes; record 3 has control characters and invalid UTF-8."""
    if i == 3:
        return SPECIAL
    return f"record-{i}-".encode() * (1 + i % 7)


@pytest.fixture
def store(tmp_path):
    """A closed, synced log over two directories with 4 KiB segments: (dirs, {offset: body})."""
    dirs = [tmp_path / "s0", tmp_path / "s1"]
    with CommitLog(dirs, segment_size=SEG, flush="sync") as log:
        written = {log.append(body_of(i)): body_of(i) for i in range(120)}
        assert len(log.segments()) >= 3
    return dirs, written


def joined(dirs) -> str:
    return os.pathsep.join(map(str, dirs))


def assert_one_error_line(proc, pattern="", code=2):
    """Exit ``code`` (2; 1 for damaged bytes), nothing on stdout, one ``rmqlog: error:`` line on
    stderr, no traceback."""
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("rmqlog: error: ")
    assert "Traceback" not in proc.stderr
    assert re.search(pattern, lines[0]), lines[0]


# ---------------------------------------------------------------------------------------------
# help and version


@pytest.mark.parametrize("sub", [None, *SUBCOMMANDS])
def test_help(run, sub):
    proc = run(*([sub] if sub else []), "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    prog = f"rmqlog {sub}" if sub else "rmqlog"
    assert proc.stdout.startswith(f"usage: {prog} ")
    if sub is None:
        for name in SUBCOMMANDS:
            assert re.search(rf"^\s+{name}\s+\S", proc.stdout, re.M), name
    if sub in ("stat", "dump", "verify"):
        assert "PATHS" in proc.stdout
    if sub == "dump":
        for opt in ("--from", "--count", "--data", "--hex", "--json"):
            assert opt in proc.stdout
    if sub == "bench":
        for opt in ("--records", "--size", "--dirs", "--flush"):
            assert opt in proc.stdout


def _options_with_values(parser):
    """(subcommand, action) of every option that takes a value, over the parser's subcommands."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sp in sub.choices.items():
        for action in sp._actions:
            if action.option_strings and action.nargs != 0 and not action.required:
                yield name, action


def test_subcommands_are_all_tested_and_documented():
    parser = rmqlog_cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == SUBCOMMANDS
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    block = readme.split("The command line:\n\n```sh\n")[1].split("```")[0]
    for name in SUBCOMMANDS:
        assert re.search(rf"^rmqlog {name}\b", block, re.M), name


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_help_shows_every_default(run, sub):
    """Every option that takes a value says its default in --help (or what happens without it)."""
    text = " ".join(run(sub, "--help").stdout.split())
    options = [a for name, a in _options_with_values(rmqlog_cli.build_parser()) if name == sub]
    assert options or sub == "tier"  # tier's options are its actions' (test_cli_tier.py)
    for action in options:
        flag = max(action.option_strings, key=len)
        m = re.search(rf" {re.escape(flag)} [A-Z_= \[\]{{}},a-z.]*?  ?(.*?)(?= --?[a-z]|$)", text)
        assert m and "(default: " in m.group(1), (flag, text)
    if sub == "bench":
        for shown in ("(default: 100000)", "(default: 256)", "(default: async)", "(default: 64m)"):
            assert shown in text, shown
    if sub in ("bench", "demo", "rebalance"):
        assert "64k, 64m, 1g, 64MiB" in text  # the size syntax


def test_version(run):
    proc = run("--version")
    assert proc.returncode == 0
    # The wheel (and `make develop`) builds every feature; the line names them.
    assert proc.stdout.strip() == f"rmqlog {rmqlog.__version__} (features: arrow, tier)"
    assert rmqlog.FEATURES == frozenset({"arrow", "tier"})


def test_console_script_is_the_cli_main():
    text = Path(_script()).read_text()
    assert "from rmqlog.cli import main" in text


# ---------------------------------------------------------------------------------------------
# demo


def test_demo(run, tmp_path):
    root = tmp_path / "demo"
    proc = run("demo", "--dir", root, "--records", 3000, "--size", 64)
    assert proc.returncode == 0, proc.stderr
    assert "rmqlog demo: 3,000 records of 64 B" in proc.stdout
    assert "read back 3,000 records, checksums match" in proc.stdout
    dirs = [root / f"disk{i}" / "store" for i in range(3)]
    with CommitLog(dirs, read_only=True) as log:
        bodies = [bytes(b) for _, b in log.scan()]
    assert len(bodies) == 3000
    # the demo's bodies are runs of the byte pattern 0, 1, 2, ..., at most --size long
    assert max(map(len, bodies)) == 64
    assert all(b[k + 1] == (b[k] + 1) % 256 for b in bodies for k in range(len(b) - 1))


def test_demo_temporary_dir_is_removed(run):
    proc = run("demo", "--records", 500, "--size", 16)
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"records of 16 B into (\S+)", proc.stdout)
    assert m, proc.stdout
    assert not os.path.exists(m.group(1))


# ---------------------------------------------------------------------------------------------
# stat


def _recorded(dirs):
    """What the store records of its writer's settings (None: nothing, or a core that records
    none)."""
    with CommitLog(dirs, read_only=True) as log:
        read = getattr(log, "recorded_settings", None)
        return None if read is None else json.loads(json.dumps(read()))  # as JSON has them


def _api_view(dirs):
    with CommitLog(dirs, read_only=True) as log:
        segs = log.segments()
        return {
            "min": log.min_offset,
            "max": log.max_offset,
            "flushed": log.flushed_offset,
            "records": sum(1 for _ in log.scan()),
            "paths": log.paths,
            "segments": [(s.start_offset, s.path, s.size, s.written) for s in segs],
            "dirs": [(d.path, d.state, d.total_bytes, d.segments, d.error) for d in log.dirs()],
        }


def test_stat_json_matches_api(run, store):
    dirs, written = store
    proc = run("stat", joined(dirs), "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    api = _api_view(dirs)
    assert info["min_offset"] == api["min"] == 0
    assert info["max_offset"] == api["max"]
    assert info["flushed_offset"] == api["flushed"] == api["max"]
    assert info["records"] == api["records"] == len(written)
    last = max(written)
    assert info["max_offset"] == last + HEADER_LEN + len(written[last])
    assert info["paths"] == api["paths"]
    assert [(s["start_offset"], s["path"], s["size"], s["written"]) for s in info["segments"]] == (
        api["segments"]
    )
    assert info["segment_count"] == len(api["segments"])
    assert info["total_bytes"] == sum(s[2] for s in api["segments"]) == SEG * len(api["segments"])
    assert info["data_bytes"] == api["max"] - api["min"]
    got_dirs = [
        (d["path"], d["state"], d["total_bytes"], d["segment_count"], d["error"])
        for d in info["dirs"]
    ]
    assert got_dirs == api["dirs"]
    for d in info["dirs"]:
        assert 0 <= d["free_bytes"] <= d["total_bytes"]
        assert 0.0 <= d["used_ratio"] <= 1.0
        # segments per directory: the files in that directory, as the API places them
        names = sorted(s["name"] for s in d["segments"])
        on_disk = sorted(
            p.name for p in Path(d["path"]).iterdir() if re.fullmatch(r"\d{20}", p.name)
        )
        assert names == on_disk
        assert len(d["segments"]) == d["segment_count"]
    # The read-only open's own options and counters are not the store's: none are reported.
    assert "stats" not in info
    assert info["settings"] == _recorded(dirs)


def test_stat_several_positional_paths(run, store):
    dirs, _ = store
    a = json.loads(run("stat", "--json", *dirs).stdout)
    b = json.loads(run("stat", "--json", joined(dirs)).stdout)
    for key in ("min_offset", "max_offset", "flushed_offset", "segments", "total_bytes"):
        assert a[key] == b[key]
    # one directory finds the other through the metadata
    c = json.loads(run("stat", "--json", dirs[1]).stdout)
    assert c["segments"] == a["segments"]


def test_stat_text(run, store):
    dirs, _ = store
    proc = run("stat", joined(dirs))
    assert proc.returncode == 0, proc.stderr
    api = _api_view(dirs)
    out = proc.stdout
    assert f"offsets: min {api['min']}  max {api['max']}  flushed {api['flushed']}" in out
    assert f"\nrecords: {api['records']}\n" in out
    total = sum(s[2] for s in api["segments"])
    assert f"in {len(api['segments'])} segments; total bytes {total} " in out
    # every segment is listed under its own directory
    listing = out.split("\n2 directories:\n")[1].split("\nsettings")[0]
    sections = re.split(r"^  (?=/)", listing, flags=re.M)
    by_dir = {s.splitlines()[0]: s for s in sections if s.strip()}
    assert set(by_dir) == {d[0] for d in api["dirs"]}
    for start, path, size, written in api["segments"]:
        section = by_dir[os.path.dirname(path)]
        assert (
            f"{os.path.basename(path)}  [{start}, {start + size})  written {written} / {size}"
            in (section)
        )
    for path, state, _total, nsegs, _err in api["dirs"]:
        assert re.search(rf"state {state} .* {nsegs} segments?$", by_dir[path], re.M)
    assert out.endswith(
        "".join(line + "\n" for line in rmqlog_cli.render_recorded_settings(_recorded(dirs)))
    )


def test_stat_shows_no_settings_or_counters_of_its_own_open(run, tmp_path):
    """A store written with most_free and sync: stat must not show the defaults (round_robin,
    async) nor the zero counters of its own read-only open as the store's."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    with CommitLog(dirs, segment_size=SEG, strategy="most_free", flush="sync") as log:
        for i in range(60):
            log.append(body_of(i))
        assert log.stats()["appends"] == 60
    proc = run("stat", joined(dirs))
    assert proc.returncode == 0, proc.stderr
    for own in ("round_robin", "async", "appends", "segments_created", "syncs"):
        assert own not in proc.stdout, own
    info = json.loads(run("stat", joined(dirs), "--json").stdout)
    assert not {"stats", "strategy", "flush", "appends"} & set(info)
    recorded = _recorded(dirs)
    assert info["settings"] == recorded
    if recorded is None:  # a core whose stores record no settings: stat says so
        assert proc.stdout.endswith("\nsettings: not recorded in this store\n")
    else:  # the writer's, never the reader's defaults
        assert (recorded["strategy"], recorded["flush"]) == ("most_free", "sync")
        assert "\nsettings (store-wide, the default of every open):\n" in proc.stdout
        assert "\nthe last writer's own:\n" in proc.stdout
        assert "\n  strategy: most_free\n" in proc.stdout and "\n  flush: sync\n" in proc.stdout


def test_recorded_settings_are_rendered_when_the_store_has_them():
    """The hook for the writer's recorded settings: None renders as not recorded, a dict as
    one line per setting."""
    render = rmqlog_cli.render_recorded_settings
    assert render(None) == ["settings: not recorded in this store"]
    assert render(
        {"strategy": "most_free", "flush": "sync", "delete_hours": (2, 3), "ratio": None}
    ) == [
        "settings (store-wide, the default of every open):",
        "  strategy: most_free",
        "  delete_hours: 2, 3",
        "the last writer's own:",
        "  flush: sync",
        "  ratio: none",
    ]
    assert render({"delete_hours": [4], "max_used_ratio_by_dir": {"/a": 0.5}}) == [
        "settings (store-wide, the default of every open):",
        "  delete_hours: 4",
        "  max_used_ratio_by_dir: /a: 0.5",
    ]
    info = {
        "paths": ["/s"],
        "min_offset": 0,
        "max_offset": 0,
        "flushed_offset": 0,
        "data_bytes": 0,
        "segment_count": 0,
        "total_bytes": 0,
        "written_bytes": 0,
        "dirs": [],
        "settings": {"strategy": "most_free"},
    }
    out = io.StringIO()
    rmqlog_cli.print_stat(info, out)
    assert out.getvalue().endswith(
        "\nsettings (store-wide, the default of every open):\n  strategy: most_free\n"
    )


def test_singular_and_plural_counts(run, tmp_path):
    """One record in one segment of a one-directory store: every count agrees with its noun."""
    d = tmp_path / "one"
    with CommitLog(d, segment_size=SEG) as log:
        off = log.append(b"x")
        end = log.max_offset
    out = run("stat", d).stdout
    assert f"size: {end - off} data bytes in 1 segment; " in out
    assert "\n1 directory:\n" in out
    assert re.search(r"used \S+  1 segment$", out, re.M)
    assert "\nrecords: 1\n" in out
    assert run("verify", d).stdout == f"OK: 1 record, {end} bytes, 1 segment verified\n"
    assert run("rebalance", d).stdout.splitlines()[0] == "0 segments moved"
    empty = tmp_path / "empty"
    CommitLog(empty, segment_size=SEG).close()  # a store without records
    assert "size: 0 data bytes in 0 segments; " in run("stat", empty).stdout
    assert run("verify", empty).stdout == "OK: 0 records, 0 bytes, 0 segments verified\n"
    bench = run("bench", "--records", 1, "--size", 1, "--segment-size", "64k").stdout
    assert bench.startswith("rmqlog bench: 1 record of 1 B, ")


def test_plural():
    p = rmqlog_cli.plural
    assert [p(n, "segment") for n in (0, 1, 2)] == ["0 segments", "1 segment", "2 segments"]
    assert p(1, "directory", "directories") == "1 directory"
    assert p(3, "directory", "directories") == "3 directories"
    assert p(1, "byte") == "1 byte"
    assert p(1500, "record", commas=True) == "1,500 records"


def test_stat_empty_store(run, tmp_path):
    CommitLog(tmp_path / "empty").close()  # a store whose writer appended nothing
    info = json.loads(run("stat", "--json", tmp_path / "empty").stdout)
    assert (info["min_offset"], info["max_offset"], info["segment_count"]) == (0, 0, 0)


@pytest.mark.parametrize("command", ["stat", "verify", "dump"])
@pytest.mark.parametrize("where", ["empty", "missing", "parent"])
def test_a_folder_without_a_store_is_exit_2_never_ok(run, tmp_path, command, where):
    CommitLog(tmp_path / "parent" / "store").close()
    (tmp_path / "empty").mkdir()
    path = {"empty": "empty", "missing": "nope", "parent": "parent"}[where]
    proc = run(command, tmp_path / path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == "" and "OK" not in proc.stderr
    assert proc.stderr == f"rmqlog: error: no rmqlog store at {tmp_path / path}" + (
        " (the directory does not exist)\n"
        if where == "missing"
        else " (the directory holds no rmqlog.meta, rmqlog.id or segment file)\n"
    )
    assert list((tmp_path / "empty").iterdir()) == []


def test_setup_mistakes_are_exit_2_and_damage_exit_1(run, tmp_path):
    dirs = [tmp_path / "s" / f"d{i}" for i in range(3)]
    with CommitLog([str(d) for d in dirs], segment_size=SEG) as log:
        log.append_batch([body_of(i) * 20 for i in range(300)])
    # A directory missing from the store: a configuration error, short, naming it.
    shutil.move(dirs[2], tmp_path / "elsewhere")
    proc = run("verify", dirs[0])
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert str(dirs[2]) in proc.stderr and "accept_lost" in proc.stderr
    assert len(proc.stderr) < 300 + len("rmqlog: error: \n")
    assert "CORRUPT" not in proc.stdout
    # Given where it is now, the store verifies.
    proc = run("verify", f"{dirs[0]}{os.pathsep}{dirs[1]}{os.pathsep}{tmp_path / 'elsewhere'}")
    assert (proc.returncode, proc.stdout.split(":")[0]) == (0, "OK"), proc.stderr
    # Damaged bytes are exit 1.
    seg = sorted(dirs[1].glob("0*"))[0]
    data = bytearray(seg.read_bytes())
    data[200] ^= 0xFF
    seg.write_bytes(bytes(data))
    proc = run("verify", f"{dirs[0]}{os.pathsep}{dirs[1]}{os.pathsep}{tmp_path / 'elsewhere'}")
    assert proc.returncode == 1 and "CORRUPT" in proc.stdout, (proc.stdout, proc.stderr)


# ---------------------------------------------------------------------------------------------
# dump


def _dump_json(run, *args):
    proc = run("dump", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_dump_json_equals_scan(run, store):
    dirs, written = store
    rows = _dump_json(run, joined(dirs))
    with CommitLog(dirs, read_only=True) as log:
        scanned = [(off, bytes(b)) for off, b in log.scan()]
        records = {off: log.read_record(off) for off, _ in scanned}
    assert [r["offset"] for r in rows] == [off for off, _ in scanned] == sorted(written)
    for row, (off, body) in zip(rows, scanned, strict=True):
        rec = records[off]
        assert row["size"] == len(body) == len(written[off])
        assert row["next_offset"] == rec.next_offset
        assert row["timestamp_ms"] == rec.timestamp_ms
        when = datetime.fromisoformat(row["timestamp"].replace("Z", "+00:00"))
        assert when.tzinfo is not None and when.utcoffset().total_seconds() == 0
        assert round(when.timestamp() * 1000) == rec.timestamp_ms
        assert "data" not in row and "hex" not in row
    # next offsets chain, across segment rolls too
    for a, b in itertools.pairwise(rows):
        assert b["offset"] == a["next_offset"]


def test_dump_from_and_count(run, store):
    dirs, written = store
    offs = sorted(written)
    rows = _dump_json(run, joined(dirs), "--from", offs[40], "--count", 5)
    assert [r["offset"] for r in rows] == offs[40:45]
    # --from on a segment boundary, count beyond the end
    with CommitLog(dirs, read_only=True) as log:
        seg2 = log.segments()[2].start_offset
        expect = [off for off, _ in log.scan(start=seg2)]
    rows = _dump_json(run, *dirs, "--from", seg2, "--count", 10_000)
    assert [r["offset"] for r in rows] == expect
    assert _dump_json(run, joined(dirs), "--count", 0) == []
    end = offs[-1] + HEADER_LEN + len(written[offs[-1]])  # max_offset: nothing from there
    assert _dump_json(run, joined(dirs), "--from", end) == []


def test_dump_data_and_hex_json(run, store):
    dirs, written = store
    offs = sorted(written)
    rows = _dump_json(run, joined(dirs), "--from", offs[2], "--count", 3, "--data", "--hex")
    assert [r["offset"] for r in rows] == offs[2:5]
    for row in rows:
        body = written[row["offset"]]
        assert bytes.fromhex(row["hex"]) == body
        assert row["data"] == rmqlog_cli.render_text(body)
    special = rows[1]
    assert special["offset"] == offs[3]
    assert special["data"] == (
        "tab\\there, nl\\n, quote' \" back\\\\slash, é ü 日本, nul\\x00 bell\\x07\\xff\\xfe"
    )


def test_dump_text(run, store):
    dirs, written = store
    offs = sorted(written)
    proc = run("dump", joined(dirs), "--from", offs[3], "--count", 2, "--data", "--hex")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2
    with CommitLog(dirs, read_only=True) as log:
        recs = [log.read_record(o) for o in offs[3:5]]
    pat = re.compile(
        r"^offset: (\d+) timestamp: (\d+) \((\S+)Z\) size: (\d+) next: (\d+) "
        r"data: (.*) hex: ([0-9a-f]*)$"
    )
    for line, rec in zip(lines, recs, strict=True):
        m = pat.match(line)
        assert m, line
        off, ts, iso, size, nxt, data, hexed = m.groups()
        assert int(off) == rec.offset and int(ts) == rec.timestamp_ms
        assert int(size) == len(rec.body) and int(nxt) == rec.next_offset
        assert iso.startswith(
            datetime.fromtimestamp(rec.timestamp_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        )
        assert bytes.fromhex(hexed) == written[rec.offset]
        assert data == rmqlog_cli.render_text(written[rec.offset])
    assert "\\n" in lines[0] and "\n" not in lines[0]  # the newline in the body is escaped
    # without --data/--hex: no body
    plain = run("dump", joined(dirs), "--count", 1).stdout
    assert "data:" not in plain and "hex:" not in plain and plain.startswith("offset: 0 ")


def test_render_text():
    r = rmqlog_cli.render_text
    assert r(b"plain text") == "plain text"
    assert r(b"a\nb\tc\rd\\e") == "a\\nb\\tc\\rd\\\\e"
    assert r(b"\x00\x1f\x7f") == "\\x00\\x1f\\x7f"
    assert r("héllo 日本".encode()) == "héllo 日本"
    assert r(b"\xff\xc3") == "\\xff\\xc3"
    assert r("\u2028".encode()) == "\\u2028"  # a line separator would break the one-line output
    assert r(memoryview(b"mv")) == "mv"
    assert r(b"") == ""


def test_dump_stops_at_corruption(run, store):
    dirs, written = store
    offs = sorted(written)
    _flip_body_byte(dirs, offs[10])
    proc = run("dump", joined(dirs), "--json")
    assert proc.returncode == 1  # damaged bytes
    assert [json.loads(x)["offset"] for x in proc.stdout.splitlines()] == offs[:10]
    assert proc.stderr.startswith("rmqlog: error: ")
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr


def test_dump_into_closed_pipe_is_quiet(tmp_path):
    dirs = [tmp_path / "big"]
    with CommitLog(dirs, segment_size=1 << 20, flush="none") as log:
        log.append_batch([bytes(200)] * 3000)  # ~1.2 MB of hex: more than a pipe holds
    proc = subprocess.Popen(
        [sys.executable, "-m", "rmqlog", "dump", str(dirs[0]), "--hex"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    first = proc.stdout.readline()
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert first.startswith(b"offset: 0 ")
    assert proc.returncode == 1
    assert b"Traceback" not in err and b"BrokenPipe" not in err


# ---------------------------------------------------------------------------------------------
# verify


def _flip_body_byte(dirs, offset, delta=5):
    """Flips one byte inside the body of the record at ``offset``, in its segment file."""
    with CommitLog(dirs, read_only=True) as log:
        assert offset < log.flushed_offset
        seg = next(s for s in log.segments() if s.start_offset <= offset < s.start_offset + s.size)
        rec = log.read_record(offset)
        assert len(rec.body) > delta
        path, pos = seg.path, offset - seg.start_offset + HEADER_LEN + delta
        end = rec.next_offset
    with open(path, "r+b") as f:
        f.seek(pos)
        old = f.read(1)
        f.seek(pos)
        f.write(bytes([old[0] ^ 0x5A]))
    return end


def test_verify_clean(run, store):
    dirs, _ = store
    proc = run("verify", joined(dirs))
    assert proc.returncode == 0, proc.stderr
    api = _api_view(dirs)
    nbytes = api["max"] - api["min"]
    n, nsegs = api["records"], len(api["segments"])
    assert proc.stdout == f"OK: {n} records, {nbytes} bytes, {nsegs} segments verified\n"
    assert "%|" not in proc.stderr  # no progress bar when stderr is not a terminal
    doc = json.loads(run("verify", *dirs, "--json").stdout)
    assert doc == {"ok": True, "records": n, "bytes": nbytes, "segments": nsegs, "damaged": []}


def test_verify_flipped_body_byte(run, store):
    dirs, written = store
    offs = sorted(written)
    target = offs[57]
    end = _flip_body_byte(dirs, target)
    with CommitLog(dirs, read_only=True) as log:
        api_bad = log.verify()
    assert api_bad == [(target, end, "record CRC mismatch")]
    proc = run("verify", joined(dirs))
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = proc.stdout.splitlines()
    assert lines[0] == f"CORRUPT: [{target}, {end}) record CRC mismatch"
    assert lines[-1].startswith("FAILED: 1 damaged range in ")
    assert "Traceback" not in proc.stderr
    doc = json.loads(run("verify", joined(dirs), "--json").stdout)
    assert doc["ok"] is False
    assert doc["damaged"] == [{"start": target, "end": end, "reason": "record CRC mismatch"}]


def test_verify_two_damaged_ranges(run, store):
    dirs, written = store
    offs = sorted(written)
    ends = [_flip_body_byte(dirs, offs[i]) for i in (5, 90)]
    proc = run("verify", joined(dirs))
    assert proc.returncode == 1
    corrupt = [x for x in proc.stdout.splitlines() if x.startswith("CORRUPT: ")]
    assert corrupt == [
        f"CORRUPT: [{offs[5]}, {ends[0]}) record CRC mismatch",
        f"CORRUPT: [{offs[90]}, {ends[1]}) record CRC mismatch",
    ]
    assert proc.stdout.splitlines()[-1].startswith("FAILED: 2 damaged ranges in ")


def _segment_files(dirs: list[str]) -> list[Path]:
    found = [p for d in dirs for p in Path(d).iterdir() if re.fullmatch(r"\d{20}", p.name)]
    return sorted(found, key=lambda p: p.name)


def test_verify_a_truncated_sealed_segment(run, store):
    dirs, _ = store
    seg = _segment_files(dirs)[0]
    os.truncate(seg, SEG // 2)  # shorter than every segment size in use
    # The store opens (a sealed segment's length is checked when it is mapped); verify reports
    # the whole segment as damage.
    proc = run("verify", joined(dirs))
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    corrupt = [x for x in proc.stdout.splitlines() if x.startswith("CORRUPT: ")]
    assert len(corrupt) == 1 and corrupt[0].startswith(f"CORRUPT: [0, {SEG}) "), corrupt
    assert seg.name in corrupt[0] and f"length {SEG // 2}" in corrupt[0]


def test_verify_store_that_does_not_open(run, store):
    dirs, _ = store
    seg = _segment_files(dirs)[-1]
    os.truncate(seg, SEG // 2)  # the last segment's length is checked at open
    proc = run("verify", joined(dirs))
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert proc.stdout.startswith("CORRUPT: the store does not open: ")
    assert seg.name in proc.stdout
    # other subcommands report it as an error, with the exit code of damaged bytes
    assert_one_error_line(run("stat", joined(dirs)), seg.name, code=1)


def _on_terminal(tmp_path, *args, stdout_terminal=False):
    """Runs the installed ``rmqlog`` with stderr a terminal (a pty), and stdout that terminal too
    or a file. Returns (exit code, what went to the file or None, what the terminal got)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    out_path = tmp_path / "stdout.txt"
    chunks = []
    try:
        with open(out_path, "wb") as out_file:
            proc = subprocess.Popen(
                [_script(), *map(str, args)],
                stdout=slave if stdout_terminal else out_file,
                stderr=slave,
                env={**_env(), "TERM": "xterm"},
                cwd=tmp_path,
            )
        os.close(slave)
        while True:  # read while the child runs: Linux may drop what is left at hangup
            if select.select([master], [], [], 0.1)[0]:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the child's side is closed
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        proc.wait(timeout=120)
    finally:
        os.close(master)
    out = None if stdout_terminal else out_path.read_text()
    return proc.returncode, out, b"".join(chunks).decode(errors="replace")


def test_verify_progress_bar_on_a_terminal(store, tmp_path):
    """With stderr a terminal, a bar by bytes verified is drawn there; stdout keeps the result."""
    dirs, _ = store
    code, out, term = _on_terminal(tmp_path, "verify", joined(dirs))
    assert code == 0
    assert out.startswith("OK: ")
    api = _api_view(dirs)
    total = api["max"] - api["min"]
    assert re.search(r"verify:\s+\d+%\|", term), term
    assert f"/{total / 1024:.2f}k " in term, term  # counted in bytes, the log's size in all
    assert "OK:" not in term


def test_dump_progress_bar_only_when_records_do_not_go_to_the_terminal(store, tmp_path):
    dirs, written = store
    code, out, term = _on_terminal(tmp_path, "dump", joined(dirs))
    assert code == 0
    assert len(out.splitlines()) == len(written)
    assert re.search(r"dump:\s+\d+%\|", term), term
    assert "offset: " not in term
    # records on the terminal: a bar there would break their lines
    code, _, term = _on_terminal(tmp_path, "dump", joined(dirs), stdout_terminal=True)
    assert code == 0
    lines = [line for line in term.splitlines() if line.strip()]
    assert len(lines) == len(written)
    assert all(line.startswith("offset: ") for line in lines), lines[:3]
    assert "%|" not in term and "\r" not in term.replace("\r\n", "\n")


def test_bench_and_move_show_progress_on_a_terminal(store, tmp_path):
    code, out, term = _on_terminal(tmp_path, "bench", "--records", 3000, "--size", 16)
    assert code == 0 and out.startswith("rmqlog bench: ")
    for phase in ("append", "append_batch", "read", "scan"):
        assert re.search(rf"{phase}:\s+\d+%\|", term), (phase, term)
    dirs, _ = store
    with CommitLog(dirs, read_only=True) as ro:
        first = ro.segments()[0]
    dest = next(d for d in dirs if not first.path.startswith(str(d)))
    code, out, term = _on_terminal(
        tmp_path, "move", joined(dirs), "--segment", first.start_offset, "--to", dest
    )
    assert code == 0 and out.startswith(f"moved {first.start_offset} to ")
    assert f"move {first.start_offset} to {dest} [00:0" in term, term


def test_no_progress_when_stderr_is_not_a_terminal(run, store):
    dirs, _ = store
    with CommitLog(dirs, read_only=True) as ro:
        first = ro.segments()[0]
    dest = next(d for d in dirs if not first.path.startswith(str(d)))
    for args in (
        ("verify", joined(dirs)),
        ("dump", joined(dirs)),
        ("bench", "--records", 2000, "--size", 8),
        ("move", joined(dirs), "--segment", first.start_offset, "--to", dest),
        ("rebalance", joined(dirs)),
    ):
        proc = run(*args)
        assert proc.returncode == 0, (args, proc.stderr)
        assert "%|" not in proc.stderr and "\r" not in proc.stderr, (args, proc.stderr)
        assert "[00:" not in proc.stderr, (args, proc.stderr)


# ---------------------------------------------------------------------------------------------
# usage errors


def test_missing_directory(run, tmp_path):
    missing = tmp_path / "nope"
    for sub in ("stat", "dump", "verify"):
        assert_one_error_line(run(sub, missing), re.escape(str(missing)))
    assert not missing.exists()  # a read-only open creates nothing


def test_unknown_subcommand(run):
    assert_one_error_line(run("frobnicate"), "invalid choice: 'frobnicate'")


def test_no_subcommand(run):
    assert_one_error_line(run(), "required")


@pytest.mark.parametrize("count", ["abc", "-1", "1.5", ""])
def test_bad_count(run, store, count):
    dirs, _ = store
    assert_one_error_line(run("dump", joined(dirs), "--count", count), "--count")


def test_bad_arguments(run, store):
    dirs, written = store
    offs = sorted(written)
    assert_one_error_line(run("dump", joined(dirs), "--from", "x"), "--from")
    assert_one_error_line(run("dump", joined(dirs), "--from", offs[1] + 1), "not the start")
    assert_one_error_line(run("dump", joined(dirs), "--from", 10**9), "out of range")
    assert_one_error_line(run("dump", joined(dirs), "--bogus"), "unrecognized")
    assert_one_error_line(run("stat"), "PATHS")
    assert_one_error_line(run("stat", os.pathsep), "no directory")
    assert_one_error_line(run("bench", "--flush", "maybe"), "invalid choice")
    assert_one_error_line(run("bench", "--records", 0), "--records")
    assert_one_error_line(run("bench", "--segment-size", 5000, "--records", 10), "4096")
    assert_one_error_line(run("demo", "--records", "many"), "--records")
    assert_one_error_line(run("bench", "--records", 5, "--dirs", dirs[0]), "not empty")


@pytest.fixture
def restore_rmqlog_logger():
    """main() configures the ``rmqlog`` logger; put it back for the tests that run after."""
    logger = logging.getLogger("rmqlog")
    saved = (logger.level, logger.propagate, list(logger.handlers))
    yield
    logger.setLevel(saved[0])
    logger.propagate = saved[1]
    logger.handlers[:] = saved[2]


def test_main_returns_exit_codes(store, capsys, restore_rmqlog_logger):
    dirs, _ = store
    assert rmqlog_cli.main(["verify", joined(dirs)]) == 0
    assert capsys.readouterr().out.startswith("OK: ")
    assert rmqlog_cli.main(["dump", joined(dirs), "--count", "x"]) == 2
    assert capsys.readouterr().err.startswith("rmqlog: error: argument --count")
    assert rmqlog_cli.main(["--help"]) == 0


def test_exit_codes_are_mapped_in_one_place(store, capsys, monkeypatch, restore_rmqlog_logger):
    """run.EXIT_CODES maps exceptions to exit codes; a store-not-found error (a CommitLogError and
    a FileNotFoundError) is exit 2 with its message on one line; anything else is a bug and
    propagates with its traceback."""
    from rmqlog.cli import run as cli_run
    from rmqlog.cli import stat as cli_stat

    assert all(code in (1, 2) for _, code in cli_run.EXIT_CODES)
    for exc in (UsageError("x"), CommitLogError("x"), FileNotFoundError(2, "x"), ValueError()):
        assert cli_run.exit_code_of(exc) == 2
    assert cli_run.exit_code_of(RuntimeError()) is None

    class StoreNotFound(CommitLogError, FileNotFoundError):
        pass

    def no_store(paths, tier_options=None):
        raise StoreNotFound(f"no rmqlog store at {paths[0]}")

    monkeypatch.setattr(cli_stat, "open_read_only", no_store)
    assert rmqlog_cli.main(["stat", "/nowhere"]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "rmqlog: error: no rmqlog store at /nowhere\n")

    def no_store_errno(paths, tier_options=None):  # an OSError's form: errno, message, file
        raise StoreNotFound(2, f"no rmqlog store at {paths[0]} (it holds no store)", paths[0])

    monkeypatch.setattr(cli_stat, "open_read_only", no_store_errno)
    assert rmqlog_cli.main(["stat", "/nowhere"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "rmqlog: error: no rmqlog store at /nowhere (it holds no store)\n"
    assert cli_run._one_line(PermissionError(13, "Permission denied", "/x")) == (
        "Permission denied: /x"
    )

    def bug(paths, tier_options=None):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli_stat, "open_read_only", bug)
    with pytest.raises(RuntimeError, match="a bug"):
        rmqlog_cli.main(["stat", "/nowhere"])


# ---------------------------------------------------------------------------------------------
# sizes


def test_sizes_on_the_command_line(run, tmp_path):
    """Sizes take the Spark options' syntax: bytes, or binary units."""
    proc = run("bench", "--records", 10, "--size", "1k", "--segment-size", "64k", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["size"], doc["segment_size"]) == (1024, 64 << 10)
    proc = run("bench", "--records", 10, "--size", "100", "--segment-size", "1MiB", "--json")
    assert json.loads(proc.stdout)["segment_size"] == 1 << 20
    for bad in ("64x", "1.5m", "-4k", "0x1000", "m", ""):
        proc = run("bench", "--records", 10, f"--segment-size={bad}")
        assert_one_error_line(proc, r"--segment-size.*expected .*4096.* 64k, 64m, 1g")
    assert_one_error_line(run("bench", "--segment-size", "1k"), r"at least 4096 \(4k\)")
    assert_one_error_line(run("bench", "--segment-size", "5000"), "not a multiple of 4096")
    assert_one_error_line(run("rebalance", tmp_path, "--max-bytes", "0"), "--max-bytes")
    assert_one_error_line(run("demo", "--size", "big"), "--size.* 64k, 64m, 1g")


# ---------------------------------------------------------------------------------------------
# bench


def test_bench_json(run):
    proc = run("bench", "--records", 1500, "--size", 100, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["records"], doc["size"], doc["flush"]) == (1500, 100, "async")
    phases = {p["phase"]: p for p in doc["phases"]}
    assert list(phases) == ["append", "append_batch(1000)", "read (random)", "scan"]
    assert phases["append"]["records"] == phases["append_batch(1000)"]["records"] == 1500
    assert phases["read (random)"]["records"] == 1500
    assert phases["scan"]["records"] == 3000
    for p in phases.values():
        assert p["seconds"] > 0 and p["records_per_s"] > 0 and p["mib_per_s"] > 0
        assert p["records_per_s"] == pytest.approx(p["records"] / p["seconds"])
    for name in ("append", "read (random)"):
        p = phases[name]
        assert 0 < p["p50_us"] <= p["p99_us"] <= p["p999_us"]
    assert not any(os.path.exists(d) for d in doc["dirs"])  # the temporary store is removed


def test_bench_text_sync_in_given_dirs(run, tmp_path):
    dirs = [tmp_path / "b0", tmp_path / "b1"]
    proc = run("bench", "--records", 300, "--size", 50, "--flush", "sync", "--dirs", *dirs)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert out[0].startswith("rmqlog bench: 300 records of 50 B, flush=sync")
    assert out[1].split() == [
        "phase",
        "seconds",
        "rec/s",
        "MiB/s",
        "p50",
        "us",
        "p99",
        "us",
        "p999",
        "us",
    ]
    rows = {line.split("  ")[1].strip(): line for line in out[2:]}
    assert set(rows) == {"append", "append_batch(1000)", "read (random)", "scan"}
    assert re.search(r"(\d+\.\d+\s+){3}\d+\.\d+$", rows["append"])  # seconds ... percentiles
    assert rows["scan"].rstrip().endswith("-")
    # the store stays in the given directories: 2 x 300 records, all 50 B, verified
    with CommitLog(dirs, read_only=True) as log:
        sizes = [len(b) for _, b in log.scan()]
        assert log.verify() == []
    assert sizes == [50] * 600


# ---------------------------------------------------------------------------------------------
# move and rebalance


def test_move_a_sealed_segment_and_refuse_the_active_one(run, store):
    dirs, written = store
    with CommitLog(dirs, read_only=True) as ro:
        segs = ro.segments()
    first, active = segs[0], segs[-1]
    dest = next(d for d in dirs if not first.path.startswith(str(d)))
    proc = run("move", joined(dirs), "--segment", first.start_offset, "--to", dest, "--json")
    assert proc.returncode == 0, proc.stderr
    moved = json.loads(proc.stdout)
    assert moved["path"] == os.path.join(str(dest), f"{first.start_offset:020d}")
    with CommitLog(dirs, read_only=True) as ro:
        assert ro.segments()[0].path == moved["path"]
        for off, body in written.items():
            assert bytes(ro.read(off)) == body
    proc = run("move", joined(dirs), "--segment", active.start_offset, "--to", dirs[0])
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].startswith("rmqlog: error: ")
    assert "active segment" in proc.stderr


def test_rebalance_reports_moves_and_ratios(run, store):
    dirs, written = store
    proc = run("rebalance", joined(dirs), "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result["used_ratios"]) == {str(d) for d in dirs}
    # Both directories share one filesystem here: nothing can even out, nothing moves.
    assert result["moves"] == []
    with CommitLog(dirs, read_only=True) as ro:
        for off, body in written.items():
            assert bytes(ro.read(off)) == body


def test_dump_follow_prints_records_as_they_are_appended_until_ctrl_c(store):
    """``rmqlog dump --follow``: the records there, then each new one as a writer in another
    process appends it (one JSON line, flushed at once); Ctrl-C ends it with exit 130."""
    dirs, written = store
    proc = subprocess.Popen(
        [sys.executable, "-m", "rmqlog", "dump", joined(dirs), "--follow", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        lines = [json.loads(proc.stdout.readline()) for _ in written]
        assert {r["offset"] for r in lines} == set(written)
        with CommitLog(dirs, segment_size=SEG) as log:
            for body in (b"late-1", b"late-2"):
                off = log.append(body)
                row = json.loads(proc.stdout.readline())  # blocks until dump prints it
                assert (row["offset"], row["size"]) == (off, len(body))
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert "rmqlog: interrupted" in err and "Traceback" not in err
    finally:
        proc.kill()
        proc.wait()


def test_consumers_lists_and_drops(run, tmp_path):
    """``rmqlog consumers``: each name with its position, lag and last commit (text and JSON);
    ``--drop`` forgets one, and is refused while the name is open."""
    store = tmp_path / "store"
    with CommitLog(str(store), segment_size=65536, retain_unconsumed=True) as log:
        offs = log.append_batch([b"x" * 100] * 10)
        with log.consumer("billing") as c:
            c.poll(4)
            c.commit()
        held = log.consumer("audit", max_deliveries=4)
        held.poll(3)
        proc = run("consumers", store)
        assert proc.returncode == 0, proc.stderr
        pid = os.getpid()
        assert re.search(
            rf"opens \(pid\): {pid}  pending 3  waiting 0  redelivered 0  dead-lettered 0 "
            r"\(max_deliveries 4\)",
            proc.stdout,
        ), proc.stdout
        lag = log.max_offset - offs[4]
        assert re.search(
            rf"billing\s+position {offs[4]}\s+lag {lag} bytes \(\S+ \S+\), 6 records ", proc.stdout
        )
        assert re.search(r"audit\s+position 0 .*\[open, holds retention\]", proc.stdout)
        assert "held by consumer 'audit'" in proc.stdout
        info = json.loads(run("consumers", store, "--json").stdout)
        assert [c["name"] for c in info["consumers"]] == ["audit", "billing"]
        lags = [(c["lag_bytes"], c["lag_records"]) for c in info["consumers"]]
        assert lags == [(log.max_offset, 10), (lag, 6)]
        assert info["head_held_by"] == "audit"
        audit = info["consumers"][0]
        assert (audit["members"], audit["pending"], audit["max_deliveries"]) == ([pid], 3, 4)
        refused = run("consumers", store, "--drop", "audit")
        assert refused.returncode == 2 and "held elsewhere" in refused.stderr
        held.close()
        assert run("consumers", store, "--drop", "audit").returncode == 0
        assert [c["name"] for c in log.consumers()] == ["billing"]
        assert "consumers (1):" in run("stat", store).stdout


def test_stat_shows_the_log_when_the_consumer_positions_are_damaged(run, tmp_path):
    """``rmqlog.consumers`` damaged in every directory (the core then refuses the positions):
    ``stat`` still prints the log as usual, and its consumers section says the positions could
    not be read and why, naming the file. Exit 1 (damaged bytes), after the report, as ``tier
    status`` does for a damaged tier manifest; no error line."""
    dirs = [tmp_path / "s0", tmp_path / "s1"]
    with CommitLog(dirs, segment_size=SEG) as log:
        log.append_batch([b"x" * 100] * 10)
        with log.consumer("billing") as c:
            c.poll(4)
            c.commit()
    copies = sorted(tmp_path.glob("s*/rmqlog.consumers"))
    assert len(copies) == len(dirs)
    for copy in copies:
        with open(copy, "r+b") as f:
            f.write(b"\xde\xad\xbe\xef" * 4)
    api = _api_view(dirs)
    proc = run("stat", joined(dirs))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "rmqlog: error:" not in proc.stderr
    assert f"offsets: min 0  max {api['max']}  flushed {api['flushed']}" in proc.stdout
    assert re.search(
        r"^consumers: the positions could not be read: corruption in \S+/s[01]/rmqlog\.consumers: ",
        proc.stdout,
        re.M,
    ), proc.stdout
    assert proc.stdout.endswith(
        "".join(line + "\n" for line in rmqlog_cli.render_recorded_settings(_recorded(dirs)))
    )
    done = run("stat", joined(dirs), "--json")
    assert done.returncode == 1, done.stderr
    info = json.loads(done.stdout)
    assert (info["max_offset"], len(info["segments"])) == (api["max"], len(api["segments"]))
    assert info["consumers"] is None and "rmqlog.consumers: " in info["consumers_error"]


def test_stat_reports_other_consumer_read_errors_after_the_log(
    store, capsys, monkeypatch, restore_rmqlog_logger
):
    """Positions that cannot be read for another reason than damage (an I/O error): the report
    first, then the one error line and exit 2."""
    from rmqlog.cli import stat as cli_stat

    def unreadable(clog):
        raise PermissionError(13, "Permission denied", "/s/rmqlog.consumers")

    monkeypatch.setattr(cli_stat, "consumer_rows", unreadable)
    dirs, _ = store
    assert rmqlog_cli.main(["stat", joined(dirs)]) == 2
    out, err = capsys.readouterr()
    assert out.startswith("store: ") and "\noffsets: min 0 " in out
    assert "\nconsumers: the positions could not be read: [Errno 13] Permission denied: " in out
    assert err == "rmqlog: error: Permission denied: /s/rmqlog.consumers\n"
