"""The Rust rows, from benches/rust_rows.rs: built once with cargo, then its binary is run for the
rows of each pass (it prints them as one JSON line), and for the Rust references of the Arrow rows
(``ref_*``: one side measured in Rust, the other in Python, in the same compare.py run)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

from harness import ROW_FIELDS, Row, Sizes, row, say, skipped

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Extra arguments of the build, split on spaces: `make bench-quick` gives `--profile test` and the
# tests' features, to run the binary `cargo test` already built (quick rows measure nothing).
CARGO_ARGS_ENV = "RMQLOG_RUST_ROWS_CARGO_ARGS"
# In the order they run in a pass; the recovery row runs first and alone (see compare.py).
NAMES = (
    "rust_append_1k_vs_memcpy",
    "rust_append_100_vs_commitlog",
    "rust_append_batch_100_vs_commitlog",
    "rust_read_vs_commitlog",
    "rust_scan_vs_commitlog",
    "sync_append_64k_vs_fdatasync",
    "lookup_10k_vs_memory_floor",
)
RECOVERY = "recovery_1000_vs_10_segments"


class RustRowsError(Exception):
    """rust_rows could not be built or failed: its rows carry the reason and ``error``."""


class RustRows:
    """The rust_rows bench binary, built on first use (outside any timing)."""

    def __init__(self, s: Sizes, data_dir: str) -> None:
        self.s = s
        self.data_dir = data_dir
        self._exe: str | None = None

    def _build(self) -> str:
        cargo = shutil.which("cargo")
        if cargo is None:
            raise RustRowsError("cargo is not on PATH")
        cmd = [cargo, "bench", "--no-run", "--bench", "rust_rows", "--message-format=json"]
        cmd += os.environ.get(CARGO_ARGS_ENV, "").split()
        say(f"rust rows: building ({' '.join(cmd[1:])})")
        proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False)
        for line in proc.stdout.splitlines():
            msg = json.loads(line) if line.startswith("{") else {}
            if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
                if msg["target"]["name"] == "rust_rows":
                    return str(msg["executable"])
        raise RustRowsError(f"{' '.join(cmd[1:])} failed (exit {proc.returncode})")

    def measure(self, names: tuple[str, ...], reps: int | None = None) -> dict[str, dict[str, Any]]:
        """Runs the named rows or references; returns them by name as rust_rows printed them."""
        if self._exe is None:
            self._exe = self._build()
        cmd = [self._exe, "--bench", "--only", ",".join(names)]
        cmd += ["--arrow-records", str(self.s.arrow_records)]
        if self.s.quick:
            cmd.append("--quick")
        if reps:
            cmd += ["--reps", str(reps)]
        env = dict(os.environ, RMQLOG_BENCH_DIR=self.data_dir)
        proc = subprocess.run(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, check=False
        )
        found = [ln for ln in proc.stdout.splitlines() if ln.startswith("RMQLOG_ROWS_JSON ")]
        if proc.returncode != 0 or not found:
            raise RustRowsError(
                f"rust_rows --only {','.join(names)} failed (exit {proc.returncode})"
            )
        return {r["name"]: r for r in json.loads(found[-1].split(" ", 1)[1])}


def run(rust: RustRows, names: tuple[str, ...], reps: int | None) -> list[Row]:
    """The rows ``names`` of one pass."""
    try:
        got = rust.measure(names, reps)
    except RustRowsError as e:
        # Not a missing optional dependency: the bench is broken. The rows are written with the
        # reason and the run exits non-zero (so --quick in CI catches it).
        return [{**skipped(n, str(e)), "error": True} for n in names]
    rows = []
    for name in names:
        r = got.get(name)
        if r is None:
            rows.append({**skipped(name, "missing from rust_rows output"), "error": True})
            continue
        extra = dict(r.get("extra", {}))
        rows.append(
            row(
                name,
                r["ours_per_s"],
                r["baseline_per_s"],
                r["ratio"],
                str(extra.pop("ours", "")),
                str(extra.pop("baseline", "")),
                **{k: r.get(k) for k in ROW_FIELDS if k in r},
                **extra,
            )
        )
    return rows
