"""The PySpark versions this source works with, checked when ``rmqlog.spark`` is imported.

PySpark offers no public signal that a reader is built by its filter-pushdown planner (the one
caller that follows ``reader()`` with ``pushFilters``), so ``source.py`` recognizes the planner by
its module's file name, which PySpark may change in any release. PySpark 4.0 has neither filter
pushdown for Python sources nor that planner. So the source takes the versions it was built and
tested against, and refuses others with the fix, unless the user asks to try one anyway.
"""

import os
import re

import pyspark

SUPPORTED = ((4, 1), (4, 4))  # [from, to): minor versions
UNTESTED_ENV = "RMQLOG_SPARK_UNTESTED_PYSPARK"  # "1": import under any PySpark >= 4.1
PIN = "pyspark>=4.1,<4.4"  # pyproject.toml's spark extra says the same (tests/test_spark_versions)


def _minor(version: str) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def check(version: str, environ: "os._Environ[str] | dict[str, str]" = os.environ) -> None:
    """Raises ImportError unless PySpark ``version`` is one this source works with (or, with
    ``RMQLOG_SPARK_UNTESTED_PYSPARK=1``, at least 4.1, where the API it uses exists)."""
    (lo, hi), minor = SUPPORTED, _minor(version)
    if minor is not None and lo <= minor < hi:
        return
    untested = environ.get(UNTESTED_ENV) == "1"
    if minor is not None and minor >= hi and untested:
        return
    newer = minor is not None and minor >= hi
    why = (
        "filter pushdown for Python sources (DataSourceReader.pushFilters) came with 4.1"
        if not newer
        else "a later PySpark may plan reads differently: the source recognizes its "
        "filter-pushdown planner by a PySpark-internal file name; set "
        f"{UNTESTED_ENV}=1 to try it anyway (without the planner, queries read every segment "
        "and Spark filters the rows: slower, never wrong)"
    )
    raise ImportError(
        f"rmqlog.spark works with PySpark {lo[0]}.{lo[1]} to {hi[0]}.{hi[1] - 1}.x; this is "
        f"PySpark {version} ({why}). Install a supported one: pip install '{PIN}'"
    )


check(pyspark.__version__)
