"""Where a read's log is: local directories, a tier URL, or directories plus their tier's URL;
and opening it read-only, as the driver and every task do.

A URL (``s3://bucket/prefix``, ``file:///dir``) alone is the remote part of a store: its sealed,
uploaded segments, from the tier's manifest; nothing local is needed, so executors need no shared
filesystem. Directories read the whole store, local and remote segments as one offset space: the
remote ones through ``tier_url`` when given, else through the URL the store recorded.
"""

import re
from dataclasses import dataclass
from typing import Any

from rmqlog import CommitLog, ConfigurationError

TIER_PREFIX = "tier."  # option tier.<key>: one setting of the object store (tier_options[key])
_URL = re.compile(r"[A-Za-z0-9]+://")  # as the core's tier::is_url: an alphanumeric scheme


def is_url(text: str) -> bool:
    """Whether ``text`` is a tier URL rather than a directory."""
    return _URL.match(text) is not None


@dataclass(frozen=True)
class Store:
    """A store as a read names it (plain data: picklable, hashable)."""

    paths: tuple[str, ...]
    tier_url: str | None = None  # the tier of the directories in ``paths``
    tier_options: tuple[tuple[str, str], ...] = ()  # object store settings, sorted by key
    tier_cache_dir: str | None = None

    def open(self) -> CommitLog:
        """The log, read-only (no lock, nothing written). A setting the object store refuses
        raises ValueError naming its option ``tier.<key>``."""
        kw: dict[str, Any] = {}
        if self.tier_url is not None:
            kw["tier_url"] = self.tier_url
        if self.tier_options:
            kw["tier_options"] = dict(self.tier_options)
        if self.tier_cache_dir is not None:
            kw["tier_cache_dir"] = self.tier_cache_dir
        try:
            return CommitLog(list(self.paths), read_only=True, **kw)
        except ConfigurationError as e:
            # The core quotes the key it refuses ('key "endpint" is not an S3 option') or the
            # value it cannot parse ('failed to parse "maybe" as boolean').
            text = str(e)
            named = [k for k, _ in self.tier_options if f'"{k}"' in text]
            named += [k for k, v in self.tier_options if v and f'"{v}"' in text]
            if named:
                raise ValueError(
                    f"rmqlog: option {TIER_PREFIX}{named[0]} was refused: {e}"
                ) from None
            raise
