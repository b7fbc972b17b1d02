"""`streamtx jobs` without the spark extra says what to install; runs leave no zip (issue 22 item 10).

Without PySpark a job died on a bare ``ModuleNotFoundError``; every run left
its ~450 KB ``/tmp/streamtx-lib-*.zip`` (the library shipped to the executors).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from streamtx import cli

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("job", ["histograms", "compact"])
def test_a_job_without_the_spark_extra_says_what_to_install(
        job: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)  # as if not installed: its import fails
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["jobs", job, "--ledgers", f"file://{tmp_path}", "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "missing: pyspark" in err and "pip install 'streamtx[spark]'" in err, err


def test_the_shipped_library_zip_is_removed_when_the_process_exits(tmp_path: Path) -> None:
    # ship_library against a stand-in SparkContext (addPyFile records the path), in a child
    # process: the zip must exist while the job runs and be gone once the process exited.
    code = """
import os, sys, types
from streamtx.jobs.session import ship_library
shipped = []
spark = types.SimpleNamespace(sparkContext=types.SimpleNamespace(addPyFile=shipped.append))
ship_library(spark)
assert os.path.getsize(shipped[0]) > 10_000
print(shipped[0])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin",
                              "PYTHONPATH": ":".join(sys.path)}).stdout
    path = Path(out.strip())
    assert path.is_relative_to(tmp_path) and path.name.startswith("streamtx-lib-")
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []
