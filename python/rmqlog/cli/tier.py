"""``rmqlog tier status`` and ``rmqlog tier verify``: a store's remote tier (docs/tiering.md).

Both open the store read-only (never as its writer), or, given a URL, the tier's part alone. The
writer's counters and last upload error live in the writer's process (``log.tier_status()``
there): the store records neither, so ``status`` reports what the store and the tier say, and
checks that the tier answers.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, TextIO

from rmqlog import CommitLog, CommitLogError, CorruptionError, StoreNotFoundError
from rmqlog.cli.common import (
    EXIT_CORRUPT,
    EXIT_OK,
    UsageError,
    _emit_json,
    human_bytes,
    is_url,
    open_read_only,
    plural,
    split_paths,
)
from rmqlog.cli.verify import verify_and_report

# What tier_status() counts of the segments: their where, as stat shows it.
WHERE = {(True, False): "local", (False, True): "remote", (True, True): "both"}


def where(seg: Any) -> str:
    """``local``, ``remote`` or ``both``: where a segment's bytes are."""
    return WHERE.get((bool(seg.local), bool(seg.remote)), "lost")


def tier_summary(clog: CommitLog) -> dict[str, Any] | None:
    """The tier as the store's own open sees it (None without a tier): URL, manifest version
    (the store's copy, or the tier's for a URL open), segments local, remote, both, pending,
    and bytes. A URL open knows no local part: its local counts are None."""
    status = clog.tier_status()
    if status is None:
        return None
    alone = not clog.paths
    info = {
        k: status[k]
        for k in (
            "url",
            "manifest_version",
            "local_segments",
            "remote_segments",
            "both_segments",
            "pending_segments",
            "pending_bytes",
            "remote_bytes",
        )
    }
    if alone:
        for k in ("local_segments", "both_segments", "pending_segments", "pending_bytes"):
            info[k] = None
    return info


def _remote_manifest_version(url: str, options: dict[str, str] | None) -> int | None:
    """The version of the manifest the tier at ``url`` publishes now; None when it holds none.
    Raises what the tier raises when it does not answer or its manifest is damaged."""
    try:
        with CommitLog(url, read_only=True, tier_options=options or None) as remote:
            return int(remote.tier_status()["manifest_version"])
    except StoreNotFoundError:
        return None


def status_info(args: argparse.Namespace) -> tuple[dict[str, Any], BaseException | None]:
    """Everything ``tier status`` reports, and the error of the tier's check (None: it
    answered)."""
    options = dict(args.tier_option or [])
    with open_read_only(args.paths, options) as clog:
        summary = tier_summary(clog)
        if summary is None:
            raise UsageError(
                f"the store at {os.pathsep.join(clog.paths)} has no tier (it records no "
                "tier_url): `rmqlog stat` shows it"
            )
        info: dict[str, Any] = {
            "paths": clog.paths,
            "opened": "store" if clog.paths else "tier",
            **summary,
            "min_offset": clog.min_offset,
            "max_offset": clog.max_offset,
        }
    problem: BaseException | None = None
    check = "ok"
    if info["paths"]:  # the store's copy of the manifest, against what the tier publishes
        try:
            remote = _remote_manifest_version(info["url"], options)
        except CorruptionError as e:
            remote, problem, check = None, e, "damaged"
        except (CommitLogError, OSError) as e:
            remote, problem, check = None, e, "no answer"
        info["remote_manifest_version"] = remote
        if problem is None and (remote or 0) < info["manifest_version"]:
            check = "behind" if remote else "no manifest"
            problem = CorruptionError(
                f"the tier holds manifest version {remote or 'none'}, the store's copy is "
                f"version {info['manifest_version']}: objects or the manifest were deleted "
                "from the tier, or --tier-option points at another store"
            )
    else:
        info["remote_manifest_version"] = info["manifest_version"]
    info["tier_check"] = check
    info["error"] = None if problem is None else " ".join(str(problem).split())
    return info, problem


def print_status(info: dict[str, Any], out: TextIO) -> None:
    """Prints :func:`status_info`'s dict as text."""

    def p(*parts: object) -> None:
        print(*parts, file=out)

    alone = info["opened"] == "tier"
    p(f"tier: {info['url']}" + ("  (opened alone: no directory of the store is read)" * alone))
    if not alone:
        p(f"store: {os.pathsep.join(info['paths'])}")
    remote_v = info["remote_manifest_version"]
    if alone:
        p(f"manifest: version {info['manifest_version']}")
    else:
        theirs = remote_v if remote_v is not None else info["tier_check"]
        if theirs == "ok":  # a tier that holds nothing yet, as the store's copy says
            theirs = "none (nothing uploaded yet)"
        p(f"manifest: version {info['manifest_version']} (the store's copy); the tier's: {theirs}")
    p(f"offsets: min {info['min_offset']}  max {info['max_offset']}")
    objects = info["remote_segments"] + (info["both_segments"] or 0)
    if alone:
        p(f"segments: {info['remote_segments']} remote")
    else:
        p(
            f"segments: {info['local_segments']} local, {info['remote_segments']} remote, "
            f"{info['both_segments']} both"
        )
        p(
            f"pending upload: {plural(info['pending_segments'], 'segment')}, "
            f"{plural(info['pending_bytes'], 'byte')} ({human_bytes(info['pending_bytes'])})"
        )
    p(
        f"remote: {plural(objects, 'object')}, {plural(info['remote_bytes'], 'byte')} "
        f"({human_bytes(info['remote_bytes'])})"
    )
    p(f"last error: {info['error'] or 'none (the tier answered)'}")
    p("counters: the writer's are in its process (log.tier_status()), not in the store")


def cmd_tier_status(args: argparse.Namespace, out: TextIO) -> int:
    """``rmqlog tier status``: where the segments are, what waits, whether the tier answers.
    Exit 0; 1 when the tier holds an older manifest than the store's copy, or none (objects
    deleted?); 2 on an error, the tier not answering included (the status is printed first)."""
    info, problem = status_info(args)
    if args.json:
        _emit_json(info, out)
    else:
        print_status(info, out)
    if problem is None:
        return EXIT_OK
    out.flush()
    if isinstance(problem, CorruptionError):
        return EXIT_CORRUPT
    raise problem


def cmd_tier_verify(args: argparse.Namespace, out: TextIO) -> int:
    """``rmqlog tier verify``: every remote object read back against the manifest (length,
    CRC32C), every record of the log walked, the remote-only segments' too (from the tier)."""
    options = dict(args.tier_option or [])
    paths = split_paths(args.paths)

    def opened() -> CommitLog:
        clog = open_read_only(paths, options)
        if clog.tier_status() is None:
            clog.close()
            raise UsageError(
                f"the store at {os.pathsep.join(paths)} has no tier (it records no tier_url): "
                "`rmqlog verify` checks it"
            )
        return clog

    what = "the tier" if is_url(paths[0]) else "the store"
    return verify_and_report(opened, args.json, out, remote=True, what=what)
