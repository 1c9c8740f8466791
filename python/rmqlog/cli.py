"""The ``rmqlog`` command line: inspect, dump, verify and benchmark a commit log.

    rmqlog demo   [--dir D] [--records N] [--size B]
    rmqlog stat   PATHS [--json]
    rmqlog dump   PATHS [--from OFF] [--count N] [--data] [--hex] [--json]
    rmqlog verify PATHS [--json]
    rmqlog bench  [--records N] [--size B] [--dirs D ...] [--flush async|sync|none]

``PATHS`` is one argument with the store's directories joined by ``os.pathsep``
(``/d0/store:/d1/store``), or several positional directories; stores are opened read-only, and
any one directory finds the others through ``rmqlog.meta``.

Data goes to stdout, logs and progress bars (only on a terminal) to stderr. Exit codes: 0 on
success, 1 when ``verify`` finds corruption, 2 on any error (bad arguments, a missing directory,
an unreadable store), reported as one line ``rmqlog: error: ...``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, NoReturn, TextIO

from tqdm import tqdm  # type: ignore[import-untyped,unused-ignore]

from rmqlog import CommitLog, CommitLogError, CorruptionError, __version__

PROG = "rmqlog"
EXIT_OK = 0
EXIT_CORRUPT = 1
EXIT_ERROR = 2

FlushMode = Literal["async", "sync", "none"]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}

log = logging.getLogger("rmqlog.cli")


class UsageError(Exception):
    """A bad command line; reported as one ``rmqlog: error:`` line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise :class:`UsageError` instead of printing usage."""

    def error(self, message: str) -> NoReturn:
        """Raises :class:`UsageError` with argparse's message and a pointer to ``--help``."""
        raise UsageError(f"{message} (see '{self.prog} --help')")


# ---------------------------------------------------------------------------------------------
# argument types


def _int_at_least(minimum: int, what: str) -> Callable[[str], int]:
    """An argparse ``type`` accepting integers ``>= minimum`` (``_`` separators allowed)."""

    def parse(text: str) -> int:
        try:
            value = int(text)  # decimal, leading zeros and _ separators allowed
        except ValueError:
            try:
                value = int(text, 0)  # 0x1000, 0o..., 0b...
            except ValueError:
                msg = f"invalid {what} {text!r}: not an integer"
                raise argparse.ArgumentTypeError(msg) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"invalid {what} {text!r}: must be >= {minimum}")
        return value

    parse.__name__ = what  # argparse names the type in some messages
    return parse


def split_paths(args: Sequence[str]) -> list[str]:
    """The directories named by ``args``: each argument may join several with ``os.pathsep``."""
    paths = [p for arg in args for p in arg.split(os.pathsep) if p]
    if not paths:
        raise UsageError("no directory given")
    return paths


def open_read_only(args: Sequence[str]) -> CommitLog:
    """Opens the store in ``args`` (see :func:`split_paths`) read-only; it takes no lock."""
    return CommitLog(split_paths(args), read_only=True)


# ---------------------------------------------------------------------------------------------
# rendering helpers


def iso_utc(ts_ms: int) -> str:
    """``ts_ms`` (milliseconds since the Unix epoch) as ISO 8601 UTC with milliseconds."""
    try:
        when = _EPOCH + timedelta(milliseconds=ts_ms)
    except OverflowError:
        return "out-of-range"
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def render_text(body: bytes | memoryview) -> str:
    """A body as one line of text, ``repr``-like: UTF-8 shown as is, control characters,
    backslashes and undecodable bytes escaped (``\\n``, ``\\\\``, ``\\xNN``, ``\\uNNNN``)."""
    text = bytes(body).decode("utf-8", errors="surrogateescape")
    out = []
    for ch in text:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif 0xDC80 <= code <= 0xDCFF:  # an undecodable byte, kept by surrogateescape
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x100:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out)


