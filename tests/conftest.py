"""Shared fixtures for the rmqlog API tests, and the switch that forbids skipping.

With ``RMQLOG_REQUIRE_ALL_TESTS=1`` in the environment (``.ci/run`` sets it), a test that would
be skipped (``pytest.skip``, a ``skipif`` mark, a fixture that skips, a module skipped at import)
or that is a non-strict ``xfail`` fails instead, with the skip reason in its report: on the CI
machine every test group (Spark, mounts, loop devices, kernel-gated tests) must run. Unset, skips
work as usual and ``-ra`` lists their reasons.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import sys

import _faultfs
import _mounts
import _object_stores
import pytest

from rmqlog import CommitLog

REQUIRE_ALL_TESTS = "RMQLOG_REQUIRE_ALL_TESTS"
_refused: list[str] = []  # "nodeid: reason" of every skip turned into a failure


def _require_all() -> bool:
    return os.environ.get(REQUIRE_ALL_TESTS, "") not in ("", "0")


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, lineno, "Skipped: why")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _refuse(report, what: str) -> None:
    message = f"{REQUIRE_ALL_TESTS}=1: {what} (every test must run on this machine)"
    _refused.append(f"{report.nodeid}: {what}")
    report.outcome = "failed"
    report.longrepr = message


def _strict_xfail(item) -> bool:
    mark = item.get_closest_marker("xfail")
    if mark is None:
        return False  # pytest.xfail() called in the test: never strict
    return bool(mark.kwargs.get("strict", item.config.getini("xfail_strict")))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under the switch: a skip in any phase (setup included) and a non-strict xfail or xpass
    become failures naming the reason."""
    outcome = yield
    if not _require_all():
        return
    report = outcome.get_result()
    if hasattr(report, "wasxfail"):
        if not _strict_xfail(item):
            reason = report.wasxfail or "no reason given"
            del report.wasxfail
            _refuse(report, f"xfail is not allowed: {reason}")
    elif report.skipped:
        _refuse(report, f"skipped: {_skip_reason(report)}")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """Under the switch: a module that skips itself at import (``allow_module_level``,
    ``importorskip``) is a collection error naming the reason."""
    outcome = yield
    report = outcome.get_result()
    if _require_all() and report.skipped:
        _refuse(report, f"skipped: {_skip_reason(report)}")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``make test`` runs ``-n 2 --dist loadgroup``): the tests that share one
    costly session run on one worker, in one session: the Spark tests (a local driver and a
    local-cluster, started once), and the wheel tests (one wheel build). A test that marks its own
    group (``xdist_group``: one fixed path for all its cases) keeps it.

    ``tryfirst``: xdist reads the groups in its own hook of this name (it appends ``@group`` to
    each test id), which runs before this one otherwise, and the marks added here were ignored."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        if {"spark", "spark_cluster", "spark_session", "spark_cluster_session"} & set(
            item.fixturenames
        ):
            item.add_marker(pytest.mark.xdist_group("spark"))
        elif item.module is not None and item.module.__name__ == "test_wheel":
            item.add_marker(pytest.mark.xdist_group("wheel"))


def pytest_collection_finish(session):
    """Under ``--dist loadgroup`` a grouped test's id ends in ``@group`` on the worker: that suffix
    is how xdist keeps a group on one worker. Without it the groups are silently lost (the Spark
    sessions start twice, the wheel is built twice at once into one directory): stop the run. (xdist
    shows a worker's error as an INTERNALERROR naming the first test id, without this message.)"""
    if not getattr(session.config.option, "loadgroup", False):  # set on xdist workers
        return
    lost = [
        item.nodeid
        for item in session.items
        if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid
    ]
    if lost:
        raise pytest.UsageError(
            f"pytest-xdist ignored the xdist_group marks of {len(lost)} tests (e.g. {lost[0]}): "
            f"pytest {pytest.__version__} with this pytest-xdist loses --dist loadgroup "
            "(pytest-xdist#1386); install the versions pyproject.toml's test extra pins"
        )


def pytest_terminal_summary(terminalreporter):
    if _refused:
        terminalreporter.section(f"skips refused by {REQUIRE_ALL_TESTS}=1", sep="=", red=True)
        for line in _refused:
            terminalreporter.line(line)


@pytest.fixture
def dirs(tmp_path):
    """The three default store directories (not created)."""
    return [tmp_path / "d0", tmp_path / "d1", tmp_path / "d2"]


@pytest.fixture
def make_log(dirs):
    """Factory of opened CommitLogs; every log it made is closed at teardown.

    ``make_log()`` opens the three default directories with ``segment_size=4096``; any argument
    of ``CommitLog`` can be given (``paths`` positionally or by keyword).
    """
    opened = []

    def make(paths=None, **kwargs):
        kwargs.setdefault("segment_size", 4096)
        log = CommitLog(dirs if paths is None else paths, **kwargs)
        opened.append(log)
        return log

    yield make
    for log in reversed(opened):
        with contextlib.suppress(Exception):
            log.close()


