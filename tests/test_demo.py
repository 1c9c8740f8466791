"""What `make demo` prints around the numbers: one line saying the three directories share a disk,
and at the end how to put `rmqlog` on PATH. (tests/test_cli.py checks what the demo writes.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _demo(path: str, *args: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = path
    proc = subprocess.run(
        [sys.executable, "-m", "rmqlog", "demo", "--records", "1000", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_one_disk_is_said_once_before_the_numbers(tmp_path):
    lines = _demo(os.defpath, "--dir", str(tmp_path))
    said = [i for i, line in enumerate(lines) if "share one disk here, as a demonstration" in line]
    assert said == [1], lines
    assert lines[0].startswith("rmqlog demo: 1,000 records")


def test_last_lines_tell_how_to_get_rmqlog_on_path(tmp_path):
    if not (Path(sys.prefix) / "bin" / "activate").exists():
        pytest.skip("not running in a venv")
    venv = os.path.relpath(sys.prefix, ROOT)
    if venv.startswith(".."):
        venv = sys.prefix
    # PATH without the venv, as after `make demo`: the hint says how to activate it
    lines = _demo(os.defpath, "--dir", str(tmp_path))
    assert lines[-2] == (
        f"next: source {venv}/bin/activate  (puts rmqlog on PATH; or run {venv}/bin/rmqlog)"
    )
    assert lines[-1].split() == ["rmqlog", "stat", str(tmp_path / "disk0" / "store")]
    # with the venv's bin on PATH, rmqlog is found: the hint is the next command to try
    lines = _demo(os.pathsep.join([str(Path(sys.executable).parent), os.defpath]))
    assert lines[-2] == "next: rmqlog --help"
    assert lines[-1].split()[:2] == ["rmqlog", "demo"]