def human_bytes(n: int | float) -> str:
    """``n`` bytes in binary units, e.g. ``1.5 GiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _progress(total: int, desc: str, unit: str = "B") -> tqdm:
    """A progress bar on stderr, shown only when stderr is a terminal."""
    scale = unit == "B"
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=scale,
        unit_divisor=1024 if scale else 1000,
        disable=None,
        file=sys.stderr,
        leave=False,
        dynamic_ncols=True,
    )


def _emit_json(obj: Any, out: TextIO) -> None:
    """Writes ``obj`` as one line of JSON."""
    out.write(json.dumps(obj, separators=(",", ":")) + "\n")


# ---------------------------------------------------------------------------------------------
# demo


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    """``rmqlog demo``: runs :mod:`rmqlog.demo` (three directories, write, zero-copy read)."""
    from rmqlog import demo

    argv: list[str] = []
    if args.dir is not None:
        argv += ["--dir", args.dir]
    if args.records is not None:
        argv += ["--records", str(args.records)]
    if args.size is not None:
        argv += ["--size", str(args.size)]
    if out is sys.stdout:
        return demo.main(argv)
    # Only for in-process callers that redirect the output: demo.main prints to sys.stdout.
    with contextlib.redirect_stdout(out):
        return demo.main(argv)


# ---------------------------------------------------------------------------------------------
# stat


def stat_info(clog: CommitLog) -> dict[str, Any]:
    """Everything ``rmqlog stat`` reports, as a JSON-ready dict."""
    segments = clog.segments()
    by_dir: dict[str, list[dict[str, Any]]] = {}
    seg_rows = []
    for seg in segments:
        row = {
            "name": os.path.basename(seg.path),
            "path": seg.path,
            "start_offset": seg.start_offset,
            "size": seg.size,
            "written": seg.written,
        }
        seg_rows.append(row)
        by_dir.setdefault(os.path.normpath(os.path.dirname(seg.path)), []).append(row)
    dirs = []
    for d in clog.dirs():
        dirs.append(
            {
                "path": d.path,
                "state": d.state,
                "free_bytes": d.free_bytes,
                "total_bytes": d.total_bytes,
                "used_ratio": d.used_ratio,
                "segment_count": d.segments,
                "error": d.error,
                "segments": by_dir.pop(os.path.normpath(d.path), []),
            }
        )
    for path, rows in by_dir.items():  # not expected: a segment outside the listed directories
        dirs.append(
            {
                "path": path,
                "state": None,
                "free_bytes": None,
                "total_bytes": None,
                "used_ratio": None,
                "segment_count": len(rows),
                "error": "not one of the store's directories",
                "segments": rows,
            }
        )
    return {
        "paths": clog.paths,
        "min_offset": clog.min_offset,
        "max_offset": clog.max_offset,
        "flushed_offset": clog.flushed_offset,
        "data_bytes": clog.max_offset - clog.min_offset,
        "segment_count": len(segments),
        "total_bytes": sum(s.size for s in segments),
        "written_bytes": sum(s.written for s in segments),
        "dirs": dirs,
        "segments": seg_rows,
        "stats": clog.stats(),
    }


def _ratio(r: float | None) -> str:
    """A used ratio as a percentage, ``?`` when unknown."""
    return "?" if r is None else f"{r * 100:.1f}%"


def print_stat(info: dict[str, Any], out: TextIO) -> None:
    """Prints :func:`stat_info`'s dict as text."""

    def p(*parts: object) -> None:
        print(*parts, file=out)

    p(f"store: {os.pathsep.join(info['paths'])}")
    p(
        f"offsets: min {info['min_offset']}  max {info['max_offset']}  "
        f"flushed {info['flushed_offset']}"
    )
    p(
        f"size: {info['data_bytes']} data bytes in {info['segment_count']} segments; "
        f"total bytes {info['total_bytes']} ({human_bytes(info['total_bytes'])}), "
        f"written {info['written_bytes']}"
    )
    p("directories:")
    for d in info["dirs"]:
        p(f"  {d['path']}")
        if d["state"] is not None:
            p(
                f"    state {d['state']}  free {d['free_bytes']} ({human_bytes(d['free_bytes'])})"
                f"  total {d['total_bytes']} ({human_bytes(d['total_bytes'])})"
                f"  used {_ratio(d['used_ratio'])}  segments {d['segment_count']}"
            )
        if d["error"]:
            p(f"    error: {d['error']}")
        for s in d["segments"]:
            p(
                f"    {s['name']}  [{s['start_offset']}, {s['start_offset'] + s['size']})  "
                f"written {s['written']} / {s['size']}"
            )
    p("stats:")
    for key, value in info["stats"].items():
        p(f"  {key}: {value}")


def cmd_stat(args: argparse.Namespace, out: TextIO) -> int:
    """``rmqlog stat``: offsets, segments per directory, disk usage and counters."""
    with open_read_only(args.paths) as clog:
        info = stat_info(clog)
    if args.json:
        _emit_json(info, out)
    else:
        print_stat(info, out)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# dump


