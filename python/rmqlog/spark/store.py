"""Where a read's log is: local directories, a tier URL, or directories plus their tier's URL;
and opening it read-only, as the driver and every task do.

A URL (``s3://bucket/prefix``, ``file:///dir``) alone is the remote part of a store: its sealed,
uploaded segments, from the tier's manifest; nothing local is needed, so executors need no shared
filesystem. Directories read the whole store, local and remote segments as one offset space: the
remote ones through ``tier_url`` when given, else through the URL the store recorded.

A fleet is many stores read as one table (``rmqlog._fleet``): a list of tier URLs, or a URL under
which stores publish (a prefix, or a glob of their names).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rmqlog import CommitLog, ConfigurationError, StoreNotFoundError
from rmqlog._fleet import fleet_urls
from rmqlog._fleet import is_url as is_url

TIER_PREFIX = "tier."  # option tier.<key>: one setting of the object store (tier_options[key])


@dataclass(frozen=True)
class Store:
    """A store as a read names it (plain data: picklable, hashable)."""

    paths: tuple[str, ...]
    tier_url: str | None = None  # the tier of the directories in ``paths``
    tier_options: tuple[tuple[str, str], ...] = ()  # object store settings, sorted by key
    tier_cache_dir: str | None = None

    def at(self, url: str) -> "Store":
        """The store of a fleet that publishes at ``url``, with this read's tier settings."""
        return Store((url,), None, self.tier_options, self.tier_cache_dir)

    def fleet(
        self, on_gone: Callable[[str, StoreNotFoundError], None] | None = None
    ) -> tuple[str, ...] | None:
        """The tier URLs of the stores when ``paths`` name a fleet, else None (one store). Lists
        the object store. ``on_gone``: what a listed URL where no store publishes gets (see
        ``fleet_urls``)."""
        if not is_url(self.paths[0]):
            return None
        source = self.paths[0] if len(self.paths) == 1 else list(self.paths)
        try:
            urls = fleet_urls(source, dict(self.tier_options) or None, on_gone)
        except ConfigurationError as e:
            raise self._named(e) from None
        return None if urls is None else tuple(urls)

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
            raise self._named(e) from None

    def _named(self, e: ConfigurationError) -> Exception:
        """A refused tier setting as the ValueError naming its option ``tier.<key>``: the core
        quotes the key it refuses ('key "endpint" is not an S3 option') or the value it cannot
        parse ('failed to parse "maybe" as boolean'). Other errors unchanged."""
        text = str(e)
        named = [k for k, _ in self.tier_options if f'"{k}"' in text]
        named += [k for k, v in self.tier_options if v and f'"{v}"' in text]
        if named:
            return ValueError(f"rmqlog: option {TIER_PREFIX}{named[0]} was refused: {e}")
        return e
