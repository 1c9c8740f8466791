"""``rmqlog verify``: a full CRC walk of a store; exit code 1 when damage is found."""

from __future__ import annotations

import argparse
from typing import TextIO

from rmqlog import CorruptionError
from rmqlog.cli.common import EXIT_CORRUPT, EXIT_OK, _emit_json, _progress, open_read_only


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
        with _progress(hi - lo, "verify") as bar:

            def progress(done: int, total: int) -> None:
                bar.total = total
                bar.update(done - bar.n)

            bad = clog.verify(progress=progress)
    damaged = [{"start": s, "end": e, "reason": r} for s, e, r in bad]
    if args.json:
        _emit_json({"ok": not bad, "bytes": hi - lo, "segments": nsegs, "damaged": damaged}, out)
    elif not bad:
        print(f"OK: {hi - lo} bytes, {nsegs} segments verified", file=out)
    else:
        for d in damaged:
            print(f"CORRUPT: [{d['start']}, {d['end']}) {d['reason']}", file=out)
        print(
            f"FAILED: {len(bad)} damaged range(s) in {hi - lo} bytes, {nsegs} segments verified",
            file=out,
        )
    return EXIT_CORRUPT if bad else EXIT_OK
