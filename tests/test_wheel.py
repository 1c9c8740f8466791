"""The README's "Installing" commands, run as written: `make wheel` builds the portable abi3 wheel
(manylinux2014 x86_64: glibc 2.17 and newer, linked with zig) into dist/, and
`pip install "$(ls dist/*.whl)[spark]"` installs it, with the Spark extra, into a fresh venv, where
rmqlog is used with no Rust or maturin on PATH: the demo runs there.

`make wheel` runs in the repository (it replaces the rmqlog wheels in dist/) with the venv running
these tests; it builds in release mode, and only packs after `make develop` (the same cargo
build), several minutes cold. The fresh venv gets its packages from the package index through
pip's cache.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

import rmqlog

ROOT = Path(__file__).resolve().parents[1]
BUILD_TOOLS = ("cargo", "rustc", "maturin")
WHEEL_RE = re.compile(
    r"^rmqlog-(?P<version>[^-]+)-cp311-abi3-(?P<platform>(manylinux|linux)[\w.]*)\.whl$"
)
# The tags `make wheel` gives (WHEEL_COMPAT in the Makefile): manylinux2014, whose PEP 600 name is
# manylinux_2_17; maturin writes both (a compressed tag set), so pip older than 20.3 takes it too.
PLATFORM_TAGS = {"manylinux_2_17_x86_64", "manylinux2014_x86_64"}
INSTALL = 'pip install "$(ls dist/*.whl)[spark]"'
INSTALL_PLAIN = 'pip install "$(ls dist/*.whl)"'


def _readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, re.M | re.S)
    assert m, f"README.md has no section {title!r}"
    return m.group(1)


def _run(cmd, env, cwd, timeout=600, shell=False):
    proc = subprocess.run(
        cmd if shell else [str(c) for c in cmd],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
        check=False,
        shell=shell,
        executable=shutil.which("bash") if shell else None,
    )
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def _bare_path(venv_bin: Path, tools: Path) -> str:
    """The venv's bin, `tools` (`ls`), /usr/bin and /bin less any of them that holds a Rust or
    maturin tool: what the installed package may use."""
    keep = [str(venv_bin), str(tools)]
    for d in ("/usr/bin", "/bin"):
        if not any(os.path.exists(os.path.join(d, t)) for t in BUILD_TOOLS):
            keep.append(d)
    return os.pathsep.join(keep)


def test_readme_gives_the_commands():
    """The commands these tests run are the README's, character for character."""
    block = _readme_section("Installing")
    lines = [line.split("#")[0].strip() for line in block.splitlines()]
    for cmd in ("make wheel", INSTALL, INSTALL_PLAIN, "rmqlog --help"):
        assert cmd in lines, (cmd, block)


