"""Option defaults are written once, in Rust (``Options::default()``): the bindings and the stub
read them from there, and ``rmqlog.DEFAULTS`` shows them."""

import ast
import inspect
import os
import time
from pathlib import Path

import pytest

import rmqlog
from rmqlog import DEFAULTS, PRESETS, CommitLog

STUB = Path(rmqlog._native.__file__).with_name("_native.pyi")


def _keyword_options() -> list[str]:
    sig = inspect.signature(CommitLog)
    return [p.name for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY]


def test_defaults_name_every_option_and_no_signature_repeats_them():
    assert sorted(DEFAULTS) == sorted(_keyword_options())
    # The runtime signature shows no value of its own for any option.
    sig = inspect.signature(CommitLog)
    assert {p.default for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY} == {...}


def test_the_stub_repeats_no_default():
    tree = ast.parse(STUB.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "CommitLog")
    new = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__new__")
    defaults = [d for d in new.args.kw_defaults if d is not None]
    assert len(defaults) == len(DEFAULTS)
    assert all(isinstance(d, ast.Constant) and d.value is ... for d in defaults)


def test_a_log_opened_without_options_uses_the_defaults(tmp_path):
    with CommitLog(tmp_path / "d", segment_size=4096) as log:
        stats = log.stats()
        assert stats["flush"] == DEFAULTS["flush"]
        assert stats["strategy"] == DEFAULTS["strategy"]
        assert not log.read_only


def test_defaults_are_read_only():
    with pytest.raises(TypeError):
        DEFAULTS["retention_hours"] = 1.0  # type: ignore[index]


@pytest.mark.parametrize(
    ("given", "deleted"),
    [
        ({}, 0),
        ({"retention_hours": None}, 0),
        ({"preset": "broker"}, 3),
        ({"preset": "broker", "retention_hours": None}, 0),
        ({"retention_hours": 1.0}, 3),
    ],
)
def test_retention_is_off_unless_configured(tmp_path, given, deleted):
    """Not given, ``retention_hours`` is off (``DEFAULTS``): nothing expires however old. The
    broker preset expires segments after 72 hours; an explicit None beats the preset."""
    assert DEFAULTS["retention_hours"] is None
    old = time.time() - (PRESETS["broker"]["retention_hours"] + 1) * 3600
    opts = {"segment_size": 4096, "clean_interval_ms": 0, **given}
    with CommitLog(tmp_path / "d", **opts) as log:
        while len(log.segments()) < 4:
            log.append(b"x" * 500)
        for seg in log.segments():
            os.utime(seg.path, (old, old))
        assert log.clean(force=True) == deleted
        assert log.clean(force=True) == 0


def test_max_offset_is_the_largest_signed_64_bit_integer():
    assert rmqlog.MAX_OFFSET == 2**63 - 1
