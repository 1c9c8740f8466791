"""The release wheel: built by maturin, abi3 and manylinux/linux tagged, installed in a fresh venv
and used there with no Rust or maturin on PATH.

Builds in release mode (fast when ``target/`` is warm from ``pip install -e``, a few minutes
cold); the fresh venv gets its one dependency, tqdm, from the package index.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

import rmqlog

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
BUILD_TOOLS = ("cargo", "rustc", "maturin")
WHEEL_RE = re.compile(
    r"^rmqlog-(?P<version>[^-]+)-cp311-abi3-(?P<platform>(manylinux|linux)[\w.]*)\.whl$"
)


def _build_command(out: Path) -> list[str]:
    """maturin from the venv, else from PATH; else pip's PEP 517 build (fetches maturin)."""
    for candidate in (BIN / "maturin", shutil.which("maturin")):
        if candidate and Path(candidate).is_file():
            return [str(candidate), "build", "--release", "--out", str(out)]
    return [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(out), str(ROOT)]


def _bare_path(venv_bin: Path) -> str:
    """The venv's bin, /usr/bin and /bin, less any of them that holds a Rust or maturin tool."""
    keep = [str(venv_bin)]
    for d in ("/usr/bin", "/bin"):
        if not any(os.path.exists(os.path.join(d, t)) for t in BUILD_TOOLS):
            keep.append(d)
    return os.pathsep.join(keep)


def _run(cmd, env, cwd, timeout=300):
    proc = subprocess.run(
        [str(c) for c in cmd],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheelhouse")
    cmd = _build_command(out)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
    assert proc.returncode == 0, f"{cmd} failed:\n{tail}"
    wheels = sorted(out.glob("*.whl"))
    assert len(wheels) == 1, (wheels, tail)
    return wheels[0]


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A fresh venv with the wheel and tqdm installed: (venv dir, env with a bare PATH)."""
    root = tmp_path_factory.mktemp("fresh")
    venv_dir = root / "venv"
    _run([sys.executable, "-m", "venv", venv_dir], env=os.environ, cwd=root)
    venv_bin = venv_dir / "bin"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
    }
    env["PATH"] = _bare_path(venv_bin)
    py = venv_bin / "python"
    _run([py, "-m", "pip", "install", "-q", "--no-deps", wheel], env=env, cwd=root)
    _run([py, "-m", "pip", "install", "-q", "tqdm>=4"], env=env, cwd=root)
    return venv_dir, env


def test_wheel_is_abi3_and_linux(wheel):
    m = WHEEL_RE.match(wheel.name)
    assert m, wheel.name
    assert m["version"] == rmqlog.__version__
    assert m["platform"].endswith("x86_64") or m["platform"].endswith("aarch64"), wheel.name


def test_wheel_contents(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        dist = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = z.read(f"{dist}/METADATA").decode()
        entry_points = z.read(f"{dist}/entry_points.txt").decode()
        wheel_info = z.read(f"{dist}/WHEEL").decode()
    for name in (
        "__init__.py",
        "__main__.py",
        "cli/__init__.py",
        "spark/__init__.py",
        "demo.py",
        "_native.pyi",
        "py.typed",
    ):
        assert f"rmqlog/{name}" in names
    assert [n for n in names if n.endswith(".so")] == ["rmqlog/_native.abi3.so"]
    assert re.search(r"^Requires-Dist: tqdm>=4$", metadata, re.M), metadata
    assert re.search(r"^Requires-Python: >=3\.11$", metadata, re.M)
    assert re.search(r"^\[console_scripts\]\s*\nrmqlog\s*=\s*rmqlog\.cli:main$", entry_points, re.M)
    assert re.search(r"^Root-Is-Purelib: false$", wheel_info, re.M)
    assert re.search(r"^Tag: cp311-abi3-", wheel_info, re.M)


def test_no_build_tools_on_path(venv):
    _, env = venv
    for tool in BUILD_TOOLS:
        assert shutil.which(tool, path=env["PATH"]) is None, tool
        with pytest.raises(FileNotFoundError):
            subprocess.run([tool, "--version"], env=env, capture_output=True, check=False)


ROUND_TRIP = textwrap.dedent(
    """
    import json, os, sys
    import rmqlog, rmqlog._native
    from rmqlog import CommitLog, HEADER_LEN

    root = sys.argv[1]
    dirs = [os.path.join(root, "d0"), os.path.join(root, "d1")]
    bodies = [b"hello", b"", bytes(range(256)) * 10] + [b"rec-%d" % i for i in range(200)]
    with CommitLog(dirs, segment_size=4096, flush="sync") as log:
        offs = [log.append(b) for b in bodies[:3]] + log.append_batch(bodies[3:])
        same = all(bytes(log.read(o)) == b for o, b in zip(offs, bodies))
    with CommitLog(dirs, read_only=True) as log:
        scanned = [(o, bytes(b)) for o, b in log.scan()]
        bad = log.verify()
        segments = len(log.segments())
    print(json.dumps({
        "file": rmqlog.__file__,
        "native": rmqlog._native.__file__,
        "version": rmqlog.__version__,
        "header_len": HEADER_LEN,
        "read_back": same,
        "scan_ok": scanned == list(zip(offs, bodies)),
        "verify": bad,
        "segments": segments,
    }))
    """
)


def test_round_trip_in_fresh_venv(venv, tmp_path):
    venv_dir, env = venv
    proc = _run([venv_dir / "bin" / "python", "-c", ROUND_TRIP, tmp_path], env=env, cwd=tmp_path)
    got = json.loads(proc.stdout)
    site = str(venv_dir.resolve())
    assert Path(got["file"]).resolve().is_relative_to(site), got["file"]  # not the source tree
    assert Path(got["native"]).resolve().is_relative_to(site), got["native"]
    assert Path(got["native"]).name == "_native.abi3.so"
    assert got["version"] == rmqlog.__version__
    assert got["header_len"] == rmqlog.HEADER_LEN
    assert got["read_back"] is True and got["scan_ok"] is True
    assert got["verify"] == []
    assert got["segments"] >= 2  # the batch rolled over 4 KiB segments in both directories


def test_console_script_in_fresh_venv(venv, tmp_path):
    venv_dir, env = venv
    script = venv_dir / "bin" / "rmqlog"
    assert shutil.which("rmqlog", path=env["PATH"]) == str(script)
    proc = _run(["rmqlog", "--help"], env=env, cwd=tmp_path)
    assert proc.stdout.startswith("usage: rmqlog ")
    for sub in ("demo", "stat", "dump", "verify", "bench"):
        assert sub in proc.stdout
    proc = _run([venv_dir / "bin" / "python", "-m", "rmqlog", "--version"], env=env, cwd=tmp_path)
    assert proc.stdout.strip() == f"rmqlog {rmqlog.__version__}"
    # a real command through the installed script (it imports tqdm, the one dependency)
    proc = _run(["rmqlog", "demo", "--dir", tmp_path / "demo", "--records", 2000], env, tmp_path)
    assert "checksums match" in proc.stdout
    store = os.pathsep.join(str(tmp_path / "demo" / f"disk{i}" / "store") for i in range(3))
    proc = _run(["rmqlog", "verify", store], env=env, cwd=tmp_path)
    assert re.fullmatch(r"OK: \d+ bytes, \d+ segments verified\n", proc.stdout)
    proc = _run([venv_dir / "bin" / "python", "-m", "pip", "check"], env=env, cwd=tmp_path)
    assert "No broken requirements" in proc.stdout
