"""``rmqlog dump``: one line (text or JSON) per record."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any, TextIO

from rmqlog import CommitLog
from rmqlog.cli.common import (
    EXIT_OK,
    UsageError,
    _emit_json,
    iso_utc,
    open_read_only,
    progress,
    render_text,
)


def iter_records(
    clog: CommitLog, start: int | None, count: int | None, follow: bool = False
) -> Iterator[dict[str, Any]]:
    """Records from ``start`` (default ``min_offset``), at most ``count``, as dicts with
    ``offset``, ``timestamp_ms``, ``size``, ``next_offset``, the ``key`` (bytes) of a record
    that has one, the ``msg_id`` (bytes) of a record appended with one, the ``headers``
    (``[(name, value)]``) of a record that has some, and the ``body`` (a memoryview);
    ``follow``: then the records appended later, as they come (no progress bar)."""
    lo, hi = clog.min_offset, clog.max_offset
    if start is not None and not lo <= start <= hi:
        raise UsageError(f"--from {start} is out of range: the log holds [{lo}, {hi})")
    first = lo if start is None else start
    if count == 0:
        return
    if follow:  # no end to show progress to
        bar = progress(None, "dump", "rec", stdout_is_data=True)
    elif count is None:
        bar = progress(hi - first, "dump", stdout_is_data=True)
    else:
        bar = progress(count, "dump", "rec", stdout_is_data=True)
    with bar:
        n = 0
        for offset, body in clog.scan(start=first, follow=follow):
            rec = clog.read_record(offset)
            row: dict[str, Any] = {
                "offset": offset,
                "timestamp_ms": rec.timestamp_ms,
                "size": len(body),
                "next_offset": rec.next_offset,
            }
            if rec.key is not None:
                row["key"] = rec.key
            if rec.msg_id is not None:
                row["msg_id"] = rec.msg_id
            if rec.headers:
                row["headers"] = rec.headers
            row["body"] = body
            yield row
            n += 1
            bar.update(1 if count is not None or follow else rec.next_offset - offset)
            if count is not None and n >= count:
                break


def _headers_text(headers: list[tuple[str, bytes]]) -> str:
    """Headers on one line: ``[name=value, ...]``, each as :func:`render_text` shows it."""
    return "[" + ", ".join(f"{render_text(n.encode())}={render_text(v)}" for n, v in headers) + "]"


def cmd_dump(args: argparse.Namespace, out: TextIO) -> int:
    """``rmqlog dump``: one line per record, like Kafka's ``kafka-dump-log``. A record's key,
    message id and headers follow its offsets, as text with :func:`render_text`'s escapes (JSON:
    ``key`` and ``msg_id``, strings, and ``headers``, a list of ``[name, value]``); a record
    without them shows none."""
    with open_read_only(args.paths, dict(args.tier_option or [])) as clog:
        for rec in iter_records(clog, args.start, args.count, args.follow):
            body = rec.pop("body")
            key, headers = rec.pop("key", None), rec.pop("headers", None)
            msg_id = rec.pop("msg_id", None)
            ts = iso_utc(rec["timestamp_ms"])
            if args.json:
                row = {**rec, "timestamp": ts}
                if key is not None:
                    row["key"] = render_text(key)
                if msg_id is not None:
                    row["msg_id"] = render_text(msg_id)
                if headers:
                    row["headers"] = [[n, render_text(v)] for n, v in headers]
                if args.data:
                    row["data"] = render_text(body)
                if args.hex:
                    row["hex"] = bytes(body).hex()
                _emit_json(row, out)
                if args.follow:
                    out.flush()
                continue
            line = (
                f"offset: {rec['offset']} timestamp: {rec['timestamp_ms']} ({ts}) "
                f"size: {rec['size']} next: {rec['next_offset']}"
            )
            if key is not None:
                line += f" key: {render_text(key)}"
            if msg_id is not None:
                line += f" msg_id: {render_text(msg_id)}"
            if headers:
                line += f" headers: {_headers_text(headers)}"
            if args.data:
                line += f" data: {render_text(body)}"
            if args.hex:
                line += f" hex: {bytes(body).hex()}"
            print(line, file=out, flush=args.follow)
    return EXIT_OK