@pytest.fixture(scope="module")
def wheel() -> Path:
    """`make wheel`, with this venv's maturin (installed by the Makefile if it is missing)."""
    cmd = ["make", "--no-print-directory", "wheel", f"VENV={sys.prefix}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
    assert proc.returncode == 0, f"{cmd} failed:\n{tail}"
    wheels = sorted((ROOT / "dist").glob("*.whl"))
    assert len(wheels) == 1, (wheels, tail)  # what `$(ls dist/*.whl)` needs
    return wheels[0]


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A fresh venv, activated as far as a subprocess can tell: (venv dir, env with a bare PATH).
    Nothing is installed in it yet."""
    root = tmp_path_factory.mktemp("fresh")
    venv_dir = root / "venv"
    _run([sys.executable, "-m", "venv", venv_dir], env=os.environ, cwd=root)
    tools = root / "tools"
    tools.mkdir()
    (tools / "ls").symlink_to(shutil.which("ls"))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP") and not k.startswith("MAKE")
    }
    env["VIRTUAL_ENV"] = str(venv_dir)
    env["PATH"] = _bare_path(venv_dir / "bin", tools)
    return venv_dir, env


@pytest.fixture(scope="module")
def installed(venv):
    """The fresh venv after the README's `pip install "$(ls dist/*.whl)[spark]"` in the
    repository, where dist/ is. Before it, a dry run of the install without the extra."""
    venv_dir, env = venv
    plain = _run(f"{INSTALL_PLAIN} --dry-run --quiet --report -", env, ROOT, shell=True)
    _run(INSTALL, env, ROOT, shell=True)
    return venv_dir, env, json.loads(plain.stdout)


def test_wheel_is_abi3_and_linux(wheel):
    m = WHEEL_RE.match(wheel.name)
    assert m, wheel.name
    assert m["version"] == rmqlog.__version__
    assert set(m["platform"].split(".")) == PLATFORM_TAGS, wheel.name


def test_auditwheel_agrees_with_the_tag(wheel):
    """`auditwheel show` reads the extension's ELF (the glibc symbol versions it needs, the
    libraries it links) and names the most portable tag it qualifies for: manylinux_2_17."""
    if importlib.util.find_spec("auditwheel") is None:
        pytest.skip("auditwheel is not installed (it is in the `test` extra)")
    proc = _run([sys.executable, "-m", "auditwheel", "show", wheel], env=os.environ, cwd=ROOT)
    text = " ".join(proc.stdout.split())
    assert 'consistent with the following platform tag: "manylinux_2_17_x86_64"' in text, text
    # the libraries it needs are all on manylinux2014's list (libc, libm, libgcc_s, ld-linux...)
    assert "system-provided shared libraries" in text, text


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
    # The JVM reader: its jar, with the JNI library inside (docs/spark.md).
    assert [n for n in names if n.endswith(".jar")] == ["rmqlog/jvm/rmqlog-spark.jar"]
    with zipfile.ZipFile(wheel) as z, z.open("rmqlog/jvm/rmqlog-spark.jar") as jar:
        inner = zipfile.ZipFile(io.BytesIO(jar.read())).namelist()
    assert "io/rmqlog/spark/native/linux-x86_64/librmqlog_jvm.so" in inner, inner
    assert "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister" in inner
    assert re.search(r"^Requires-Dist: tqdm>=4$", metadata, re.M), metadata
    assert re.search(r"^Requires-Dist: pyspark.*; extra == .spark.$", metadata, re.M), metadata
    assert re.search(r"^Requires-Python: >=3\.11$", metadata, re.M)
    assert re.search(r"^\[console_scripts\]\s*\nrmqlog\s*=\s*rmqlog\.cli:main$", entry_points, re.M)
    assert re.search(r"^Root-Is-Purelib: false$", wheel_info, re.M)
    assert re.search(r"^Tag: cp311-abi3-", wheel_info, re.M)


def test_the_jni_library_needs_no_newer_glibc_than_the_extension(wheel, tmp_path):
    """The jar's JNI library is linked as the extension is (zig, glibc 2.17): the glibc symbol
    versions it needs are 2.17 or older (objdump, from binutils, which `make jar` uses too)."""
    with zipfile.ZipFile(wheel) as z, z.open("rmqlog/jvm/rmqlog-spark.jar") as jar:
        inner = zipfile.ZipFile(io.BytesIO(jar.read()))
        lib = tmp_path / "librmqlog_jvm.so"
        lib.write_bytes(inner.read("io/rmqlog/spark/native/linux-x86_64/librmqlog_jvm.so"))
    out = _run(["objdump", "-T", lib], env=os.environ, cwd=tmp_path).stdout
    versions = {tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_([0-9.]+)", out)}
    assert versions and max(versions) <= (2, 17), sorted(versions)


def test_install_without_extra_pulls_no_spark(installed):
    """`pip install "$(ls dist/*.whl)"` (the dry run in a fresh venv): rmqlog and tqdm only."""
    _, _, report = installed
    names = sorted(item["metadata"]["name"].lower() for item in report["install"])
    assert names == ["rmqlog", "tqdm"], names


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


def test_round_trip_in_fresh_venv(installed, tmp_path):
    venv_dir, env, _ = installed
    proc = _run(["python", "-c", ROUND_TRIP, tmp_path], env=env, cwd=tmp_path)
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


def test_console_script_in_fresh_venv(installed, tmp_path):
    venv_dir, env, _ = installed
    script = venv_dir / "bin" / "rmqlog"
    assert shutil.which("rmqlog", path=env["PATH"]) == str(script)
    proc = _run(["rmqlog", "--help"], env=env, cwd=tmp_path)
    assert proc.stdout.startswith("usage: rmqlog ")
    for sub in ("demo", "stat", "dump", "verify", "bench"):
        assert sub in proc.stdout
    proc = _run(["python", "-m", "rmqlog", "--version"], env=env, cwd=tmp_path)
    assert proc.stdout.strip() == f"rmqlog {rmqlog.__version__} (features: arrow, tier)"
    # a real command through the installed script (it imports tqdm, the one dependency)
    proc = _run(["rmqlog", "demo", "--dir", tmp_path / "demo", "--records", 2000], env, tmp_path)
    assert "checksums match" in proc.stdout
    # rmqlog is on this PATH: the demo's hint says so rather than how to activate the venv
    assert proc.stdout.splitlines()[-2] == "next: rmqlog --help", proc.stdout
    store = os.pathsep.join(str(tmp_path / "demo" / f"disk{i}" / "store") for i in range(3))
    proc = _run(["rmqlog", "verify", store], env=env, cwd=tmp_path)
    assert re.fullmatch(r"OK: \d+ records?, \d+ bytes, \d+ segments? verified\n", proc.stdout)


SPARK_EXTRA = textwrap.dedent(
    """
    import importlib.metadata as md, json
    from pip._vendor.packaging.requirements import Requirement

    out = {}
    for line in md.requires("rmqlog"):
        req = Requirement(line)
        if req.marker is not None and req.marker.evaluate({"extra": "spark"}):
            version = md.version(req.name)
            out[req.name] = [version, req.specifier.contains(version, prereleases=True)]
    print(json.dumps(out))
    """
)


def test_spark_extra_installed(installed, tmp_path):
    """`[spark]` brought each requirement of the extra, in a version it allows."""
    _, env, _ = installed
    got = json.loads(_run(["python", "-c", SPARK_EXTRA], env=env, cwd=tmp_path).stdout)
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {re.match(r"[\w.-]+", r)[0] for r in extra["optional-dependencies"]["spark"]}
    assert set(got) == names, got
    assert all(ok for _, ok in got.values()), got
    proc = _run(["python", "-m", "pip", "check"], env=env, cwd=tmp_path)
    assert "No broken requirements" in proc.stdout


SPARK_READ = textwrap.dedent(
    """
    import json, os, sys
    # This venv's Python for Spark's workers, whatever the calling test process had set.
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    import rmqlog.spark
    from rmqlog import CommitLog

    dirs = [os.path.join(sys.argv[1], f"d{i}") for i in range(2)]
    with CommitLog(dirs, segment_size=4096) as log:
        offsets = log.append_batch([b"event-%d" % i for i in range(300)])
    spark = rmqlog.spark.local_session("local[1]", "rmqlog-wheel-test")
    got = {}
    for source in ("rmqlog", "rmqlog_python"):  # the JVM reader, the Python source
        rows = spark.read.format(source).load(os.pathsep.join(dirs)).select("offset", "body")
        got[source] = sorted((r.offset, bytes(r.body)) for r in rows.collect())
    jvm = rmqlog.spark.jvm.on_classpath(spark)
    spark.stop()
    want = [(o, b"event-%d" % i) for i, o in enumerate(offsets)]
    print(json.dumps({
        "ok": all(rows == want for rows in got.values()),
        "rows": len(got["rmqlog"]),
        "jvm": jvm,
        "spark_file": rmqlog.spark.__file__,
    }))
    """
)


def test_spark_read_in_fresh_venv(installed, tmp_path):
    """The installed data source on a local Spark, both readers: the JVM reader from the jar the
    wheel ships (its JNI library unpacked from it), and the Python source (its Python workers
    import the installed package). Spark's launch scripts need a full PATH: the venv's bin goes
    first on it."""
    if shutil.which("java") is None:
        pytest.skip("Spark needs a JVM: `java` is not on PATH")
    venv_dir, env, _ = installed
    env = dict(env, PATH=os.pathsep.join([str(venv_dir / "bin"), os.environ["PATH"]]))
    proc = _run(["python", "-c", SPARK_READ, tmp_path], env=env, cwd=tmp_path, timeout=300)
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got["ok"] is True and got["rows"] == 300 and got["jvm"] is True, got
    assert Path(got["spark_file"]).resolve().is_relative_to(venv_dir.resolve()), got


def test_sdist_has_what_a_build_from_source_needs(tmp_path):
    """`maturin sdist` (seconds) and what a build from it reads first: the sources, Cargo.lock
    and a manifest that cargo resolves from that lock alone. Building it is left out here (a cold
    build of every crate, minutes); it was done by hand (README, "Installing")."""
    maturin = Path(sys.prefix) / "bin" / "maturin"
    _run([maturin, "sdist", "--out", tmp_path], env=os.environ, cwd=ROOT)
    (sdist,) = tmp_path.glob("rmqlog-*.tar.gz")
    assert sdist.name == f"rmqlog-{rmqlog.__version__}.tar.gz"
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path, filter="data")
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for name in (
        "Cargo.toml",
        "Cargo.lock",
        "pyproject.toml",
        "README.md",
        "src/lib.rs",
        "src/python/mod.rs",
        "python/rmqlog/__init__.py",
        "python/rmqlog/_native.pyi",
    ):
        assert name in names, name
    assert not [n for n in names if n.endswith(".so")], names
    tree = tmp_path / sdist.name.removesuffix(".tar.gz")
    cargo = shutil.which("cargo")
    if cargo is None:
        pytest.skip("cargo is not on PATH")
    # every target Cargo.toml names is there, and Cargo.lock needs no change
    _run([cargo, "metadata", "--locked", "--offline", "--format-version", "1"], os.environ, tree)
