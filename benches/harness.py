"""Timing, fixed parameters, rows and their targets for benches/compare.py.

A row is a dict: ``name``, ``ours_per_s``, ``baseline_per_s``, ``ratio``, ``target``, ``met``,
the descriptions ``ours`` and ``baseline``, counts and extras; a skipped row has ``skip`` (the
reason) and no numbers. One pass yields one dict per row; ``aggregate`` folds the passes of
``--runs N`` into min/median/max.
"""

from __future__ import annotations

import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Row = dict[str, Any]
# Fields of a rust_rows row kept as they are.
ROW_FIELDS = ("items", "ours_median_s", "baseline_median_s")

# name -> (comparison, target); "<=" rows are ratios of latencies or times (lower is better);
# None: reported only, no target.
TARGETS: dict[str, tuple[str, float | None]] = {
    "py_append_100": (">=", 3),
    "py_append_100_shared": (">=", 3),
    "py_append_batch_100": (">=", 12),
    "py_append_1k": (">=", 3),
    "py_read_100": (">=", 1.5),
    "py_read_100_vs_seek": (">=", 3),
    "py_scan_100": (">=", 4),
    "verify_vs_read": (">=", 0.5),
    "py_vs_persistqueue_sync_100": (">=", 3),
    "py_vs_persistqueue_sync_100_1t": (">=", None),
    "py_vs_persistqueue_nosync_100": (">=", 100),
    "py_vs_sqlite_append_100": (">=", 10),
    "py_append_arrow_100": (">=", 0.8),
    "py_append_arrow_100_vs_python": (">=", 15),
    "py_scan_arrow_100": (">=", 0.8),
    "py_scan_arrow_100_2cores": (">=", 1.6),
    "py_scan_arrow_100_vs_python": (">=", 20),
    "duckdb_scan_vs_parquet": (">=", 0.5),
    "rust_append_1k_vs_memcpy": (">=", 0.6),
    "rust_append_100_vs_commitlog": (">=", 2),
    "rust_append_batch_100_vs_commitlog": (">=", 2),
    "rust_read_vs_commitlog": (">=", 2),
    "rust_scan_vs_commitlog": (">=", 1.5),
    "sync_append_64k_vs_fdatasync": (">=", 0.8),
    "lookup_10k_vs_memory_floor": ("<=", 1.3),
    "recovery_1000_vs_10_segments": ("<=", 2),
    "spark_scan_vs_parquet": (">=", 0.35),
    "spark_meta_scan_vs_parquet": (">=", 0.5),
    "spark_time_window_vs_full": ("<=", 0.2),
    "spark_jvm_scan_vs_parquet": (">=", 1.5),
    "spark_jvm_meta_scan_vs_parquet": (">=", 2),
    "spark_jvm_body_sum_vs_parquet": (">=", 1.2),
    "spark_jvm_vs_python_source": (">=", 3),
    "spark_jvm_time_window_vs_full": ("<=", 0.1),
    "spark_jvm_stream_latency_p50": ("<=", None),
    "tier_scan_vs_local": (">=", 0.8),  # issue 24 (0.5 in issue 15)
    "spark_tier_vs_local": (">=", 0.6),
    # Latency over its absolute bound (50 us, 500 us): a ratio of times, met at <= 1.
    "wake_latency_p50": ("<=", 1),
    "wake_latency_p99": ("<=", 1),
    "mp_append_100_4proc": (">=", 0.7),
    "mp_append_batch_100_4proc": (">=", 0.9),
    "mp_vs_sqlite_4proc": (">=", 20),
    "mp_sync_append_4proc": (">=", 2),
    "consumer_poll_100": (">=", 0.8),
    "consumer_poll_vs_persistqueue_ack": (">=", 50),
    "consumer_commit_sync": (">=", 0.7),
    # p99 of nack() in one process -> the poll waiting in another returning, over its bound (1 ms).
    "consumer_nack_redeliver": ("<=", 1),
    # Keys and headers (docs/messages.md): keyed appends over plain ones; lookups per second.
    "append_key_headers_100_vs_plain": (">=", 0.8),
    "dedup_append_100_vs_plain": (">=", 0.7),
    "lookup_key_vs_sqlite_index": (">=", 3),
    "lookup_key_vs_scan": (">=", 10_000),
    # A consumer filtered in Rust receiving 1 record in 10 against an unfiltered one receiving
    # all, time per record the filtered one receives.
    "consumer_filter_1in10_vs_all": (">=", 5),
    # where key = x through the key index against the full query, both net of the floor.
    "spark_key_filter_vs_full": ("<=", 0.1),
}

BODY_100 = bytes(range(100))
BODY_1K = bytes(i % 251 for i in range(1024))
# The segment size of every rmqlog row: the broker preset's (the library's default is 64 MiB).
SEGMENT = 1 << 30


