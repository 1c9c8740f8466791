"""rmqlog: RocketMQ's CommitLog storage for Python, with a Rust core.

Fixed-size memory-mapped segment files named by their start offset, records with CRCs, O(1) offset
lookup, the log spread over several directories (RocketMQ RIP-7), crash recovery that never loses
an acknowledged record, and zero-copy ``memoryview`` reads.
"""

import atexit

from rmqlog import _native
from rmqlog._native import (
    HEADER_LEN,
    ClosedError,
    CommitLog,
    CommitLogError,
    CorruptionError,
    DirInfo,
    DiskFullError,
    InvalidOffsetError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    ReadOnlyError,
    Record,
    ScanIterator,
    Segment,
    StoreLockedError,
    WriterPoisonedError,
    __version__,
)

# Deliver the Rust side's queued log records before the interpreter shuts down.
atexit.register(_native._shutdown_logging)

__all__ = [
    "HEADER_LEN",
    "ClosedError",
    "CommitLog",
    "CommitLogError",
    "CorruptionError",
    "DirInfo",
    "DiskFullError",
    "InvalidOffsetError",
    "MessageTooLargeError",
    "OffsetOutOfRangeError",
    "ReadOnlyError",
    "Record",
    "ScanIterator",
    "Segment",
    "StoreLockedError",
    "WriterPoisonedError",
    "__version__",
]
