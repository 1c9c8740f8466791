"""``rmqlog demo``: the README's demo job (:mod:`rmqlog.demo`) as a subcommand."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TextIO


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
