"""``rmqlog verify``: a full CRC walk of a store; exit code 1 when damage is found."""

from __future__ import annotations

import argparse
from typing import TextIO

from rmqlog import CorruptionError
from rmqlog.cli.common import (
    EXIT_CORRUPT,
    EXIT_OK,
    _emit_json,
    open_read_only,
    plural,
    progress,
)


def cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    """``rmqlog verify``: a full CRC walk; exit 0 when clean, 1 when damage is found."""
    try:
        clog = open_read_only(args.paths)
    except CorruptionError as e:  # the store does not even open: that is corruption found
        msg = " ".join(str(e).split())
        if args.json:
            _emit_json({"ok": False, "error": msg, "damaged": []}, out)
        else:
            print(f"CORRUPT: the store does not open: {msg}", file=out)
        return EXIT_CORRUPT
    with clog:
        lo, hi = clog.min_offset, clog.max_offset
        nsegs = sum(
            1 for s in clog.segments() if s.start_offset < hi and s.start_offset + s.size > lo
        )
        # The core reports (bytes done, bytes in all) after each segment it checked.
        with progress(hi - lo, "verify") as bar:

            def advance(done: int, total: int) -> None:
                bar.total = total
                bar.update(done - bar.n)

            bad = clog.verify(progress=advance)
    damaged = [{"start": s, "end": e, "reason": r} for s, e, r in bad]
    if args.json:
        _emit_json({"ok": not bad, "bytes": hi - lo, "segments": nsegs, "damaged": damaged}, out)
        return EXIT_CORRUPT if bad else EXIT_OK
    checked = f"{plural(hi - lo, 'byte')}, {plural(nsegs, 'segment')} verified"
    if not bad:
        print(f"OK: {checked}", file=out)
    else:
        for d in damaged:
            print(f"CORRUPT: [{d['start']}, {d['end']}) {d['reason']}", file=out)
        print(f"FAILED: {plural(len(bad), 'damaged range')} in {checked}", file=out)
    return EXIT_CORRUPT if bad else EXIT_OK
