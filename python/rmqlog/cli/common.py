"""Shared by the subcommands: exit codes, usage errors, opening a store, rendering, progress."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from tqdm import tqdm  # type: ignore[import-untyped,unused-ignore]

from rmqlog import CommitLog

PROG = "rmqlog"
EXIT_OK = 0
EXIT_CORRUPT = 1
EXIT_ERROR = 2

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


class UsageError(Exception):
    """A bad command line; reported as one ``rmqlog: error:`` line, exit code 2."""


def is_url(text: str) -> bool:
    """Whether ``text`` is a tier URL (``scheme://...``, as the core tells them from paths)."""
    scheme, sep, _ = text.partition("://")
    return bool(sep) and scheme.isascii() and scheme.isalnum()


def split_paths(args: Sequence[str]) -> list[str]:
    """The directories named by ``args``: each argument may join several with ``os.pathsep``;
    or one tier URL, alone (never split: ``file:///d`` holds the separator)."""
    urls = [arg for arg in args if is_url(arg)]
    if urls:
        if len(args) > 1:
            raise UsageError(
                f"a tier URL opens the tier alone: give {urls[0]} without directories, or the "
                "store's directories without it (they find their tier)"
            )
        return urls
    paths = [p for arg in args for p in arg.split(os.pathsep) if p]
    if not paths:
        raise UsageError("no directory given")
    return paths


def open_read_only(args: Sequence[str], tier_options: Mapping[str, str] | None = None) -> CommitLog:
    """Opens the store in ``args`` (see :func:`split_paths`) read-only; it takes no lock. A tier
    URL opens the tier's part alone. ``tier_options`` (``--tier-option``) go to the tier's
    object store: with directories, the tier their store records."""
    paths = split_paths(args)
    if is_url(paths[0]):
        return CommitLog(paths[0], read_only=True, tier_options=dict(tier_options or {}) or None)
    clog = CommitLog(paths, read_only=True)
    if not tier_options:
        return clog
    with clog:  # the store records its tier's URL, never its options: open again with both
        status = clog.tier_status()
    if status is None:
        raise UsageError(
            f"--tier-option: the store at {os.pathsep.join(paths)} has no tier (it records no "
            "tier_url)"
        )
    return CommitLog(paths, read_only=True, tier_url=status["url"], tier_options=dict(tier_options))


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


def human_bytes(n: int | float | None) -> str:
    """``n`` bytes in binary units, e.g. ``1.5 GiB``; ``unknown`` for None."""
    if n is None:
        return "unknown"  # a filesystem that reports no size
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def plural(n: int, noun: str, nouns: str | None = None, *, commas: bool = False) -> str:
    """``n`` and the noun that agrees with it: ``1 segment``, ``2 segments``, ``0 directories``
    (``nouns`` when the plural is not ``noun + "s"``; ``commas``: ``1,000 records``)."""
    count = f"{n:,}" if commas else str(n)
    return f"{count} {noun if n == 1 else nouns or noun + 's'}"


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced or closed
        return False


def _show_progress(stdout_is_data: bool) -> bool:
    """Whether to draw progress: only when stderr (where bars go) is a terminal, and, for a
    command that prints records as it goes (``dump``), not when those go to a terminal too (the bar
    would break their lines; it is drawn when they go to a file or a pipe)."""
    if not _is_terminal(sys.stderr):
        return False
    return not (stdout_is_data and _is_terminal(sys.stdout))


def progress(
    total: int | None, desc: str, unit: str = "B", *, stdout_is_data: bool = False
) -> tqdm:
    """The progress bar of every long command: on stderr, only when :func:`_show_progress`
    allows, erased when done. ``unit="B"`` counts bytes in binary units; ``total=None`` counts
    without a bar (a total is unknown)."""
    scale = unit == "B"
    fmt = "{desc}: {n_fmt} [{elapsed}]" if total is None and not scale else None
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=scale,
        unit_divisor=1024 if scale else 1000,
        bar_format=fmt,
        disable=not _show_progress(stdout_is_data),
        file=sys.stderr,
        leave=False,
        dynamic_ncols=True,
    )


@contextlib.contextmanager
def working(desc: str) -> Iterator[None]:
    """Progress of one long call that reports none (``move``): the description and the time
    elapsed, redrawn by a thread while the call runs (it releases the GIL)."""
    bar = tqdm(
        total=None,
        desc=desc,
        bar_format="{desc} [{elapsed}]",
        disable=not _show_progress(False),
        file=sys.stderr,
        leave=False,
    )
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(0.25):
            bar.refresh()

    ticker = threading.Thread(target=tick, name="rmqlog-progress", daemon=True)
    if not bar.disable:
        ticker.start()
    try:
        yield
    finally:
        stop.set()
        if ticker.is_alive():
            ticker.join()
        bar.close()


def _emit_json(obj: Any, out: TextIO) -> None:
    """Writes ``obj`` as one line of JSON."""
    out.write(json.dumps(obj, separators=(",", ":")) + "\n")