def iter_records(clog: CommitLog, start: int | None, count: int | None) -> Iterator[dict[str, Any]]:
    """Records from ``start`` (default ``min_offset``), at most ``count``, as dicts with
    ``offset``, ``timestamp_ms``, ``size``, ``next_offset`` and the ``body`` (a memoryview)."""
    lo, hi = clog.min_offset, clog.max_offset
    if start is not None and not lo <= start <= hi:
        raise UsageError(f"--from {start} is out of range: the log holds [{lo}, {hi})")
    first = lo if start is None else start
    if count == 0:
        return
    bar = _progress(hi - first, "dump") if count is None else _progress(count, "dump", "rec")
    with bar:
        n = 0
        for offset, body in clog.scan(start=first):
            rec = clog.read_record(offset)
            yield {
                "offset": offset,
                "timestamp_ms": rec.timestamp_ms,
                "size": len(body),
                "next_offset": rec.next_offset,
                "body": body,
            }
            n += 1
            bar.update(1 if count is not None else rec.next_offset - offset)
            if count is not None and n >= count:
                break


def cmd_dump(args: argparse.Namespace, out: TextIO) -> int:
    """``rmqlog dump``: one line per record, like Kafka's ``kafka-dump-log``."""
    with open_read_only(args.paths) as clog:
        for rec in iter_records(clog, args.start, args.count):
            body = rec.pop("body")
            ts = iso_utc(rec["timestamp_ms"])
            if args.json:
                row = {**rec, "timestamp": ts}
                if args.data:
                    row["data"] = render_text(body)
                if args.hex:
                    row["hex"] = bytes(body).hex()
                _emit_json(row, out)
                continue
            line = (
                f"offset: {rec['offset']} timestamp: {rec['timestamp_ms']} ({ts}) "
                f"size: {rec['size']} next: {rec['next_offset']}"
            )
            if args.data:
                line += f" data: {render_text(body)}"
            if args.hex:
                line += f" hex: {bytes(body).hex()}"
            print(line, file=out)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# verify


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


# ---------------------------------------------------------------------------------------------
# bench


def percentile(sorted_ns: Sequence[int], q: float) -> float:
    """The ``q`` quantile (0 < q <= 1, nearest rank) of sorted nanoseconds, in microseconds."""
    if not sorted_ns:
        return math.nan
    rank = min(len(sorted_ns), max(1, math.ceil(q * len(sorted_ns))))
    return sorted_ns[rank - 1] / 1000


def _phase(name: str, records: int, nbytes: int, ns: int, lat: list[int] | None) -> dict[str, Any]:
    """One benchmark phase's results: time, throughput and, if timed per call, latencies."""
    secs = ns / 1e9
    row: dict[str, Any] = {
        "phase": name,
        "records": records,
        "seconds": secs,
        "records_per_s": records / secs if secs else None,  # None: too fast for the clock
        "mib_per_s": nbytes / (1 << 20) / secs if secs else None,
    }
    if lat is not None:
        lat.sort()
        row.update(
            p50_us=percentile(lat, 0.5),
            p99_us=percentile(lat, 0.99),
            p999_us=percentile(lat, 0.999),
        )
    return row


