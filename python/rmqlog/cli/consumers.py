"""``rmqlog consumers``: the store's named consumers, their positions and lag (bytes and
records); ``--drop``."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from rmqlog import CommitLog
from rmqlog.cli.common import (
    EXIT_OK,
    _emit_json,
    human_bytes,
    iso_utc,
    open_read_only,
    plural,
    split_paths,
)


def consumer_rows(clog: CommitLog) -> list[dict[str, Any]] | None:
    """Each consumer the store keeps, with its lag and last commit time; None for a tier URL
    open (positions live in the store's directories)."""
    if not clog.paths:
        return None
    return [
        {**c, "committed": iso_utc(c["committed_ms"]), "created": iso_utc(c["created_ms"])}
        for c in clog.consumers()
    ]


def render_consumers(rows: list[dict[str, Any]] | None, error: str | None = None) -> list[str]:
    """The lines ``rmqlog consumers`` and ``rmqlog stat`` print for :func:`consumer_rows`, or
    for the ``error`` that kept the positions from being read."""
    if error is not None:
        return [f"consumers: the positions could not be read: {error}"]
    if rows is None:
        return []
    if not rows:
        return ["consumers: none"]
    lines = [f"consumers ({len(rows)}):"]
    for c in rows:
        flags = [
            f for f, on in (("open", c["open"]), ("holds retention", c["holds_retention"])) if on
        ]
        lines.append(
            f"  {c['name']}  position {c['position']}  lag {c['lag_bytes']} bytes "
            f"({human_bytes(c['lag_bytes'])}), {plural(c['lag_records'], 'record')}  "
            f"last commit {c['committed']}" + (f"  [{', '.join(flags)}]" if flags else "")
        )
        lines.append("    " + work_queue_line(c))
    return lines


def work_queue_line(c: dict[str, Any]) -> str:
    """A name's opens and what it has in flight (JetStream's ack pending and redelivered)."""
    members = ", ".join(str(p) for p in c["members"]) or "none"
    limit = c["max_deliveries"]
    return (
        f"opens (pid): {members}  pending {c['pending']}  waiting {c['waiting']}  "
        f"redelivered {c['redelivered']}  dead-lettered {c['dead_lettered']}"
        + (f" (max_deliveries {limit})" if limit else "")
    )


def cmd_consumers(args: argparse.Namespace, out: TextIO) -> int:
    """``rmqlog consumers``: list the named consumers, or drop one (``--drop NAME``)."""
    if args.drop:
        with CommitLog(split_paths(args.paths), read_only=True) as clog:
            clog.drop_consumer(args.drop)
        print(f"dropped consumer {args.drop!r}", file=out)
        return EXIT_OK
    with open_read_only(args.paths) as clog:
        rows = consumer_rows(clog)
        holder = clog.stats()["head_held_by"] if rows else None
    if args.json:
        _emit_json({"consumers": rows, "head_held_by": holder}, out)
        return EXIT_OK
    for line in render_consumers(rows):
        print(line, file=out)
    if holder is not None:
        print(f"the log's head is held by consumer {holder!r} (retain_unconsumed)", file=out)
    return EXIT_OK