@dataclass(frozen=True)
class Sizes:
    """Fixed parameters of a pass (docs/benchmarks.md); --quick shrinks the counts only."""

    quick: bool
    reps: int  # repetitions of each row within a pass (the pass keeps their median)
    records_100: int  # appends, reads and scans of 100 B records
    records_1k: int
    batch: int  # append_batch batch size
    reads: int  # random reads
    pq_sync_puts: int  # persist-queue puts per repetition, each synced
    pq_nosync_puts: int  # persist-queue puts per repetition, no sync per put
    pq_reps: int
    sqlite_records: int
    arrow_records: int
    spark_rows: int
    spark_reps: int
    tier_bytes: int  # bytes of 1 KiB records written for the tier row
    tier_segment: int  # its segment size
    acks: int  # records a consumer polls and commits (and persist-queue gets and acks) per rep
    commits: int  # durable consumer commits (and fdatasyncs) per repetition

    @staticmethod
    def make(quick: bool, reps: int | None) -> Sizes:
        if quick:
            r = reps or 1
            return Sizes(
                True,
                r,
                20_000,
                5_000,
                1_000,
                5_000,
                40,
                400,
                r,
                20_000,
                20_000,
                20_000,
                r,
                8 << 20,
                1 << 20,
                1_000,
                50,
            )
        return Sizes(
            quick=False,
            reps=reps or 5,
            records_100=1_000_000,
            records_1k=1_000_000,
            batch=1_000,
            reads=200_000,
            pq_sync_puts=1_000,
            pq_nosync_puts=20_000,
            pq_reps=reps or 3,
            sqlite_records=1_000_000,
            arrow_records=1_000_000,
            spark_rows=2_000_000,
            spark_reps=reps or 3,
            tier_bytes=256 << 20,
            tier_segment=16 << 20,
            acks=20_000,
            commits=1_000,
        )


_T0 = time.perf_counter()


