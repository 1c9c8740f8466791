"""``main``: runs the command line, with logging to stderr and errors as exit codes."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from rmqlog import CommitLogError, _native
from rmqlog.cli.common import EXIT_ERROR, EXIT_OK, PROG, UsageError
from rmqlog.cli.parser import build_parser


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
        # The core's log records (warnings of the open that failed) come first: the error line
        # is the last one.
        _native._flush_logging()
        print(f"{PROG}: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_ERROR
