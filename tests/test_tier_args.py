"""Bad tier options and tier URLs: refused with an error naming what was wrong and what is
accepted, before anything is written; a tier prefix that holds another store's log is refused by
the tier thread, which then uploads nothing."""

from __future__ import annotations

import pytest
from _tier import SEGMENT, append_records, manifest, objects, status_when, tier_kwargs, uploaded

from rmqlog import CommitLog, ConfigurationError, StoreNotFoundError


def refused(tmp_path, exc, words, **kwargs):
    """CommitLog(tmp_path / "store", **kwargs) raises ``exc`` with every word of ``words`` in
    its message, and leaves nothing behind."""
    target = tmp_path / "store"
    with pytest.raises(exc) as info:
        CommitLog(target, segment_size=SEGMENT, **kwargs)
    for w in words:
        assert w in str(info.value), f"{w!r} not in {info.value}"
    assert not target.exists(), f"{target} was created: {sorted(target.rglob('*'))}"
    return info.value


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("ftp://x", ["ftp", "s3://", "file://"]),
        ("s3://", ["bucket", "s3://bucket/prefix"]),
        ("s3:///prefix", ["bucket", "s3://bucket/prefix"]),
        ("not a url", ["not a url", "s3://bucket/prefix", "file:///directory"]),
        ("", ["tier_url", "s3://bucket/prefix"]),
        ("file://host/dir", ["file://host/dir", "directory"]),
    ],
)
def test_bad_tier_url(tmp_path, url, words):
    e = refused(tmp_path, (ValueError, ConfigurationError), ["tier_url", *words], tier_url=url)
    assert isinstance(e, ValueError)


@pytest.mark.parametrize(
    ("kwargs", "exc", "words"),
    [
        ({"tier_options": ["endpoint"]}, TypeError, ["tier_options", "dict", "list"]),
        ({"tier_options": "endpoint=x"}, TypeError, ["tier_options", "dict", "str"]),
        ({"tier_options": {"endpoint": 1}}, TypeError, ["tier_options", "endpoint", "int"]),
        ({"tier_options": {1: "x"}}, TypeError, ["tier_options", "int"]),
        ({"tier_options": {"endpont": "x"}}, ConfigurationError, ["endpont", "endpoint"]),
        ({"tier_after": -1}, ValueError, ["tier_after", "non-negative", "-1"]),
        ({"tier_after": float("nan")}, ValueError, ["tier_after", "non-negative"]),
        ({"tier_after": "1"}, TypeError, ["tier_after", "str"]),
        ({"local_retention_hours": -0.5}, ValueError, ["local_retention_hours", "non-negative"]),
        # Past what a duration holds (issue 33: a PanicException at open).
        ({"local_retention_hours": 1e16}, ValueError, ["local_retention_hours", "at most"]),
        ({"tier_after": 1e20}, ValueError, ["tier_after", "at most"]),
        ({"local_retention_bytes": -1}, ValueError, ["local_retention_bytes"]),
        ({"tier_cache_bytes": 0}, ValueError, ["tier_cache_bytes", "at least 1"]),
    ],
)
def test_bad_tier_options(tmp_path, kwargs, exc, words):
    refused(tmp_path, exc, words, tier_url="s3://bucket/log", **kwargs)


def test_file_tier_takes_no_options(tmp_path):
    refused(
        tmp_path,
        ConfigurationError,
        ["endpoint", "file://", "takes none"],
        tier_url=(tmp_path / "tier").as_uri(),
        tier_options={"endpoint": "http://127.0.0.1:1"},
    )
    assert not (tmp_path / "tier").exists()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tier_options": {"region": "x"}},
        {"tier_after": 1},
        {"local_retention_hours": 1},
        {"local_retention_bytes": 1},
        {"tier_cache_bytes": 1},
        {"tier_cache_dir": "/tmp"},
    ],
)
def test_tier_option_without_tier_url(tmp_path, kwargs):
    (name,) = kwargs
    refused(tmp_path, ValueError, [name, "tier_url"], **kwargs)


def test_tier_url_opens_read_only_only(tier):
    with pytest.raises(ConfigurationError, match="read_only=True") as info:
        CommitLog(tier.url, tier_options=tier.options or None)
    assert tier.url in str(info.value)
    assert tier.keys() == []


def test_tier_url_without_manifest(tmp_path, tier):
    with pytest.raises(StoreNotFoundError, match="manifest") as info:
        CommitLog(tier.url, read_only=True, tier_options=tier.options or None)
    assert tier.url in str(info.value)
    assert tier.keys() == []
    if tier.kind == "file":
        missing = (tmp_path / "nowhere").as_uri()
        with pytest.raises(StoreNotFoundError, match="does not exist"):
            CommitLog(missing, read_only=True)
        assert not (tmp_path / "nowhere").exists()


def test_tier_url_given_twice_differently(tmp_path, tier):
    other = (tmp_path / "other").as_uri()
    with pytest.raises(ConfigurationError) as info:
        CommitLog(tier.url, read_only=True, tier_url=other)
    assert tier.url in str(info.value) and other in str(info.value)


def test_another_stores_prefix_is_refused(make_log, tmp_path, tier):
    first = make_log(tmp_path / "a", segment_size=SEGMENT, **tier_kwargs(tier))
    append_records(first, 200)
    uploaded(first)
    first.close()
    before = manifest(tier)
    names = objects(tier)
    second = make_log(tmp_path / "b", segment_size=SEGMENT, **tier_kwargs(tier))
    append_records(second, 200)
    st = status_when(second, lambda s: s["upload_errors"] >= 3, "three passes refused")
    assert "another store" in st["last_error"] and tier.url in st["last_error"]
    assert st["uploads"] == 0 and st["pending_segments"] >= 3
    assert manifest(tier) == before and objects(tier) == names
    assert second.verify() == []
    assert bytes(second.read(second.append(b"still writable"))) == b"still writable"


# Every way object_store finds S3 credentials besides tier_options (its environment variables).
CREDENTIAL_VARS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_SKIP_SIGNATURE",
)


def test_an_s3_open_without_credentials_says_how_to_give_them(s3_bucket, tmp_path, monkeypatch):
    for var in CREDENTIAL_VARS:
        monkeypatch.delenv(var, raising=False)
    kwargs = tier_kwargs(s3_bucket)
    with CommitLog(tmp_path / "store", segment_size=SEGMENT, tier_after=0, **kwargs) as log:
        append_records(log, 3 * SEGMENT // 1000)
        uploaded(log)
    no_keys = {k: v for k, v in s3_bucket.options.items() if "key" not in k}
    # The instance metadata service, where object_store looks then, is a closed port here.
    no_keys["metadata_endpoint"] = "http://127.0.0.1:9"
    with pytest.raises(OSError) as info:
        CommitLog(s3_bucket.url, read_only=True, tier_options=no_keys)
    msg = str(info.value)
    for words in ("No S3 credentials were given", "access_key_id", "AWS_ACCESS_KEY_ID", "endpoint"):
        assert words in msg, msg
    # With the keys, the same open reads the log: the hint was about them alone.
    with CommitLog(s3_bucket.url, read_only=True, tier_options=s3_bucket.options) as remote:
        assert remote.max_offset >= 2 * SEGMENT
    # Keys given, the same failure of another kind carries no hint.
    s3_bucket.server.stop()
    with pytest.raises(OSError) as info:
        CommitLog(s3_bucket.url, read_only=True, tier_options=s3_bucket.options)
    assert "No S3 credentials" not in str(info.value)