def say(msg: str) -> None:
    """Progress on stderr, with the time since start."""
    print(f"[{time.perf_counter() - _T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def distribution(ns: list[int], prefix: str) -> dict[str, float]:
    """min, p50, p90, p99, p99.9, max of ``ns`` (nanoseconds), in microseconds; p50 is the median,
    the others the nearest rank."""
    us = sorted(x / 1000 for x in ns)

    def pct(p: float) -> float:
        return us[min(len(us) - 1, int(p / 100 * len(us)))]

    return {
        f"{prefix}min_us": us[0],
        f"{prefix}p50_us": statistics.median(us),
        f"{prefix}p90_us": pct(90),
        f"{prefix}p99_us": pct(99),
        f"{prefix}p999_us": pct(99.9),
        f"{prefix}max_us": us[-1],
    }


def timed(fn: Callable[[], object]) -> float:
    """Seconds taken by ``fn()``, with the garbage collector off (as timeit does)."""
    gc.collect()
    gc.disable()
    try:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t
    finally:
        gc.enable()


def alternate(reps: int, *fns: Callable[[], float]) -> list[float]:
    """Runs each of ``fns`` ``reps`` times, rotating the order every repetition; each returns its
    own measured seconds. Returns the median per function."""
    times: list[list[float]] = [[] for _ in fns]
    for r in range(reps):
        k = r % len(fns)
        order = list(range(len(fns)))
        for i in order[k:] + order[:k]:
            times[i].append(fns[i]())
    return [statistics.median(t) for t in times]


class Workdir:
    """Fresh directories under one root, removed after use."""

    def __init__(self, root: str | None) -> None:
        self.root = tempfile.mkdtemp(prefix="rmqlog-compare-", dir=root)
        self._n = 0

    def new(self) -> str:
        self._n += 1
        path = os.path.join(self.root, f"d{self._n}")
        os.makedirs(path)
        return path

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def lower_is_better(name: str) -> bool:
    return TARGETS[name][0] == "<="


def row(
    name: str,
    ours_per_s: float | None,
    baseline_per_s: float | None,
    ratio: float | None,
    ours: str,
    baseline: str,
    **extra: object,
) -> Row:
    return {
        "name": name,
        "ours_per_s": ours_per_s,
        "baseline_per_s": baseline_per_s,
        "ratio": ratio,
        "target": target_text(name),
        "met": met(name, ratio),
        "ours": ours,
        "baseline": baseline,
        **extra,
    }


def target_text(name: str) -> str:
    cmp, target = TARGETS[name]
    return "-" if target is None else f"{cmp} {target:g}"


def met(name: str, ratio: float | None) -> bool | None:
    cmp, target = TARGETS[name]
    if ratio is None or target is None:
        return None
    return ratio >= target if cmp == ">=" else ratio <= target


def skipped(name: str, reason: str) -> Row:
    say(f"  {name}: skipped: {reason}")
    return row(name, None, None, None, "", "", skip=reason)


def throughput(name: str, n: int, t_ours: float, t_base: float, ours: str, base: str, **kw):
    """A row of rates: ``n`` items on each side; ratio = ours rate / baseline rate."""
    return rates(name, n / t_ours, n / t_base, ours, base, items=n, **kw)


def rates(name: str, o: float, b: float, ours: str, base: str, **kw) -> Row:
    say(f"  {name}: ours {o:,.0f}/s, baseline {b:,.0f}/s, ratio {o / b:.3g}")
    return row(name, o, b, o / b, ours, base, **kw)


def times(name: str, t_ours: float, t_base: float, ours: str, base: str, **kw) -> Row:
    """A row of times (lower is better): ratio = ours time / baseline time; the rates are the
    reciprocals (runs per second)."""
    ratio = t_ours / t_base
    say(f"  {name}: ours {t_ours:.6f} s, baseline {t_base:.6f} s, ratio {ratio:.3g} (of times)")
    return row(
        name, 1 / t_ours, 1 / t_base, ratio, ours, base, ours_s=t_ours, baseline_s=t_base, **kw
    )


# ------------------------------------------------------------------------------------------------
# Passes: min/median/max over --runs N

_NUMBERS = ("ratio", "ours_per_s", "baseline_per_s")


def aggregate(passes: list[list[Row]]) -> list[Row]:
    """One row per name (in first-seen order) from the rows of every pass: ``ratio``,
    ``ours_per_s`` and ``baseline_per_s`` are the medians over the passes that measured it, with
    ``*_min``/``*_max`` beside them and ``runs`` the number of such passes; ``met`` is judged on
    the median. Per-pass extras stay in ``per_run``. A row no pass measured keeps its skip."""
    by_name: dict[str, list[Row]] = {}
    for rows in passes:
        for r in rows:
            by_name.setdefault(str(r["name"]), []).append(r)
    out = []
    for name, rs in by_name.items():
        measured = [r for r in rs if r["ratio"] is not None]
        if not measured:
            out.append({**rs[0], "runs": 0})
            continue
        agg: Row = dict(measured[-1])
        for key in _NUMBERS:
            vals = [float(r[key]) for r in measured if r[key] is not None]
            if not vals:  # a row with no baseline (a reported latency)
                continue
            agg[key] = statistics.median(vals)
            agg[f"{key}_min"] = min(vals)
            agg[f"{key}_max"] = max(vals)
        agg["met"] = met(name, agg["ratio"])
        agg["runs"] = len(measured)
        agg["per_run"] = [
            {k: v for k, v in r.items() if k not in ("name", "target", "met", "ours", "baseline")}
            for r in measured
        ]
        errors = [r for r in rs if r.get("error")]
        if errors:
            agg["error"] = True
            agg["skip"] = errors[0].get("skip")
        out.append(agg)
    return out


# ------------------------------------------------------------------------------------------------
# The table


def fmt_num(v: object) -> str:
    if not isinstance(v, int | float):
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def fmt_rate(v: object) -> str:
    """A rate in 3 significant digits with k/M/G."""
    if not isinstance(v, int | float):
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{v / scale:.3g}{unit}"
    return f"{v:.3g}"


def fmt_range(r: Row, key: str) -> str:
    """The median rate, with the min - max over the runs when there were several."""
    text = fmt_rate(r[key])
    if r.get("runs", 1) > 1 and key + "_min" in r:  # a row without a baseline has no range
        text += f" ({fmt_rate(r[key + '_min'])}-{fmt_rate(r[key + '_max'])})"
    return text


def table_lines(rows: list[Row]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    head = ("row", "ours/s", "baseline/s", "ratio min", "median", "max", "target", "met")
    lines = []
    for r in rows:
        measured = r["ratio"] is not None
        m = r["met"]
        lines.append(
            (
                str(r["name"]),
                fmt_range(r, "ours_per_s") if measured else "-",
                fmt_range(r, "baseline_per_s") if measured else "-",
                fmt_num(r.get("ratio_min", r["ratio"])) if measured else "skipped",
                fmt_num(r["ratio"]) if measured else "-",
                fmt_num(r.get("ratio_max", r["ratio"])) if measured else "-",
                str(r["target"]),
                "-" if m is None else ("yes" if m else "NO"),
            )
        )
    return head, lines


def print_table(rows: list[Row]) -> None:
    head, lines = table_lines(rows)
    widths = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head))]
    fmt = "  ".join(f"{{:{'<' if i == 0 else '>'}{w}}}" for i, w in enumerate(widths))
    print(fmt.format(*head))
    print("  ".join("-" * w for w in widths))
    for ln in lines:
        print(fmt.format(*ln))
    for r in rows:
        if r.get("skip"):
            print(f"{r['name']}: skipped: {r['skip']}")


def print_markdown(rows: list[Row]) -> None:
    """The table as docs/benchmarks.md shows it: rates as median (min-max) over the runs."""
    head, lines = table_lines(rows)
    print("| " + " | ".join(head) + " |")
    print("|---|" + "---:|" * 5 + "---|---|")
    for ln in lines:
        name, *rest = ln
        met_cell = "**no**" if rest[-1] == "NO" else rest[-1]
        print("| " + " | ".join([f"`{name}`", *rest[:-1], met_cell]) + " |")
    for r in rows:
        if r.get("skip"):
            print(f"\n`{r['name']}` skipped: {r['skip']}")
