"""``rmqlog stat``: a store's offsets, record count, segments per directory, disk usage,
recorded settings.

Only what the store itself tells: a read-only open's own options (strategy, flush mode) and
counters (``CommitLog.stats()``) are this process's, not the writer's, and are never shown.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any, TextIO

from rmqlog import STORE_SETTINGS, CommitLog, CommitLogError, CorruptionError
from rmqlog.cli.common import (
    EXIT_CORRUPT,
    EXIT_OK,
    _emit_json,
    human_bytes,
    open_read_only,
    plural,
)
from rmqlog.cli.consumers import consumer_rows, render_consumers
from rmqlog.cli.tier import tier_summary, where


def recorded_settings(clog: CommitLog) -> dict[str, Any] | None:
    """The settings the store's writer recorded in the store (strategy, flush mode, ...), or None
    when the store records none. This is where ``stat`` gets them; it never shows ``clog``'s own.
    """
    # CommitLog.recorded_settings() comes with the metadata that records them; a core without it
    # records none.
    read = getattr(clog, "recorded_settings", None)
    return None if read is None else read()


def render_recorded_settings(settings: Mapping[str, Any] | None) -> list[str]:
    """The lines ``rmqlog stat`` prints for :func:`recorded_settings`' result: the store-wide
    settings (``rmqlog.STORE_SETTINGS``, every open's default), then the last writer's own."""
    if settings is None:
        return ["settings: not recorded in this store"]

    def store_wide(key: str) -> bool:
        return key.removesuffix("_by_dir") in STORE_SETTINGS

    lines = ["settings (store-wide, the default of every open):"]
    lines += [f"  {k}: {_setting(v)}" for k, v in settings.items() if store_wide(k)]
    own = [f"  {k}: {_setting(v)}" for k, v in settings.items() if not store_wide(k)]
    return lines + (["the last writer's own:", *own] if own else [])


def _setting(value: Any) -> str:
    """A recorded setting as text: ``none``, ``true``, ``2, 3`` for a sequence, ``/a: 0.5`` for
    a mapping."""
    if value is None:
        return "none"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {_setting(v)}" for k, v in value.items()) or "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return ", ".join(_setting(v) for v in value) or "none"
    return str(value)


def stat_info(clog: CommitLog) -> dict[str, Any]:
    """Everything ``rmqlog stat`` reports, as a JSON-ready dict. Consumer positions that cannot
    be read (``rmqlog.consumers`` damaged in every directory) do not hide the log: ``consumers``
    is None and ``consumers_error`` says why (None when they were read)."""
    return _stat_info(clog)[0]


def _stat_info(clog: CommitLog) -> tuple[dict[str, Any], BaseException | None]:
    """:func:`stat_info`'s dict, and the error that kept the consumer positions from being read
    (None: they were read, or the open has none to read)."""
    segments = clog.segments()
    by_dir: dict[str, list[dict[str, Any]]] = {}
    seg_rows = []
    remote_only = []
    for seg in segments:
        row = {
            "name": os.path.basename(seg.path),
            "path": seg.path,  # the object's URL for a segment only in the tier
            "start_offset": seg.start_offset,
            "size": seg.size,
            "written": seg.written,
            "where": where(seg),
        }
        seg_rows.append(row)
        if not seg.local:
            remote_only.append(row)
            continue
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
    try:
        consumers, problem = consumer_rows(clog), None
    except (CommitLogError, OSError) as e:
        consumers, problem = None, e
    info = {
        "paths": clog.paths,
        "min_offset": clog.min_offset,
        "max_offset": clog.max_offset,
        "flushed_offset": clog.flushed_offset,
        "records": len(clog),
        "data_bytes": clog.max_offset - clog.min_offset,
        "segment_count": len(segments),
        "total_bytes": sum(s.size for s in segments),
        "written_bytes": sum(s.written for s in segments),
        "dirs": dirs,
        "segments": seg_rows,
        "tier": _tier(clog, remote_only),
        "record_format": clog.record_format,
        "settings": recorded_settings(clog),
        "consumers": consumers,
        "consumers_error": None if problem is None else " ".join(str(problem).split()),
    }
    return info, problem


def _tier(clog: CommitLog, remote_only: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The tier's URL, manifest version and counts, and the segments only there; None without a
    tier."""
    summary = tier_summary(clog)
    return None if summary is None else {**summary, "segments": remote_only}


def _ratio(r: float | None) -> str:
    """A used ratio as a percentage, ``?`` when unknown."""
    return "?" if r is None else f"{r * 100:.1f}%"


def print_stat(info: dict[str, Any], out: TextIO) -> None:
    """Prints :func:`stat_info`'s dict as text."""

    def p(*parts: object) -> None:
        print(*parts, file=out)

    tier = info.get("tier")
    if info["paths"]:
        p(f"store: {os.pathsep.join(info['paths'])}")
    else:
        p(f"store: the tier {tier and tier['url']} alone (no directory of the store is read)")
    p(
        f"offsets: min {info['min_offset']}  max {info['max_offset']}  "
        f"flushed {info['flushed_offset']}"
    )
    if info.get("records") is not None:
        p(f"records: {info['records']}")
    if info.get("record_format") is not None:
        p(f"record format: {info['record_format']}")
    p(
        f"size: {plural(info['data_bytes'], 'data byte')} in "
        f"{plural(info['segment_count'], 'segment')}; "
        f"total bytes {info['total_bytes']} ({human_bytes(info['total_bytes'])}), "
        f"written {info['written_bytes']}"
    )
    p(f"{plural(len(info['dirs']), 'directory', 'directories')}:")
    for d in info["dirs"]:
        p(f"  {d['path']}")
        if d["state"] is not None:
            p(
                f"    state {d['state']}  free {d['free_bytes']} ({human_bytes(d['free_bytes'])})"
                f"  total {d['total_bytes']} ({human_bytes(d['total_bytes'])})"
                f"  used {_ratio(d['used_ratio'])}  {plural(d['segment_count'], 'segment')}"
            )
        if d["error"]:
            p(f"    error: {d['error']}")
        for s in d["segments"]:
            p(_segment_line(s))
    if tier:
        p(f"tier: {tier['url']}  manifest version {tier['manifest_version']}")
        counts = f"    {tier['remote_segments']} remote"
        if tier["local_segments"] is not None:  # a URL open knows no local part
            counts = (
                f"    {tier['local_segments']} local, {tier['remote_segments']} remote, "
                f"{tier['both_segments']} both; pending upload "
                f"{plural(tier['pending_segments'], 'segment')}, "
                f"{plural(tier['pending_bytes'], 'byte')}"
            )
        p(f"{counts}; remote bytes {tier['remote_bytes']} ({human_bytes(tier['remote_bytes'])})")
        for s in tier["segments"]:
            p(_segment_line(s))
    for line in render_consumers(info.get("consumers"), info.get("consumers_error")):
        p(line)
    for line in render_recorded_settings(info["settings"]):
        p(line)


def _segment_line(s: dict[str, Any]) -> str:
    """One segment under its directory (or under the tier): name, range, bytes written, where
    its bytes are (local, remote, both)."""
    return (
        f"    {s['name']}  [{s['start_offset']}, {s['start_offset'] + s['size']})  "
        f"written {s['written']} / {s['size']}  {s.get('where', 'local')}"
    )


def cmd_stat(args: argparse.Namespace, out: TextIO) -> int:
    """``rmqlog stat``: offsets, the record count (``len()``: no scan), segments per directory,
    disk usage, recorded settings. Consumer
    positions that cannot be read are reported in the output, as ``tier status`` reports a tier
    that does not answer: everything else is printed first, then the exit code is 1 when they are
    damaged (a ``CorruptionError``), 2 (with the error line) on another error."""
    with open_read_only(args.paths, dict(args.tier_option or [])) as clog:
        info, problem = _stat_info(clog)
    if args.json:
        _emit_json(info, out)
    else:
        print_stat(info, out)
    if problem is None:
        return EXIT_OK
    out.flush()
    if isinstance(problem, CorruptionError):
        return EXIT_CORRUPT
    raise problem
