"""The ``rmqlog`` command line: inspect, dump, verify, benchmark and rebalance a commit log.

    rmqlog demo      [--dir D] [--records N] [--size SIZE]
    rmqlog stat      PATHS [--tier-option K=V ...] [--json]
    rmqlog dump      PATHS [--from OFF] [--count N] [--data] [--hex] [--tier-option K=V ...]
                     [--json]
    rmqlog lookup    PATHS KEY [--hex-key] [--start-ms MS] [--end-ms MS] [--json]
    rmqlog verify    PATHS [--tier-option K=V ...] [--json]
    rmqlog tier status PATHS [--tier-option K=V ...] [--json]
    rmqlog tier verify PATHS [--tier-option K=V ...] [--json]
    rmqlog bench     [--records N] [--size SIZE] [--dirs D ...] [--flush async|sync|none]
                     [--segment-size SIZE] [--json]
    rmqlog move      PATHS --segment START --to DIR [--read-only-paths DIR ...] [--json]
    rmqlog rebalance PATHS [--max-bytes SIZE] [--read-only-paths DIR ...] [--json]

``PATHS`` is one argument with the store's directories joined by ``os.pathsep``
(``/d0/store:/d1/store``), or several positional directories; ``stat``, ``dump`` and ``verify``
open the store read-only, and any one directory finds the others through ``rmqlog.meta``. The
read-only commands (and ``tier``) also take a tier URL alone (``s3://bucket/prefix``,
``file:///dir``), which opens the log's remote part alone; ``--tier-option`` passes the tier's
object store its options (``endpoint=...``), and the ``AWS_*`` environment variables are read too.
``SIZE`` is a number of bytes or one with a binary unit (``4096``, ``64k``, ``64m``, ``1g``,
``64MiB``): the syntax of the Spark options (:mod:`rmqlog._sizes`).

Data goes to stdout, logs and progress bars (only when stderr is a terminal) to stderr. Exit
codes: 0 on success, 1 when ``verify`` or ``tier`` finds corruption, 2 on any error (bad
arguments, a missing directory, an unreadable store, a tier that does not answer), reported as
one line ``rmqlog: error: ...``; the exceptions that map to them are listed in one place,
:data:`rmqlog.cli.run.EXIT_CODES`. ``tier status`` and ``stat`` print their report before such an
exit when part of it could not be read (the tier; the consumer positions, which ``stat`` says in
its consumers section: 1 when they are damaged).
"""

from rmqlog.cli.bench import FlushMode, cmd_bench, percentile, run_bench
from rmqlog.cli.bench import log as log
from rmqlog.cli.common import (
    EXIT_CORRUPT,
    EXIT_ERROR,
    EXIT_OK,
    PROG,
    UsageError,
    human_bytes,
    is_url,
    iso_utc,
    open_read_only,
    plural,
    progress,
    render_text,
    split_paths,
)
from rmqlog.cli.demo import cmd_demo
from rmqlog.cli.dump import cmd_dump, iter_records
from rmqlog.cli.parser import build_parser
from rmqlog.cli.run import EXIT_CODES, main
from rmqlog.cli.stat import (
    cmd_stat,
    print_stat,
    recorded_settings,
    render_recorded_settings,
    stat_info,
)
from rmqlog.cli.tier import cmd_tier_status, cmd_tier_verify
from rmqlog.cli.verify import cmd_verify

__all__ = [
    "EXIT_CODES",
    "EXIT_CORRUPT",
    "EXIT_ERROR",
    "EXIT_OK",
    "PROG",
    "FlushMode",
    "UsageError",
    "build_parser",
    "cmd_bench",
    "cmd_demo",
    "cmd_dump",
    "cmd_stat",
    "cmd_tier_status",
    "cmd_tier_verify",
    "cmd_verify",
    "human_bytes",
    "is_url",
    "iso_utc",
    "iter_records",
    "main",
    "open_read_only",
    "percentile",
    "plural",
    "print_stat",
    "progress",
    "recorded_settings",
    "render_recorded_settings",
    "render_text",
    "run_bench",
    "split_paths",
    "stat_info",
]
