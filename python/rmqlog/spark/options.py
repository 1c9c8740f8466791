"""The data source's options: parsed and validated into an :class:`Options` (plain, picklable)."""

import difflib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rmqlog._sizes import parse_size
from rmqlog.spark.store import TIER_PREFIX, Store, is_url

DEFAULT_BATCH_BYTES = 64 << 20
DEFAULT_BATCH_RECORDS = 65536
_MAX_BATCH_BYTES = (1 << 31) - 1  # an Arrow binary column (int32 offsets)
_MIN_PARTITION_BYTES = 4096  # smaller splits only multiply tasks


@dataclass(frozen=True)
class Options:
    """Parsed, validated options: plain data, picklable."""

    paths: tuple[str, ...]
    start_offset: int | str | None = None  # int, "earliest", "latest"
    end_offset: int | None = None
    start_timestamp: int | None = None
    end_timestamp: int | None = None
    # Spark's own spark.sql.files.maxPartitionBytes: a 1 GiB segment is read by 8 tasks.
    max_partition_bytes: int | None = 128 << 20
    batch_bytes: int = DEFAULT_BATCH_BYTES
    batch_records: int = DEFAULT_BATCH_RECORDS
    fail_on_data_loss: bool = True
    max_bytes_per_trigger: int | None = None
    max_records_per_trigger: int | None = None
    # How long a trigger that finds no new record waits for one (woken by the append).
    wait_ms: int = 100
    tier_url: str | None = None
    tier_options: tuple[tuple[str, str], ...] = ()  # the tier.<key> options, sorted
    tier_cache_dir: str | None = None
    # Filters prune the plan (docs/spark.md: PySpark 4.1-4.3 reuse a pruned plan for the next
    # query of the same DataFrame, so this is opt-in).
    pushdown: bool = False

    @property
    def store(self) -> Store:
        return Store(self.paths, self.tier_url, self.tier_options, self.tier_cache_dir)


_BATCH_ONLY = ("end_offset", "end_timestamp", "pushdown")
_STREAM_ONLY = ("max_bytes_per_trigger", "max_records_per_trigger", "wait_ms")
_KNOWN = (
    "path",
    "paths",
    "start_offset",
    "end_offset",
    "start_timestamp",
    "end_timestamp",
    "max_partition_bytes",
    "batch_bytes",
    "batch_records",
    "fail_on_data_loss",
    "pushdown",
    *_STREAM_ONLY,
    "tier_url",
    "tier_cache_dir",
)
_HINTS = {"tier_options": f"give each setting as its own option {TIER_PREFIX}<key>"}


def _bad(name: str, value: Any, accepted: str) -> ValueError:
    return ValueError(f"rmqlog: option {name}={value!r} is not valid: expected {accepted}")


_INT_MAX = (1 << 63) - 1  # the JVM reader's (a Java long), and the core's offsets and counts


def _int(name: str, value: str, minimum: int = 0) -> int:
    try:
        n = int(str(value).strip().replace("_", ""))
    except ValueError:
        raise _bad(name, value, f"an integer >= {minimum}") from None
    if n < minimum:
        raise _bad(name, value, f"an integer >= {minimum}")
    if n > _INT_MAX:
        raise _bad(name, value, f"an integer >= {minimum} and at most 2^63-1")
    return n


def _size(name: str, value: str, maximum: int = _INT_MAX, minimum: int = 1) -> int:
    """A byte count in the syntax of :mod:`rmqlog._sizes` (the CLI's too): ``1048576``, ``512k``,
    ``64m``, ``64MiB``, ``1g`` (binary units)."""
    try:
        return parse_size(value, minimum=minimum, maximum=maximum)
    except ValueError as e:
        raise ValueError(f"rmqlog: option {name}={value!r} is not valid: {e}") from None


def _bool(name: str, value: str) -> bool:
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise _bad(name, value, '"true" or "false"')


_MIXED = (
    "a tier URL and directories together; give the store's directories in load() and its "
    "tier's URL in option tier_url, or the URL alone to read the remote segments only"
)


