"""rmqlog against what its users would otherwise use: one command, one table, one JSON file.

    python benches/compare.py                      # one full pass: bench-results.json
    python benches/compare.py --runs 5             # five full passes: min/median/max per row
    python benches/compare.py --quick --out /tmp/x.json   # tiny sizes, every row, no assertion
    python benches/compare.py --table bench-results.json --markdown   # re-print a table

Every row times rmqlog ("ours") and exactly one baseline in this process run, alternating them,
and keeps the median of several repetitions; ``--runs N`` repeats every selected row in N full
passes and reports the min, median and max over the passes (targets are judged on the median).
``ratio`` is ours/baseline (higher is better), except the rows whose target reads "<=": ratios of
latencies or times (lower is better). The Rust rows come from benches/rust_rows.rs, whose binary
prints them as JSON. The rows live in benches/rows_*.py; baselines and parameters:
docs/benchmarks.md.

Needs the built extension (``import rmqlog``); ``persist-queue``, pyarrow and duckdb for their
rows (``pip install 'rmqlog[bench]'``); pyspark, pyarrow and java for the Spark rows
(``rmqlog[spark]``); cargo for the Rust rows. A missing piece skips its rows with a reason
instead of failing the run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import rows_append
import rows_arrow
import rows_consumers
import rows_messages
import rows_mp
import rows_peers
import rows_read
import rows_rust
import rows_spark
import rows_spark_jvm
import rows_spark_tier
import rows_tier
import rows_verify
import rows_wait
from harness import (
    TARGETS,
    Row,
    Sizes,
    Workdir,
    aggregate,
    print_markdown,
    print_table,
    say,
)

# Group -> its rows, in the order a pass runs them. The recovery row runs first in a pass, alone
# (after a sync), not right after the rows that leave gigabytes of dirty pages behind.
GROUPS: dict[str, tuple[str, ...]] = {
    "recovery": (rows_rust.RECOVERY,),
    "append": rows_append.NAMES,
    "read": rows_read.NAMES,
    "verify": rows_verify.NAMES,
    "peers": rows_peers.NAMES,
    "arrow": rows_arrow.NAMES,
    "rust": rows_rust.NAMES,
    "spark": rows_spark.NAMES,
    "spark_jvm": rows_spark_jvm.NAMES,
    "tier": rows_tier.NAMES,
    "spark_tier": rows_spark_tier.NAMES,
    "wait": rows_wait.NAMES,
    "mp": rows_mp.NAMES,
    "consumers": rows_consumers.NAMES,
    "messages": rows_messages.NAMES,
}


def machine_line() -> str:
    mem = "?"
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        kb = int(f.readline().split()[1])
        mem = f"{kb / (1 << 20):.1f} GiB"
    return f"{os.cpu_count()} cpus, {mem} RAM, {platform.system()} {platform.release()}"


def one_pass(s: Sizes, wd: Workdir, rust: rows_rust.RustRows, want: Callable[[str], bool], reps):
    runners: dict[str, Callable[[], list[Row]]] = {
        "recovery": lambda: rows_rust.run(rust, (rows_rust.RECOVERY,), reps),
        "append": lambda: rows_append.run(s, wd),
        "read": lambda: rows_read.run(s, wd),
        "verify": lambda: rows_verify.run(s, wd),
        "peers": lambda: rows_peers.run(s, wd),
        "arrow": lambda: rows_arrow.run(s, wd, rust),
        "rust": lambda: rows_rust.run(rust, rows_rust.NAMES, reps),
        "spark": lambda: rows_spark.run(s, wd),
        "spark_jvm": lambda: rows_spark_jvm.run(s, wd),
        "tier": lambda: rows_tier.run(s, wd),
        "spark_tier": lambda: rows_spark_tier.run(s, wd),
        "wait": lambda: rows_wait.run(s, wd),
        "mp": lambda: rows_mp.run(s, wd),
        "consumers": lambda: rows_consumers.run(s, wd),
        "messages": lambda: rows_messages.run(s, wd),
    }
    rows: list[Row] = []
    for group, runner in runners.items():
        if want(group):
            if group == "recovery":
                os.sync()
            rows += runner()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes, one repetition (CI)")
    p.add_argument("--out", default="bench-results.json", help="JSON output (bench-results.json)")
    p.add_argument("--dir", default=None, help="where to put the data (default: system temp)")
    p.add_argument(
        "--reps", type=int, default=None, help="repetitions per row and pass (5; quick: 1)"
    )
    p.add_argument("--runs", type=int, default=1, help="full passes over the rows (1)")
    p.add_argument(
        "--only",
        default=None,
        help=f"comma-separated row names or groups: {', '.join(GROUPS)}",
    )
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument(
        "--table",
        metavar="JSON",
        default=None,
        help="print the table of a results file; run nothing",
    )
    args = p.parse_args(argv)
    show = print_markdown if args.markdown else print_table
    if args.table:
        show(json.loads(Path(args.table).read_text()))
        return 0
    if args.runs < 1 or (args.reps is not None and args.reps < 1):
        p.error("--runs and --reps take a count of at least 1")
    s = Sizes.make(args.quick, args.reps)
    only = set(args.only.split(",")) if args.only else None
    keep: set[str] = set(TARGETS)
    if only is not None:
        unknown = only - set(TARGETS) - set(GROUPS)
        if unknown:
            p.error(f"--only: unknown {', '.join(sorted(unknown))}; rows or {', '.join(GROUPS)}")
        # A group runs whole; named rows are kept, with every row of a named group.
        keep = {n for g, names in GROUPS.items() for n in names if g in only} | only

    def want(group: str) -> bool:
        return any(n in keep for n in GROUPS[group])

    t0 = time.perf_counter()
    mode = "quick" if s.quick else "full"
    say(f"compare.py: {mode}, {args.runs} pass(es); {machine_line()}")
    wd = Workdir(args.dir)
    rust = rows_rust.RustRows(s, wd.root)
    passes: list[list[Row]] = []
    try:
        for k in range(args.runs):
            say(f"pass {k + 1} of {args.runs}")
            passes.append([r for r in one_pass(s, wd, rust, want, args.reps) if r["name"] in keep])
    finally:
        wd.close()
    rows = aggregate(passes)
    for r in rows:
        r["quick"] = s.quick
    Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")
    print()
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; {machine_line()}; {mode}; {args.runs} run(s)")
    show(rows)
    print(f"\nwrote {args.out} ({len(rows)} rows) in {time.perf_counter() - t0:.0f} s")
    broken = [str(r["name"]) for r in rows if r.get("error")]
    if broken:
        print(f"failed: {', '.join(broken)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