def _body(i: int, size: int = 100) -> bytes:
    head = f"rec-{i}-".encode()
    return (head * (size // len(head) + 1))[:size]


@pytest.fixture
def body():
    """``body(i, size=100)``: a distinct, recognisable body of ``size`` bytes for record ``i``."""
    return _body


@pytest.fixture(scope="session")
def mount_allowed():
    """Skips (with the reason) where mounting a tmpfs is not permitted."""
    reason = _mounts.mount_unavailable()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def mnt(mount_allowed, tmp_path):
    """Mounts for one test; logs opened with ``mnt.log`` are closed before the unmounts."""
    with _mounts.Mounts(tmp_path) as m:
        yield m


@pytest.fixture(scope="session")
def faultfs_available(tmp_path_factory):
    """Skips (with the reason) where a FUSE filesystem cannot be mounted; installs fuse3 first
    where ``fusermount3`` is missing (see ``_faultfs.unavailable``)."""
    reason = _faultfs.unavailable(tmp_path_factory.mktemp("faultfs-probe"))
    if reason:
        pytest.skip(reason)


@pytest.fixture
def faultfs(faultfs_available, tmp_path):
    """A faultfs mount for one test (``tests/faultfs.py``, ``tests/_faultfs.py``): ``.path`` is
    the mount point; ``fail()``, ``clear()``, ``stats()``, ``lazy()``, ``power_cut()``. Logs opened
    with ``faultfs.log`` are closed before it unmounts, which it always does."""
    fs = _faultfs.FaultFS(tmp_path / "faultfs")
    fs.start()
    try:
        yield fs
    finally:
        fs.close()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """moto's S3 server for the session (``tests/_object_stores.py``): ``endpoint``, ``options()``,
    ``stop()``, ``start()`` (same port, buckets kept), ``stopped()``. Skips where moto or boto3
    is missing."""
    for module in ("moto", "boto3"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"S3 tier tests need {module} (make develop installs it)")
    server = _object_stores.S3Server(tmp_path_factory.mktemp("moto") / "server.log")
    yield server
    server.close()


@pytest.fixture
def s3_bucket(s3_server):
    """A fresh bucket: ``url`` (s3://<bucket>/log), ``options``, ``bucket``, a boto3 ``client``,
    ``keys()``, ``read``, ``write``, ``delete``. The server is running at the start and again
    at the end, whatever the test stopped; the bucket is dropped."""
    s3_server.start()
    tier = _object_stores.S3Tier(s3_server)
    yield tier
    s3_server.start()
    tier.drop()


@pytest.fixture
def file_tier(tmp_path):
    """A ``file://`` tier in a fresh directory ``path``; the same shape as ``s3_bucket``."""
    return _object_stores.FileTier(tmp_path / "tier")


@pytest.fixture(params=["s3", "file"])
def tier(request):
    """``s3_bucket`` or ``file_tier``: the test runs once on each."""
    return request.getfixturevalue("s3_bucket" if request.param == "s3" else "file_tier")


SPARK_LOCAL = "local[2]"
SPARK_CLUSTER = "local-cluster[2,1,1024]"  # 2 executor JVMs of 1 core and 1024 MB each


class _SparkSessions:
    """The one SparkContext a process may have, built for the master the running test asks for.

    Asking for the other master stops the current session and builds the new one in the same
    gateway JVM (about 8 s to the cluster, 1 s back to local[2] once the JVM runs), so ``spark`` and
    ``spark_cluster`` are function-scoped: each test gets a live session, whatever ran before."""

    def __init__(self) -> None:
        self.session = None

    def get(self, master: str):
        if self.session is not None and self.session.sparkContext.master == master:
            return self.session
        self.close()
        import rmqlog.spark as rs

        session = rs.local_session(
            master,
            "rmqlog-test-spark",
            # Shuffle partitions: local_session's default, the cores (2 for both masters).
            conf={"spark.scheduler.minRegisteredResourcesRatio": "1.0"},  # jobs wait for all
        )
        assert session.conf.get(rs.PUSHDOWN_CONF) == "true"
        assert rs.jvm.on_classpath(session), "the JVM reader's jar: `make jar` builds it"
        self.session = session
        return session

    def close(self) -> None:
        if self.session is None:
            return
        from pyspark.find_spark_home import _find_spark_home

        app = self.session.sparkContext.applicationId
        self.session.stop()
        self.session = None
        # The cluster's workers keep executor logs in SPARK_HOME/work/<app> (in the venv).
        shutil.rmtree(os.path.join(_find_spark_home(), "work", app), ignore_errors=True)


@pytest.fixture(scope="session")
def _spark_sessions():
    """Executors and Python workers run this interpreter (the venv: rmqlog imports there).
    Skips where java or pyspark is missing."""
    if shutil.which("java") is None or importlib.util.find_spec("pyspark") is None:
        pytest.skip("Spark tests need `java` on PATH and pyspark (make develop installs it)")
    env = {
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    sessions = _SparkSessions()
    yield sessions
    sessions.close()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _as_reader(session, which: str):
    from _spark_sources import PythonSourceSession

    return session if which == "jvm" else PythonSourceSession(session)


@pytest.fixture(params=("jvm", "python"))
def spark(_spark_sessions, request):
    """A local[2] SparkSession (UTC session time zone) with the rmqlog source registered, shared
    by the Spark tests, once for each reader of ``format("rmqlog")`` (tests/_spark_sources.py):
    the JVM reader (the jar) and the Python source. The modules skip themselves first where java
    or pyspark is missing."""
    return _as_reader(_spark_sessions.get(SPARK_LOCAL), request.param)


@pytest.fixture
def spark_session(_spark_sessions):
    """The local[2] session of ``spark`` alone, for the tests that do not read through
    ``format("rmqlog")`` (the body UDF, the session builder) and for fleets, which the JVM
    reader hands to the Python source: ``format("rmqlog")`` is the JVM reader there."""
    return _spark_sessions.get(SPARK_LOCAL)


@pytest.fixture
def spark_cluster_session(_spark_sessions):
    """The local-cluster session of ``spark_cluster`` alone (see ``spark_session``)."""
    return _spark_sessions.get(SPARK_CLUSTER)


@pytest.fixture(params=("jvm", "python"))
def spark_cluster(_spark_sessions, request):
    """Like ``spark`` on a local-cluster: executors in 2 JVMs of their own (not the driver's),
    each with its Python workers, as on a real cluster."""
    return _as_reader(_spark_sessions.get(SPARK_CLUSTER), request.param)
