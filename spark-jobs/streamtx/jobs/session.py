"""The Spark session of a job, and the project library shipped to its executors.

``local[*]`` by default; ``--master`` (or ``spark-submit --master``) for any
cluster. Executors decode ledgers with the project's own codecs, so the
launcher zips the ``streamtx`` package (the library and its record codecs in
``shared/``, the jobs in ``spark-jobs/``, the services in ``services/``: one
namespace, merged into one tree in the zip) and adds it with ``addPyFile``.
Nothing is copied by hand: the zip is rebuilt on every run from the folders
the ``streamtx`` package is imported from here, in a temporary folder removed
when the process exits.

The jobs need the ``spark`` extra (PySpark, pyarrow, matplotlib...):
:func:`missing_extra` says what to install when it is not there.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import streamtx

_light_jvm = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# The modules of the ``spark`` extra (pyproject.toml) the jobs import.
EXTRA_MODULES = ("pyspark", "pyarrow", "numpy", "pandas", "matplotlib")


def missing_extra() -> str | None:
    """What to install when a module of the ``spark`` extra is missing; None when all are there."""
    missing = [m for m in EXTRA_MODULES
               if (sys.modules[m] is None if m in sys.modules else importlib.util.find_spec(m) is None)]
    if not missing:
        return None
    return (f"the Spark jobs need the 'spark' extra (missing: {', '.join(missing)}): "
            "pip install 'streamtx[spark]' (in a checkout: make setup,"
            " or .venv/bin/pip install -e '.[spark]'), and Java 17 for PySpark")


def library_zip(directory: str | None = None) -> str:
    """Zip every ``streamtx`` module into one file (the first folder of the namespace package
    that has a module wins, as on import); its path."""
    fd, path = tempfile.mkstemp(prefix="streamtx-lib-", suffix=".zip", dir=directory)
    os.close(fd)
    written: set[str] = set()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for folder in streamtx.__path__:
            pkg = Path(folder)
            for file in sorted(pkg.rglob("*.py")):
                name = str(Path("streamtx") / file.relative_to(pkg))
                if name not in written:
                    written.add(name)
                    zf.write(file, name)
    return path


def get_session(master: str | None = None, app: str = "streamtx", *, shuffle_partitions: int = 8,
                conf: dict[str, str] | None = None) -> Any:
    """The job's SparkSession (an active one is reused: spark-submit, tests); ``conf`` adds settings."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    active = SparkSession.getActiveSession()
    if active is not None:
        spark = active
    else:
        from pyspark import SparkConf

        builder = SparkSession.builder.appName(app)
        if master or not SparkConf().contains("spark.master"):  # spark-submit sets it
            builder = builder.master(master or "local[*]")
            if (master or "local").startswith("local"):
                # The local JVM only schedules tasks and moves pickled bytes (the
                # work is in the Python workers): C1 and the serial collector halve
                # its CPU (measured: session start 6 s instead of 12 s) on a
                # machine with as few cores as the workers want.
                builder = builder.config("spark.driver.extraJavaOptions", _light_jvm)
        builder = (
            builder.config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
            .config("spark.python.worker.reuse", "true")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
            .config("spark.driver.memory", os.environ.get("STREAMTX_SPARK_DRIVER_MEMORY", "2g"))
        )
        for key, value in (conf or {}).items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
    ship_library(spark)
    return spark


def slices(spark: Any, n: int) -> int:
    """Spark partitions for ``n`` tasks: a few per core (one per tiny split costs more than it reads)."""
    cores: int = spark.sparkContext.defaultParallelism
    return max(1, min(n, cores * 3))


def ship_library(spark: Any) -> None:
    """Add the library zip to the session once."""
    sc = spark.sparkContext
    if getattr(sc, "_streamtx_zip", None):
        return
    folder = tempfile.mkdtemp(prefix="streamtx-lib-")
    atexit.register(shutil.rmtree, folder, True)  # each run zipped ~450 KB into /tmp for good
    path = library_zip(folder)
    sc.addPyFile(path)
    sc._streamtx_zip = path
