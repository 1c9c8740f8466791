"""``main``: runs the command line, with logging to stderr and errors as exit codes."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from rmqlog import (
    CommitLogError,
    ConfigurationError,
    CorruptionError,
    StoreNotFoundError,
    _native,
)
from rmqlog.cli.common import EXIT_CORRUPT, EXIT_ERROR, EXIT_OK, PROG, UsageError
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


# The one place where an exception that ends a command becomes an exit code: the first entry
# whose types match wins, and the error is reported as one line ``rmqlog: error: <message>``.
# (Other exceptions are bugs: Python prints their traceback.) ``verify`` is the one command that
# turns an exception into a result, not an error: a store that does not open because it is
# corrupt is reported as corruption found (exit 1), in cli/verify.py.
EXIT_CODES: tuple[tuple[tuple[type[BaseException], ...], int], ...] = (
    ((UsageError,), EXIT_ERROR),  # a bad command line
    ((StoreNotFoundError,), EXIT_ERROR),  # no store at the path given
    (
        (ConfigurationError,),
        EXIT_ERROR,
    ),  # directories missing, foreign, or a copy with its original
    ((CorruptionError,), EXIT_CORRUPT),  # damaged bytes, and only they
    ((CommitLogError,), EXIT_ERROR),  # the store refused or failed the operation
    ((OSError,), EXIT_ERROR),  # a missing or unreadable directory
    ((ValueError, TypeError), EXIT_ERROR),  # an argument the store's API refuses
)


def exit_code_of(e: BaseException) -> int | None:
    """The exit code :data:`EXIT_CODES` gives ``e``; None when it lists no type of ``e``."""
    return next((code for types, code in EXIT_CODES if isinstance(e, types)), None)


def _one_line(e: BaseException) -> str:
    """An exception's message on one line (its type name when it has none); an OSError's without
    the ``[Errno N]`` prefix, with the file it names when the message does not."""
    msg = str(e)
    if isinstance(e, OSError) and e.strerror:
        msg = e.strerror
        for name in (e.filename, e.filename2):
            shown = os.fsdecode(name) if isinstance(name, str | bytes) else name
            if shown is not None and str(shown) not in msg:
                msg += f": {shown}"
    msg = " ".join(msg.split())
    return msg or type(e).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    out = sys.stdout
    try:
        args = build_parser().parse_args(argv)
    except UsageError as e:
        return _report(e)
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
    except Exception as e:
        if exit_code_of(e) is None:
            raise
        return _report(e)


def _report(e: BaseException) -> int:
    """Prints ``e`` as the one error line and returns its exit code (:data:`EXIT_CODES`)."""
    # The core's log records (warnings of the open that failed) come first: the error line is the
    # last one.
    _native._flush_logging()
    print(f"{PROG}: error: {_one_line(e)}", file=sys.stderr)
    code = exit_code_of(e)
    return EXIT_ERROR if code is None else code
