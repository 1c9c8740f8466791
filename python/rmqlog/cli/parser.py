"""The ``rmqlog`` argument parser: its subcommands, their options and argument types."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any, NoReturn

from rmqlog import FEATURES, __version__
from rmqlog._sizes import SIZE_FORMS, format_size, parse_size
from rmqlog.cli.bench import cmd_bench
from rmqlog.cli.common import PROG, UsageError
from rmqlog.cli.consumers import cmd_consumers
from rmqlog.cli.demo import cmd_demo
from rmqlog.cli.dump import cmd_dump
from rmqlog.cli.lookup import cmd_lookup
from rmqlog.cli.move import cmd_move, cmd_rebalance
from rmqlog.cli.stat import cmd_stat
from rmqlog.cli.tier import cmd_tier_status, cmd_tier_verify
from rmqlog.cli.verify import cmd_verify


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise :class:`UsageError` instead of printing usage."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """Raises :class:`UsageError` with argparse's message and a pointer to ``--help``."""
        raise UsageError(f"{message} (see '{self.prog} --help')")


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


def _size_at_least(minimum: int, what: str, multiple_of: int = 1) -> Callable[[str], int]:
    """An argparse ``type`` accepting sizes (:mod:`rmqlog._sizes`, as the Spark options do):
    ``4096``, ``64k``, ``64m``, ``1g``, ``64MiB``; at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            return parse_size(text, minimum=minimum, multiple_of=multiple_of)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"invalid {what} {text!r}: {e}") from None

    parse.__name__ = what
    return parse


def _key_value(text: str) -> tuple[str, str]:
    """An argparse ``type`` for ``--tier-option``: ``KEY=VALUE``, a non-empty key."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        msg = (
            f"invalid tier option {text!r}: expected KEY=VALUE, e.g. endpoint=http://127.0.0.1:9000"
        )
        raise argparse.ArgumentTypeError(msg)
    return key.strip(), value


_key_value.__name__ = "tier option"