def _split(text: str) -> list[str]:
    """Directories joined by ``os.pathsep``, or one tier URL (never split: ``s3://``)."""
    if is_url(text):
        return [text]
    if "://" in text:
        raise ValueError(f"rmqlog: paths {text!r} mix {_MIXED}")
    return text.split(os.pathsep)


def _parse_paths(options: Mapping[str, str]) -> tuple[str, ...]:
    given = [options[k] for k in ("path", "paths") if options.get(k) not in (None, "")]
    if not given:
        raise ValueError(
            "rmqlog: no store given: use .load('/d0/store:/d1/store'), .load('s3://bucket/prefix') "
            "or .option('paths', '/d0/store:/d1/store')"
        )
    found: list[tuple[str, ...]] = []
    for raw in given:
        text = str(raw).strip()
        if text.startswith("["):  # DataFrameReader.load([...]) passes a JSON list
            try:
                items = json.loads(text)
            except ValueError:
                raise _bad("paths", raw, "directories joined by os.pathsep") from None
            parts = [p for item in items for p in _split(str(item).strip())]
        else:
            parts = _split(text)
        parts = [p.strip() for p in parts if p.strip()]
        if not parts:
            raise _bad("paths", raw, f"directories joined by {os.pathsep!r}, or a tier URL")
        urls = [p for p in parts if is_url(p)]
        if urls and len(urls) < len(parts):  # all URLs: a fleet of stores
            raise ValueError(f"rmqlog: paths {raw!r} mix {_MIXED}")
        found.append(tuple(parts))
    if len(found) == 2 and found[0] != found[1]:
        raise ValueError(
            f"rmqlog: both a load() path {given[0]!r} and option paths={given[1]!r} were given; "
            "use one of them"
        )
    return found[0]


def _tier(keys: Mapping[str, str], paths: tuple[str, ...]) -> dict[str, Any]:
    """The tier options: ``tier_url`` (with directories only), ``tier.<key>`` settings and
    ``tier_cache_dir``, which need a URL (in load() or tier_url) as ``CommitLog``'s do."""
    kw: dict[str, Any] = {}
    settings = []
    for k in sorted(keys):
        if k.startswith(TIER_PREFIX):
            name = k[len(TIER_PREFIX) :].strip()
            if not name:
                raise _bad(k, keys[k], f"{TIER_PREFIX}<key>, a setting of the object store")
            settings.append((name, str(keys[k])))
    if settings:
        kw["tier_options"] = tuple(settings)
    url = keys.get("tier_url")
    if url is not None:
        url = str(url).strip()
        if not is_url(url):
            raise _bad("tier_url", keys["tier_url"], "a URL: s3://bucket/prefix or file:///dir")
        if is_url(paths[0]):
            raise ValueError(
                f"rmqlog: option tier_url={url!r} names the tier of a store's directories, but "
                f"load() was given the URL {paths[0]!r} itself; give the directories in load(), "
                "or the URL alone"
            )
        kw["tier_url"] = url
    if "tier_cache_dir" in keys:
        cache = str(keys["tier_cache_dir"]).strip()
        if not os.path.isabs(cache):
            raise _bad("tier_cache_dir", keys["tier_cache_dir"], "an absolute directory")
        kw["tier_cache_dir"] = cache
    if (settings or "tier_cache_dir" in kw) and url is None and not is_url(paths[0]):
        first = f"{TIER_PREFIX}{settings[0][0]}" if settings else "tier_cache_dir"
        raise ValueError(
            f"rmqlog: option {first} configures a tier: give its URL too, in load() "
            "('s3://bucket/prefix') or in option tier_url with the store's directories (a store "
            "remembers its tier's URL, not its settings)"
        )
    return kw


def _unknown_options(unknown: list[str]) -> str:
    """The error for options no rmqlog source knows, with the closest known name of each."""
    named = []
    for k in unknown:
        if k in _HINTS:
            named.append(f"{k} ({_HINTS[k]})")
            continue
        close = difflib.get_close_matches(k.replace("-", "_"), _KNOWN, n=1, cutoff=0.75)
        named.append(f"{k} (did you mean {close[0]}?)" if close else k)
    what = "option" if len(unknown) == 1 else "options"
    known = ", ".join((*_KNOWN, f"{TIER_PREFIX}<key>"))
    return f"rmqlog: unknown {what} {', '.join(named)}; accepted options: {known}"


