"""Reading dead letters: the records a consumer with ``max_deliveries`` moved to its
``dead_letter`` store, each the original body behind an envelope naming where it came from."""

from __future__ import annotations

import json
import struct
from typing import Any

_MAGIC = b"RMQLDLQ1"


def dead_letter_origin(
    body: bytes | bytearray | memoryview,
) -> tuple[dict[str, Any], memoryview] | None:
    """A dead letter's origin and the original body (a view into ``body``), or ``None`` if
    ``body`` is not a dead letter.

    The origin is a dict: ``store`` (the source store's id), ``paths`` (its directories),
    ``offset`` and ``timestamp_ms`` (the record's), ``consumer`` (the name that dead-lettered it)
    and ``deliveries`` (how many times that name delivered it).
    """
    view = memoryview(body).cast("B")
    if bytes(view[:8]) != _MAGIC or len(view) < 12:
        return None
    (n,) = struct.unpack_from("<I", view, 8)
    if len(view) < 12 + n:
        return None
    try:
        origin = json.loads(bytes(view[12 : 12 + n]))
    except ValueError:
        return None
    if not isinstance(origin, dict):
        return None
    return origin, view[12 + n :]