def run_bench(
    dirs: list[str],
    records: int,
    size: int,
    flush: FlushMode,
    segment_size: int,
    batch: int = 1000,
) -> list[dict[str, Any]]:
    """Appends ``records`` single records then ``records`` more in batches, reads ``records``
    random offsets and scans everything; returns one result dict per phase."""
    pc = time.perf_counter_ns
    rng = random.Random(0)
    pool = [rng.randbytes(size) for _ in range(16)]
    results = []
    with CommitLog(dirs, segment_size=segment_size, flush=flush) as clog:
        append = clog.append
        offsets: list[int] = []
        lat = [0] * records
        with _progress(records, "append", "rec") as bar:
            t0 = pc()
            for i in range(records):
                a = pc()
                off = append(pool[i & 15])
                lat[i] = pc() - a
                offsets.append(off)
                if i & 1023 == 1023:
                    bar.update(1024)
            clog.flush()
            elapsed = pc() - t0
        results.append(_phase("append", records, records * size, elapsed, lat))

        with _progress(records, "append_batch", "rec") as bar:
            t0 = pc()
            for start in range(0, records, batch):
                chunk = [pool[i & 15] for i in range(start, min(start + batch, records))]
                offsets += clog.append_batch(chunk)
                bar.update(len(chunk))
            clog.flush()
            elapsed = pc() - t0
        results.append(_phase(f"append_batch({batch})", records, records * size, elapsed, None))

        picks = [rng.choice(offsets) for _ in range(records)] if offsets else []
        read = clog.read
        lat = [0] * len(picks)
        nbytes = 0
        with _progress(len(picks), "read", "rec") as bar:
            t0 = pc()
            for i, off in enumerate(picks):
                a = pc()
                view = read(off)
                lat[i] = pc() - a
                nbytes += len(view)
                if i & 1023 == 1023:
                    bar.update(1024)
            elapsed = pc() - t0
        results.append(_phase("read (random)", len(picks), nbytes, elapsed, lat))

        count = nbytes = 0
        with _progress(len(offsets), "scan", "rec") as bar:
            t0 = pc()
            for _off, body in clog.scan():
                count += 1
                nbytes += len(body)
                if count & 1023 == 0:
                    bar.update(1024)
            elapsed = pc() - t0
        if count != len(offsets):
            raise CommitLogError(f"scan returned {count} records, {len(offsets)} were appended")
        results.append(_phase("scan", count, nbytes, elapsed, None))
    return results


def _fmt(x: float | None, spec: str) -> str:
    """Formats a number, ``-`` when absent."""
    return "-" if x is None or math.isnan(x) else format(x, spec)


def cmd_bench(args: argparse.Namespace, out: TextIO) -> int:
    """``rmqlog bench``: append, read and scan throughput and latency percentiles."""
    tmp = None
    if args.dirs:
        dirs = split_paths(args.dirs)
        for d in dirs:
            if os.path.isdir(d) and os.listdir(d):
                raise UsageError(f"bench directory {d} is not empty (bench needs a fresh store)")
    else:
        tmp = tempfile.mkdtemp(prefix="rmqlog-bench-")
        dirs = [os.path.join(tmp, "store")]
    try:
        log.info("bench: %d records of %d B into %s", args.records, args.size, dirs)
        results = run_bench(dirs, args.records, args.size, args.flush, args.segment_size)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        _emit_json(
            {
                "records": args.records,
                "size": args.size,
                "flush": args.flush,
                "segment_size": args.segment_size,
                "dirs": dirs,
                "phases": results,
            },
            out,
        )
        return EXIT_OK
    where = "a temporary directory" if tmp else os.pathsep.join(dirs)
    print(
        f"rmqlog bench: {args.records:,} records of {args.size} B, flush={args.flush}, "
        f"segment {human_bytes(args.segment_size)}, in {where}",
        file=out,
    )
    print(
        f"  {'phase':<20}{'seconds':>9}{'rec/s':>13}{'MiB/s':>10}"
        f"{'p50 us':>10}{'p99 us':>10}{'p999 us':>10}",
        file=out,
    )
    for r in results:
        print(
            f"  {r['phase']:<20}{r['seconds']:>9.3f}{_fmt(r['records_per_s'], ',.0f'):>13}"
            f"{_fmt(r['mib_per_s'], ',.1f'):>10}{_fmt(r.get('p50_us'), '.2f'):>10}"
            f"{_fmt(r.get('p99_us'), '.2f'):>10}{_fmt(r.get('p999_us'), '.2f'):>10}",
            file=out,
        )
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# the parser and main


