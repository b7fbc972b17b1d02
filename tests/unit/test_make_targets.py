"""`make run` and `make run-geo` take BASE_PORT; `make help` lists what there is (dry runs only)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from streamtx.launch import geo

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def dry_run(*args: str) -> list[str]:
    """What make would run (``-n``: nothing is run, setup included)."""
    out = subprocess.run(["make", "-n", "-s", *args], cwd=ROOT, capture_output=True, text=True, timeout=30,
                         check=True)
    return out.stdout.splitlines()


@pytest.mark.parametrize(("target", "module"), [("run", "suite"), ("run-geo", "geo")])
def test_base_port_moves_the_local_launchers(target: str, module: str) -> None:
    launch = f".venv/bin/python -m streamtx.launch.{module} --data-dir data"
    assert f"{launch} --base-port 9000" in [line.strip() for line in dry_run(target, "BASE_PORT=9000")]
    assert launch in [line.strip() for line in dry_run(target)]  # the launcher's own default


def test_geo_clusters_are_a_hundred_ports_apart_from_the_base() -> None:
    assert geo.clusters(9000) == {"a": 9000, "b": 9100, "c": 9200}
    assert geo.CLUSTERS == {"a": 18000, "b": 18100, "c": 18200}  # the default, as documented


def test_make_help_lists_the_targets_with_what_they_do() -> None:
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, timeout=30,
                         check=True).stdout
    listed = {line.split()[1]: line for line in out.splitlines() if line.startswith("  make ")}
    for target in ("run", "run-geo", "test", "lint", "demo", "bench"):
        assert target in listed, out
    assert "BASE_PORT" in listed["run"] and "BASE_PORT" in listed["run-geo"]


def test_every_target_says_what_it_does() -> None:
    targets = re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.M)
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, timeout=30,
                         check=True).stdout
    listed = {line.split()[1] for line in out.splitlines() if line.startswith("  make ")}
    assert set(targets) - listed == set()
