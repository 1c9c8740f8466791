"""``rmqlog lookup``: the records with a key, from the segments' key indexes."""

from __future__ import annotations

import argparse
from typing import TextIO

from rmqlog.cli.common import EXIT_OK, _emit_json, iso_utc, open_read_only


def cmd_lookup(args: argparse.Namespace, out: TextIO) -> int:
    """One line per record whose key is ``KEY`` (UTF-8, or hex with ``--hex-key``): offset,
    timestamp and body size, in append order."""
    key = bytes.fromhex(args.key) if args.hex_key else args.key.encode()
    with open_read_only(args.paths, dict(args.tier_option or [])) as clog:
        for offset in clog.lookup(key, start=args.start_ms, end=args.end_ms):
            rec = clog.read_record(offset)
            row = {
                "offset": offset,
                "timestamp_ms": rec.timestamp_ms,
                "size": len(rec.body),
                "headers": len(rec.headers),
            }
            if args.json:
                _emit_json({**row, "timestamp": iso_utc(rec.timestamp_ms)}, out)
                continue
            print(
                f"offset: {offset} timestamp: {rec.timestamp_ms} ({iso_utc(rec.timestamp_ms)}) "
                f"size: {row['size']} headers: {row['headers']}",
                file=out,
            )
    return EXIT_OK
