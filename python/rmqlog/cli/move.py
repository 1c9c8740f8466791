"""``rmqlog move`` and ``rmqlog rebalance``: moving sealed segments between a store's directories.

Both open the store as its writer (no other writer may run). The store-wide settings come from
the store itself (an open takes what it does not name); the tool also takes the last writer's
durability, so that the store keeps recording its own writer's settings, not the tool's defaults.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from rmqlog import CommitLog
from rmqlog.cli.common import EXIT_OK, _emit_json, plural, progress, split_paths, working

# The last writer's own options (not store-wide) the tool opens with.
_AS_RECORDED = ("flush", "flush_interval_ms", "max_message_size")


def recorded_options(paths: list[str], read_only: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """The keyword arguments that reopen the store as its last writer had it: its durability;
    the store-wide settings are the store's own for every open."""
    with CommitLog(paths, read_only=True, read_only_paths=read_only) as ro:
        rec = ro.recorded_settings()
    if rec is None:
        return {}
    return {k: rec[k] for k in _AS_RECORDED}


def _open_writer(args: argparse.Namespace) -> CommitLog:
    read_only = split_paths(args.read_only_paths) if args.read_only_paths else ()
    paths = split_paths(args.paths)
    kw = recorded_options(paths, read_only)
    return CommitLog(paths, read_only_paths=read_only, **kw)


def cmd_move(args: argparse.Namespace, out: TextIO) -> int:
    """``rmqlog move PATHS --segment START --to DIR``: moves one sealed segment online."""
    with _open_writer(args) as log:
        with working(f"move {args.segment} to {args.to}"):
            log.move_segment(args.segment, args.to)
        seg = next(s for s in log.segments() if s.start_offset == args.segment)
        if args.json:
            _emit_json({"segment": args.segment, "path": seg.path}, out)
        else:
            print(f"moved {args.segment} to {seg.path}", file=out)
    return EXIT_OK


def cmd_rebalance(args: argparse.Namespace, out: TextIO) -> int:
    """``rmqlog rebalance PATHS [--max-bytes N]``: evens out the directories' used ratios."""
    moves: list[tuple[int, str, str]] = []
    with _open_writer(args) as log:
        step = max((s.size for s in log.segments()), default=0)
        budget = args.max_bytes
        with progress(None, "rebalance: segments moved", unit="segment") as bar:
            # One segment per call, so the bar moves and --max-bytes is honoured exactly.
            while step and (budget is None or budget >= step):
                done = log.rebalance(max_bytes=step)
                if not done:
                    break
                moves += done
                bar.update(len(done))
                if budget is not None:
                    budget -= step * len(done)
        ratios = {d.path: d.used_ratio for d in log.dirs()}
    if args.json:
        _emit_json(
            {
                "moves": [{"segment": s, "from": a, "to": b} for s, a, b in moves],
                "used_ratios": ratios,
            },
            out,
        )
    else:
        for s, a, b in moves:
            print(f"moved {s}: {a} -> {b}", file=out)
        print(f"{plural(len(moves), 'segment')} moved", file=out)
        for path, r in ratios.items():
            print(f"  {path}: used {'?' if r is None else f'{r:.1%}'}", file=out)
    return EXIT_OK
