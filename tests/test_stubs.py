"""The type stubs of the native module agree with the compiled extension (mypy's stubtest)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import rmqlog._native

ALLOWLIST = Path(__file__).with_name("stubtest-allowlist.txt")
STUB = Path(rmqlog._native.__file__).with_name("_native.pyi")


def test_stub_file_is_shipped_next_to_the_extension():
    assert STUB.is_file()
    assert STUB.with_name("py.typed").is_file()


def test_stubtest(tmp_path):
    """``python -m mypy.stubtest rmqlog._native`` exits 0 (see stubtest-allowlist.txt)."""
    cmd = [sys.executable, "-m", "mypy.stubtest", "rmqlog._native", "--allowlist", str(ALLOWLIST)]
    if sys.version_info >= (3, 12):  # runtime __buffer__ exists there: the entry goes unused
        cmd.append("--ignore-unused-allowlist")
    env = {**os.environ, "MYPY_CACHE_DIR": str(tmp_path / "mypy-cache")}
    proc = subprocess.run(
        cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300, check=False
    )
    report = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 0, f"stubtest found mismatches in {STUB}:\n{report}"
    assert "Success: no issues found" in proc.stdout