class _HelpFormatter(argparse.HelpFormatter):
    """Ends each option's help with its default, ``(default: X)``, unless the help names it; an
    option without a value (None) says what happens without it in its own help."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (
            "default" in text
            or not action.option_strings
            or action.required
            or action.default in (None, False, argparse.SUPPRESS)
        ):
            return text
        return f"{text} (default: %(default)s)".lstrip()


def build_parser() -> argparse.ArgumentParser:
    """The ``rmqlog`` argument parser with its subcommands."""
    p = _Parser(
        prog=PROG,
        description="Inspect, dump, verify, benchmark and rebalance an rmqlog commit log.",
        epilog=f"PATHS: one argument with directories joined by {os.pathsep!r}, or several "
        f"directories, or a tier URL. SIZE: {SIZE_FORMS}. Exit codes: 0 ok, 1 corruption found "
        "(verify, tier), 2 error. Progress bars go to stderr when it is a terminal.",
    )
    p.add_argument(
        "--version",
        action="version",
        version=f"{PROG} {__version__} (features: {', '.join(sorted(FEATURES)) or 'none'})",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level to stderr")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def json_arg(sp: argparse.ArgumentParser, what: str = "print one JSON object") -> None:
        sp.add_argument("--json", action="store_true", help=what)

    def read_only_paths_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--read-only-paths",
            nargs="*",
            metavar="DIR",
            help="the store's read-only directories (default: none)",
        )

    def paths_arg(sp: argparse.ArgumentParser, read_only: bool = True) -> None:
        found = (
            "; one is enough, it finds the others; or a tier URL (s3://bucket/prefix, "
            "file:///dir), which opens the tier's part of the log alone"
            if read_only
            else ""
        )
        sp.add_argument(
            "paths",
            nargs="+",
            metavar="PATHS",
            help=f"the store's directories (several, or joined by {os.pathsep!r}){found}",
        )
        if read_only:
            sp.add_argument(
                "--tier-option",
                action="append",
                type=_key_value,
                metavar="KEY=VALUE",
                help="an option of the tier's object store, repeatable: endpoint, region, "
                "allow_http, access_key_id, ... (object_store's S3 names); the AWS_* environment "
                "variables are read too (default: none)",
            )

    def read_only_command(
        parent: Any, name: str, func: Callable[..., int], help: str, description: str
    ) -> None:
        """A command that opens the store read-only and prints text or one JSON object."""
        sp = parent.add_parser(name, help=help, description=description)
        paths_arg(sp)
        json_arg(sp)
        sp.set_defaults(func=func)

    def size_help(text: str) -> str:
        return f"{text}; SIZE is bytes (4096) or binary units (64k, 64m, 1g, 64MiB)"

    sp = sub.add_parser(
        "demo",
        help="write records across three directories and read them back",
        description=(
            "The README's demo job (rmqlog.demo): writes records across three directories, reads "
            "them back zero-copy and shows where each segment went."
        ),
    )
    sp.add_argument(
        "--dir", help="root for the three directories (default: a temporary one, removed after)"
    )
    sp.add_argument(
        "--records",
        metavar="N",
        type=_int_at_least(1, "record count"),
        help="records to write (default: 200000)",
    )
    sp.add_argument(
        "--size",
        metavar="SIZE",
        type=_size_at_least(0, "size"),
        help=size_help("body size of each record (default: 256)"),
    )
    sp.set_defaults(func=cmd_demo)

    read_only_command(
        sub,
        "stat",
        cmd_stat,
        help="offsets, record count, segments per directory and in the tier, disk usage",
        description="Opens the store read-only and prints its offsets, its record count (kept "
        "per segment: no scan), segments per directory "
        "(each one's where: local, remote, both) and in the remote tier, each directory's state "
        "and disk usage, its named consumers, and the settings its writer recorded, if any. "
        "Counters and options of the stat process itself are not the store's and are not shown. "
        "Exit code 0; when the consumer positions cannot be read, the rest is printed, the "
        "consumers section says why, and the exit code is 1 if they are damaged, 2 on another "
        "error.",
    )

    sp = sub.add_parser(
        "consumers",
        help="named consumers: position, lag (bytes, records), last commit; --drop NAME",
        description="Lists the store's named consumers (CommitLog.consumer): each one's committed "
        "position, lag behind the end in bytes and records, last commit time, whether an open "
        "holds it now and whether it holds the log's head from retention (retain_unconsumed); "
        "or drops one.",
    )
    sp.add_argument(
        "paths",
        nargs="+",
        metavar="PATHS",
        help=f"the store's directories (several, or joined by {os.pathsep!r})",
    )
    json_arg(sp)
    sp.add_argument(
        "--drop",
        metavar="NAME",
        help="forget consumer NAME: its position is gone; refused while it is open (default: "
        "list them)",
    )
    sp.set_defaults(func=cmd_consumers)

    sp = sub.add_parser(
        "dump",
        help="print records (offset, timestamp, size, body)",
        description="Prints one line per record: offset, timestamp (ms and ISO UTC), body size, "
        "next offset, the key and headers of a record that has them, and the body on request. "
        "With stdout a file or a pipe and stderr a terminal, a progress bar shows on stderr.",
    )
    paths_arg(sp)
    sp.add_argument(
        "--from",
        dest="start",
        metavar="OFF",
        type=_int_at_least(0, "offset"),
        help="first record's offset, a record boundary (default: the log's min_offset)",
    )
    sp.add_argument(
        "--count",
        metavar="N",
        type=_int_at_least(0, "count"),
        help="at most N records (default: all, to the end of the log)",
    )
    sp.add_argument(
        "--data", action="store_true", help="print the body as text (repr-like escapes)"
    )
    sp.add_argument("--hex", action="store_true", help="print the body as hex")
    sp.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="then wait for new records and print each as it is appended, like tail -f, "
        "until Ctrl-C or --count records",
    )
    json_arg(sp, "one JSON object per line")
    sp.set_defaults(func=cmd_dump)

    sp = sub.add_parser(
        "lookup",
        help="print the records with a key (from the key indexes)",
        description="Prints one line per record whose key is KEY, in append order: offset, "
        "timestamp, body size and header count. Reads the segments' key indexes (and walks "
        "what they do not cover yet), not the other records.",
    )
    paths_arg(sp)
    sp.add_argument("key", metavar="KEY", help="the key, as UTF-8 text (hex with --hex-key)")
    sp.add_argument("--hex-key", action="store_true", help="KEY is hex digits")
    sp.add_argument(
        "--start-ms",
        metavar="MS",
        type=_int_at_least(0, "timestamp"),
        help="only records stored at or after MS, milliseconds since the epoch (default: "
        "from the first record)",
    )
    sp.add_argument(
        "--end-ms",
        metavar="MS",
        type=_int_at_least(0, "timestamp"),
        help="only records stored before MS (default: to the last record)",
    )
    json_arg(sp, "one JSON object per line")
    sp.set_defaults(func=cmd_lookup)

    read_only_command(
        sub,
        "verify",
        cmd_verify,
        help="check every record's CRCs, counting them (exit 1 on corruption)",
        description="Opens the store read-only and checks every record (headers, stored "
        "offsets, body CRCs), counting them (a segment whose recorded count differs is damage "
        "too), with a progress bar by bytes verified on a terminal; the segments "
        "only in the remote tier are read by `rmqlog tier verify` (or given the tier's URL). Exit "
        "code 0 when clean, 1 when damage is found (each damaged range is printed), 2 on an error.",
    )

    sp = sub.add_parser(
        "tier",
        help="the remote tier: status, verify",
        description="The store's remote tier (docs/tiering.md). Opens the store read-only, or, "
        "given a URL, the tier alone.",
    )
    tier = sp.add_subparsers(dest="tier_command", metavar="ACTION", required=True)
    read_only_command(
        tier,
        "status",
        cmd_tier_status,
        help="segments local, remote, both, pending; manifest versions; whether the tier answers",
        description="Prints where the segments are (local, remote, both), what waits for upload "
        "(segments and bytes), the manifest version of the store's copy and of the tier, and "
        "whether the tier answers. The writer's counters and last error are in its process "
        "(log.tier_status()); the store does not record them. Exit code 0, 1 when the tier holds "
        "an older manifest than the store's copy or none, 2 on an error (the tier not answering "
        "included, after the status).",
    )
    read_only_command(
        tier,
        "verify",
        cmd_tier_verify,
        help="read every remote object back and check every record (exit 1 on damage)",
        description="Reads back every object of the tier and checks its length and CRC32C "
        "against the manifest, and checks every record of the log, the remote-only segments' "
        "too (downloaded into a temporary cache). Each damaged range is printed with the object "
        "it is in. Exit code 0 when clean, 1 when damage is found, 2 on an error.",
    )

    sp = sub.add_parser(
        "bench",
        help="append/read/scan throughput and latency",
        description="Appends N records one by one and N in batches of 1000, reads N random "
        "offsets and scans the log; prints throughput and p50/p99/p999 latencies.",
    )
    sp.add_argument(
        "--records",
        metavar="N",
        type=_int_at_least(1, "record count"),
        default=100_000,
        help="records per phase",
    )
    sp.add_argument(
        "--size",
        metavar="SIZE",
        type=_size_at_least(0, "size"),
        default=format_size(256),
        help=size_help("body size of each record"),
    )
    sp.add_argument(
        "--dirs",
        nargs="+",
        metavar="D",
        help="empty or new directories for the store (default: a temporary directory, removed "
        "after)",
    )
    sp.add_argument(
        "--flush", choices=("async", "sync", "none"), default="async", help="the log's flush mode"
    )
    sp.add_argument(
        "--segment-size",
        metavar="SIZE",
        type=_size_at_least(4096, "size", multiple_of=4096),
        default=format_size(64 << 20),
        help=size_help("segment file size, a multiple of 4096"),
    )
    json_arg(sp)
    sp.set_defaults(func=cmd_bench)

    sp = sub.add_parser(
        "move",
        help="move a sealed segment to another directory of the store",
        description="Opens the store as its writer and moves one sealed segment online (copy, "
        "sync, rename, switch readers, delete the source). The active segment is refused.",
    )
    paths_arg(sp, read_only=False)
    sp.add_argument(
        "--segment",
        type=_int_at_least(0, "--segment"),
        required=True,
        metavar="START",
        help="start offset of the segment (see `rmqlog stat`; required)",
    )
    sp.add_argument("--to", required=True, metavar="DIR", help="destination directory (required)")
    read_only_paths_arg(sp)
    json_arg(sp)
    sp.set_defaults(func=cmd_move)

    sp = sub.add_parser(
        "rebalance",
        help="move sealed segments until the directories' used ratios even out",
        description="Opens the store as its writer and moves sealed segments from the most to "
        "the least used directory while that narrows the gap.",
    )
    paths_arg(sp, read_only=False)
    sp.add_argument(
        "--max-bytes",
        metavar="SIZE",
        type=_size_at_least(1, "size"),
        default=None,
        help=size_help("move at most this many bytes (default: no limit)"),
    )
    read_only_paths_arg(sp)
    json_arg(sp)
    sp.set_defaults(func=cmd_rebalance)
    return p