def parse_options(options: Mapping[str, str], mode: str | None = None) -> Options:
    """Validates data source options; ``mode`` is ``"batch"``, ``"stream"`` or None (both).

    Raises ValueError naming the option and what it accepts.
    """
    keys = {str(k).lower(): v for k, v in options.items()}
    unknown = sorted(k for k in keys if k not in _KNOWN and not k.startswith(TIER_PREFIX))
    if unknown:
        raise ValueError(_unknown_options(unknown))
    if mode == "stream":
        for k in _BATCH_ONLY:
            if k in keys:
                why = "a stream has no end" if k.startswith("end_") else "a stream takes no filter"
                raise ValueError(
                    f"rmqlog: option {k} applies to spark.read only, not to spark.readStream "
                    f"({why})"
                )
    if mode == "batch":
        for k in _STREAM_ONLY:
            if k in keys:
                raise ValueError(f"rmqlog: option {k} applies to spark.readStream only")
    paths = _parse_paths(keys)
    kw: dict[str, Any] = {"paths": paths, **_tier(keys, paths)}
    if "start_offset" in keys:
        v = str(keys["start_offset"]).strip().lower()
        if v in ("earliest", "latest"):
            kw["start_offset"] = v
        else:
            try:
                kw["start_offset"] = _int("start_offset", v)
            except ValueError:
                raise _bad(
                    "start_offset", keys["start_offset"], 'an offset >= 0, "earliest" or "latest"'
                ) from None
    if "end_offset" in keys:
        v = str(keys["end_offset"]).strip().lower()
        try:
            kw["end_offset"] = None if v == "latest" else _int("end_offset", v)
        except ValueError:
            raise _bad("end_offset", keys["end_offset"], 'an offset >= 0 or "latest"') from None
    for k in ("start_timestamp", "end_timestamp"):
        if k in keys:
            try:
                kw[k] = _int(k, keys[k])
            except ValueError:
                raise _bad(k, keys[k], "milliseconds since the epoch, an integer >= 0") from None
    if "max_partition_bytes" in keys:
        kw["max_partition_bytes"] = _size(
            "max_partition_bytes", keys["max_partition_bytes"], minimum=_MIN_PARTITION_BYTES
        )
    if "batch_bytes" in keys:
        kw["batch_bytes"] = _size("batch_bytes", keys["batch_bytes"], _MAX_BATCH_BYTES)
    if "batch_records" in keys:
        kw["batch_records"] = _int("batch_records", keys["batch_records"], 1)
    if "fail_on_data_loss" in keys:
        kw["fail_on_data_loss"] = _bool("fail_on_data_loss", keys["fail_on_data_loss"])
    if "pushdown" in keys:
        kw["pushdown"] = _bool("pushdown", keys["pushdown"])
    if "max_bytes_per_trigger" in keys:
        kw["max_bytes_per_trigger"] = _size("max_bytes_per_trigger", keys["max_bytes_per_trigger"])
    if "max_records_per_trigger" in keys:
        kw["max_records_per_trigger"] = _int(
            "max_records_per_trigger", keys["max_records_per_trigger"], 1
        )
    if "wait_ms" in keys:
        try:
            kw["wait_ms"] = _int("wait_ms", keys["wait_ms"])
        except ValueError:
            raise _bad("wait_ms", keys["wait_ms"], "milliseconds, an integer >= 0") from None
        if kw["wait_ms"] > 60_000:
            raise _bad("wait_ms", keys["wait_ms"], "milliseconds, an integer in [0, 60000]")
    opts = Options(**kw)
    so, eo = opts.start_offset, opts.end_offset
    if isinstance(so, int) and eo is not None and so > eo:
        raise ValueError(f"rmqlog: start_offset={so} is after end_offset={eo}")
    st, et = opts.start_timestamp, opts.end_timestamp
    if st is not None and et is not None and st > et:
        raise ValueError(f"rmqlog: start_timestamp={st} is after end_timestamp={et}")
    return opts
