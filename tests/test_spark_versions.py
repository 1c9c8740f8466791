"""The PySpark versions ``rmqlog.spark`` takes (python/rmqlog/spark/versions.py): the pin in
pyproject.toml, the refusal of others, and the override for a later one."""

import subprocess
import sys
import tomllib
from pathlib import Path

import pyspark
import pytest

from rmqlog.spark import versions

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("version", ["4.1.0", "4.1.4", "4.2.1", "4.3.0", "4.3.1.dev0"])
def test_the_supported_versions_are_taken(version):
    versions.check(version, {})


@pytest.mark.parametrize(
    ("version", "why"),
    [
        ("4.0.5", "filter pushdown for Python sources"),
        ("3.5.3", "filter pushdown for Python sources"),
        ("4.4.0", "RMQLOG_SPARK_UNTESTED_PYSPARK=1"),
        ("5.0.0", "RMQLOG_SPARK_UNTESTED_PYSPARK=1"),
        ("not a version", "filter pushdown for Python sources"),
    ],
)
def test_other_versions_are_refused_with_the_fix(version, why):
    with pytest.raises(ImportError) as e:
        versions.check(version, {})
    msg = str(e.value)
    assert f"this is PySpark {version}" in msg, msg
    assert "works with PySpark 4.1 to 4.3.x" in msg, msg
    assert why in msg, msg
    assert "pip install 'pyspark>=4.1,<4.4'" in msg, msg


def test_the_override_takes_a_later_version_only():
    env = {versions.UNTESTED_ENV: "1"}
    versions.check("4.4.0", env)
    versions.check("5.1.2", env)
    with pytest.raises(ImportError, match=r"this is PySpark 4\.0\.5"):
        versions.check("4.0.5", env)  # the API the source uses is not there
    with pytest.raises(ImportError):
        versions.check("4.4.0", {versions.UNTESTED_ENV: "yes"})  # "1" only


def test_the_pin_is_pyproject_s_and_the_installed_pyspark_is_in_it():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert versions.PIN in extras["spark"]
    versions.check(pyspark.__version__, {})


def test_importing_under_a_refused_version_fails_before_the_source_loads():
    """A real import in a fresh interpreter whose pyspark reports 4.0.5 (the version string is
    the only thing changed): the ImportError names the version, and no rmqlog.spark module past
    the check was imported."""
    code = (
        "import sys, pyspark\n"
        "pyspark.__version__ = '4.0.5'\n"
        "try:\n"
        "    import rmqlog.spark\n"
        "except ImportError as e:\n"
        "    print('refused:', e)\n"
        "print(sorted(m for m in sys.modules if m.startswith('rmqlog.spark')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "refused: rmqlog.spark works with PySpark 4.1 to 4.3.x; this is PySpark 4.0.5" in out
    assert "'rmqlog.spark.source'" not in out and "'rmqlog.spark.batch'" not in out, out
