"""Byte sizes written as text: one syntax for the command line and the Spark options.

A size is a whole number of bytes (``4096``, ``1_048_576``), or a whole number with a binary unit:
``k``, ``m``, ``g``, ``t``, optionally followed by ``b`` or ``ib`` (``64k``, ``64m``, ``1g``,
``64kb``, ``64MiB``), case-insensitive. Every unit is binary (``1k`` = 1024 bytes), as in Spark's
own size settings and RocketMQ's. Fractions, negative numbers and hex are refused.
"""

from __future__ import annotations

import re

SIZE_FORMS = "a number of bytes (4096) or a binary size: 64k, 64m, 1g, 1t, 64KiB, 64MiB (1k = 1024)"
"""What :func:`parse_size` accepts, for error and help messages."""

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"(\d+(?:_\d+)*)\s*(?:([kmgt])(?:i?b)?|b)?")


def parse_size(
    text: str, *, minimum: int = 0, maximum: int | None = None, multiple_of: int = 1
) -> int:
    """``text`` as a number of bytes (see the module's docstring).

    Raises ValueError saying what is accepted when ``text`` is not a size, or is one out of
    ``[minimum, maximum]`` or not a multiple of ``multiple_of``.
    """
    m = _SIZE.fullmatch(str(text).strip().lower())
    if m is None:
        raise ValueError(f"expected {SIZE_FORMS}")
    n = int(m.group(1)) * _UNITS[m.group(2) or ""]
    if n < minimum:
        raise ValueError(f"{n} bytes is too small: at least {_described(minimum)}")
    if maximum is not None and n > maximum:
        raise ValueError(f"{n} bytes is too large: at most {_described(maximum)}")
    if n % multiple_of:
        raise ValueError(f"{n} bytes is not a multiple of {multiple_of}")
    return n


def format_size(n: int) -> str:
    """``n`` bytes in the shortest form :func:`parse_size` reads back exactly: ``64m``, ``4k``,
    ``1000``."""
    for unit in "tgmk":
        scale = _UNITS[unit]
        if n and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def _described(n: int) -> str:
    """``n`` in both forms when they differ: ``4096 (4k)``."""
    short = format_size(n)
    return str(n) if short == str(n) else f"{n} ({short})"
