"""Shared by the subcommands: exit codes, usage errors, opening a store, rendering, progress."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
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


def split_paths(args: Sequence[str]) -> list[str]:
    """The directories named by ``args``: each argument may join several with ``os.pathsep``."""
    paths = [p for arg in args for p in arg.split(os.pathsep) if p]
    if not paths:
        raise UsageError("no directory given")
    return paths


def open_read_only(args: Sequence[str]) -> CommitLog:
    """Opens the store in ``args`` (see :func:`split_paths`) read-only; it takes no lock."""
    return CommitLog(split_paths(args), read_only=True)


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
