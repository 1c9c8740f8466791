"""``rmqlog verify``: a full CRC walk of a store, counting the records it checks; exit code 1
when damage is found."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TextIO

from rmqlog import CommitLog, CorruptionError
from rmqlog.cli.common import (
    EXIT_CORRUPT,
    EXIT_OK,
    _emit_json,
    open_read_only,
    plural,
    progress,
)


def cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    """``rmqlog verify``: a full CRC walk that counts the records it checks; exit 0 when clean,
    1 when damage is found (a segment whose recorded count differs from its walk's too). The
    remote-only segments of a tiered store are read by ``rmqlog tier verify`` (and by this
    command given the tier's URL)."""
    return verify_and_report(
        lambda: open_read_only(args.paths, dict(args.tier_option or [])),
        args.json,
        out,
        remote=None,
        what="the store",
    )


def verify_and_report(
    opened: Callable[[], CommitLog], as_json: bool, out: TextIO, *, remote: bool | None, what: str
) -> int:
    """Opens with ``opened``, verifies (``remote``: :meth:`CommitLog.verify`'s), prints each
    damaged range and a summary with the number of records checked; exit 0 when clean, 1 when
    damage is found, or when the store does not open because it is damaged (``what`` names it
    in that message)."""
    try:
        clog = opened()
    except CorruptionError as e:  # the store does not even open: that is corruption found
        msg = " ".join(str(e).split())
        if as_json:
            _emit_json({"ok": False, "error": msg, "damaged": []}, out)
        else:
            print(f"CORRUPT: {what} does not open: {msg}", file=out)
        return EXIT_CORRUPT
    with clog:
        lo, hi = clog.min_offset, clog.max_offset
        segs = [s for s in clog.segments() if s.start_offset < hi and s.start_offset + s.size > lo]
        # The core reads remote objects only when asked, and by default for a URL open.
        reads_remote = remote if remote is not None else not clog.paths
        tiered = clog.tier_status() is not None
        skipped = [] if reads_remote else [s for s in segs if not s.local and s.remote]
        objects = sum(1 for s in segs if s.remote) if reads_remote else 0
        # The core reports (bytes done, bytes in all) after each segment it checked.
        with progress(hi - lo, "verify") as bar:

            def advance(done: int, total: int) -> None:
                bar.total = total
                bar.update(done - bar.n)

            records, bad = clog.verify_counted(progress=advance, remote=remote)
    damaged = [{"start": s, "end": e, "reason": r} for s, e, r in bad]
    nbytes = (
        hi - lo - sum(min(s.start_offset + s.size, hi) - max(s.start_offset, lo) for s in skipped)
    )
    nsegs = len(segs) - len(skipped)
    if as_json:
        report = {
            "ok": not bad,
            "records": records,
            "bytes": nbytes,
            "segments": nsegs,
            "damaged": damaged,
        }
        if tiered:  # a store without a tier reports as it always did
            report |= {"objects": objects, "remote_only_skipped": len(skipped)}
        _emit_json(report, out)
        return EXIT_CORRUPT if bad else EXIT_OK
    checked = (
        f"{plural(records, 'record')}, {plural(nbytes, 'byte')}, "
        f"{plural(nsegs, 'segment')} verified"
    )
    if objects:
        checked += f", {plural(objects, 'remote object')} read back"
    if skipped:
        checked += (
            f"; {plural(len(skipped), 'remote-only segment')} not read (`rmqlog tier verify` "
            "reads them)"
        )
    if not bad:
        print(f"OK: {checked}", file=out)
    else:
        for d in damaged:
            print(f"CORRUPT: [{d['start']}, {d['end']}) {d['reason']}", file=out)
        print(f"FAILED: {plural(len(bad), 'damaged range')} in {checked}", file=out)
    return EXIT_CORRUPT if bad else EXIT_OK