def build_parser() -> argparse.ArgumentParser:
    """The ``rmqlog`` argument parser with its subcommands."""
    p = _Parser(
        prog=PROG,
        description="Inspect, dump, verify and benchmark an rmqlog commit log.",
        epilog="PATHS: one argument with directories joined by "
        f"{os.pathsep!r}, or several directories. Exit codes: 0 ok, 1 corruption found "
        "(verify), 2 error.",
    )
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level to stderr")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def paths_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "paths",
            nargs="+",
            metavar="PATHS",
            help=f"the store's directories (several, or joined by {os.pathsep!r})",
        )

    sp = sub.add_parser(
        "demo",
        help="write records across three directories and read them back",
        description=(
            "The README's demo job (rmqlog.demo): writes records across three directories, reads "
            "them back zero-copy and shows where each segment went."
        ),
    )
    sp.add_argument("--dir", help="root for the three directories (default: a temporary one)")
    sp.add_argument(
        "--records", type=_int_at_least(1, "record count"), help="records (default 200000)"
    )
    sp.add_argument(
        "--size", type=_int_at_least(0, "size"), help="body size in bytes (default 256)"
    )
    sp.set_defaults(func=cmd_demo)

    sp = sub.add_parser(
        "stat",
        help="offsets, segments per directory, disk usage, counters",
        description="Opens the store read-only and prints its offsets, segments per directory, "
        "each directory's state and disk usage, and the log's counters.",
    )
    paths_arg(sp)
    sp.add_argument("--json", action="store_true", help="print one JSON object")
    sp.set_defaults(func=cmd_stat)

    sp = sub.add_parser(
        "dump",
        help="print records (offset, timestamp, size, body)",
        description="Prints one line per record: offset, timestamp (ms and ISO UTC), body size, "
        "next offset, and the body on request.",
    )
    paths_arg(sp)
    sp.add_argument(
        "--from",
        dest="start",
        metavar="OFF",
        type=_int_at_least(0, "offset"),
        help="first record's offset (default: min_offset); must be a record boundary",
    )
    sp.add_argument(
        "--count", metavar="N", type=_int_at_least(0, "count"), help="at most N records"
    )
    sp.add_argument(
        "--data", action="store_true", help="print the body as text (repr-like escapes)"
    )
    sp.add_argument("--hex", action="store_true", help="print the body as hex")
    sp.add_argument("--json", action="store_true", help="one JSON object per line")
    sp.set_defaults(func=cmd_dump)

    sp = sub.add_parser(
        "verify",
        help="check every record's CRCs (exit 1 on corruption)",
        description="Opens the store read-only and checks every record (headers, stored "
        "offsets, body CRCs). Exit code 0 when clean, 1 when damage is found (each damaged "
        "range is printed), 2 on an error.",
    )
    paths_arg(sp)
    sp.add_argument("--json", action="store_true", help="print one JSON object")
    sp.set_defaults(func=cmd_verify)

    sp = sub.add_parser(
        "bench",
        help="append/read/scan throughput and latency",
        description="Appends N records one by one and N in batches of 1000, reads N random "
        "offsets and scans the log; prints throughput and p50/p99/p999 latencies.",
    )
    sp.add_argument(
        "--records", type=_int_at_least(1, "record count"), default=100_000, help="(100000)"
    )
    sp.add_argument(
        "--size", type=_int_at_least(0, "size"), default=256, help="body size in bytes (256)"
    )
    sp.add_argument(
        "--dirs",
        nargs="+",
        metavar="D",
        help="empty or new directories for the store (default: a temporary directory)",
    )
    sp.add_argument("--flush", choices=("async", "sync", "none"), default="async")
    sp.add_argument(
        "--segment-size",
        type=_int_at_least(4096, "segment size"),
        default=64 << 20,
        help="bytes, a multiple of 4096 (64 MiB)",
    )
    sp.add_argument("--json", action="store_true", help="print one JSON object")
    sp.set_defaults(func=cmd_bench)
    return p


class _StderrHandler(logging.StreamHandler[TextIO]):
    """A handler writing to whatever ``sys.stderr`` is at the time of each record."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("rmqlog: %(levelname)s: %(message)s"))

    @property
    def stream(self) -> TextIO:
        """The current ``sys.stderr``."""
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


def _setup_logging(verbose: bool) -> None:
    """Sends the ``rmqlog`` loggers (the CLI's and the Rust core's) to stderr, once."""
    logger = logging.getLogger("rmqlog")
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_StderrHandler())
    logger.setLevel(logging.INFO if verbose else logging.WARNING)


def _one_line(e: BaseException) -> str:
    """An exception's message on one line (its type name when it has none)."""
    msg = " ".join(str(e).split())
    return msg or type(e).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    out = sys.stdout
    try:
        args = build_parser().parse_args(argv)
    except UsageError as e:
        print(f"{PROG}: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_ERROR
    except SystemExit as e:  # --help, --version
        return e.code if isinstance(e.code, int) else EXIT_OK
    _setup_logging(args.verbose)
    try:
        return int(args.func(args, out))
    except BrokenPipeError:
        # The reader went away (``rmqlog dump ... | head``): stop quietly, as Python's docs advise.
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except (UsageError, CommitLogError, OSError, ValueError, TypeError) as e:
        print(f"{PROG}: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_ERROR
