"""rmqlog: RocketMQ's CommitLog storage for Python, with a Rust core.

Fixed-size memory-mapped segment files named by their start offset, records with CRCs, O(1) offset
lookup, the log spread over several directories (RocketMQ RIP-7), crash recovery that never loses
an acknowledged record, and zero-copy ``memoryview`` reads.
"""

import atexit
from types import MappingProxyType

from rmqlog import _native
from rmqlog._appended import Appended
from rmqlog._arrow import to_arrow
from rmqlog._dead_letter import dead_letter_origin
from rmqlog._fleet import scan_batches
from rmqlog._native import (
    FEATURES,
    HEADER_LEN,
    MAX_ID_LEN,
    MAX_KEY_LEN,
    MAX_OFFSET,
    SPLIT_EVERY,
    BatchScan,
    ClaimLostError,
    ClosedError,
    CommitLog,
    CommitLogError,
    ConfigurationError,
    Consumer,
    ConsumerBusyError,
    CorruptionError,
    DataLossError,
    DirInfo,
    DiskFullError,
    InvalidOffsetError,
    LockTimeoutError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    ReadOnlyError,
    Record,
    ScanIterator,
    Segment,
    StoreLockedError,
    StoreNotFoundError,
    TierError,
    WriterPoisonedError,
    __version__,
    tier_stores,
)

DEFAULTS = MappingProxyType(_native.DEFAULTS)
"""The value each keyword argument of ``CommitLog`` takes when it is not given (read-only); for
a store-wide setting (``STORE_SETTINGS``), only where the store records none."""

STORE_SETTINGS: tuple[str, ...] = _native.STORE_SETTINGS
"""The ``CommitLog`` options a store keeps for all its opens: one not given takes the store's
recorded value; a writer alone on the store that gives another value changes it, with a WARNING
on the ``rmqlog`` logger; with other writers open, it is refused. The others are each open's own
(docs/options.md)."""

PRESETS = MappingProxyType({k: MappingProxyType(v) for k, v in _native.PRESETS.items()})
"""For each ``CommitLog(preset=...)`` name, the value each keyword argument takes with it when it
is not given (read-only). ``"broker"``: RocketMQ broker's retention and 1 GiB segments."""

# Deliver the Rust side's queued log records before the interpreter shuts down.
atexit.register(_native._shutdown_logging)

__all__ = [
    "DEFAULTS",
    "FEATURES",
    "HEADER_LEN",
    "MAX_ID_LEN",
    "MAX_KEY_LEN",
    "MAX_OFFSET",
    "PRESETS",
    "SPLIT_EVERY",
    "STORE_SETTINGS",
    "Appended",
    "BatchScan",
    "ClaimLostError",
    "ClosedError",
    "CommitLog",
    "CommitLogError",
    "ConfigurationError",
    "Consumer",
    "ConsumerBusyError",
    "CorruptionError",
    "DataLossError",
    "DirInfo",
    "DiskFullError",
    "InvalidOffsetError",
    "LockTimeoutError",
    "MessageTooLargeError",
    "OffsetOutOfRangeError",
    "ReadOnlyError",
    "Record",
    "ScanIterator",
    "Segment",
    "StoreLockedError",
    "StoreNotFoundError",
    "TierError",
    "WriterPoisonedError",
    "__version__",
    "dead_letter_origin",
    "scan_batches",
    "tier_stores",
    "to_arrow",
]
