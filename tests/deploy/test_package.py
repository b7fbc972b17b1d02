"""The wheel holds every module and runs a service from outside the repo, as the image does.

The wheel is built from this checkout, installed (``--no-deps``) into a fresh
venv under a temp dir that sees the project venv's dependencies, and the
image's own ENTRYPOINT + CMD, ENV and HEALTHCHECK (read from the Dockerfile)
start and probe a service from there, with no PYTHONPATH and another cwd.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import httpx
import pytest

from streamtx.service.readiness import wait_ready
from tests.support import dockerfile
from tests.support.procs import free_port, stop

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(out), str(ROOT)],
        check=True, cwd=out,
    )
    (built,) = out.glob("streamtx-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel; dependencies come from the project venv (a path line)."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    purelib = Path(subprocess.run(
        [str(root / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    # A plain path line: the project venv's own .pth files (its editable
    # install of this checkout among them) are not processed from it.
    (purelib / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"), "install", "-q",
         "--no-deps", "--no-index", str(wheel)],
        check=True,
    )
    return root


def _clean_env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("STREAMTX_")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_wheel_holds_every_module(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        "/".join(path.relative_to(ROOT / top).parts)
        for top in ("shared", "services", "spark-jobs")
        for path in (ROOT / top / "streamtx").rglob("*.py")
    }
    assert len(expected) > 100
    assert expected - names == set()
    assert not any(n.startswith(("shared/", "services/", "spark-jobs/", "tests/")) for n in names)


def test_image_commands_run_a_service_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    final = dockerfile.parse(ROOT / "Dockerfile")[-1]
    env = _clean_env(venv)
    where = subprocess.run(
        ["python", "-c", "import streamtx.broker, streamtx.batching; "
         "print(streamtx.broker.__file__); print(streamtx.batching.__file__)"],
        env=env, cwd=tmp_path, check=True, capture_output=True, text=True,
    ).stdout.split()
    assert all(p.startswith(str(venv)) for p in where), where

    port = free_port()
    env |= final.env | {
        # The image listens on 0.0.0.0 and keeps ledgers in its volume; here:
        "STREAMTX_HOST": "127.0.0.1", "STREAMTX_PORT": str(port),
        "STREAMTX_LEDGER_URL": f"file://{tmp_path / 'ledgers'}",
    }
    assert set(final.env) - {"PYTHONUNBUFFERED"} <= {k for k in env if k.startswith("STREAMTX_")}
    with (tmp_path / "service.log").open("wb") as log:  # the child keeps its own copy
        proc = subprocess.Popen([*final.entrypoint, *final.cmd], env=env, cwd=tmp_path,
                                stdout=log, stderr=log)
    try:
        wait_ready(f"http://127.0.0.1:{port}", proc, timeout_s=60,
                   details=lambda: (tmp_path / "service.log").read_text(errors="replace"))
        assert subprocess.run(final.healthcheck, env=env, cwd=tmp_path).returncode == 0
        assert httpx.get(f"http://127.0.0.1:{port}/v1/cluster").json()["cluster"] == "standalone"
    finally:
        stop(proc)
    # Nothing listens now: the same probe fails.
    assert subprocess.run(final.healthcheck, env=env, cwd=tmp_path, capture_output=True).returncode == 1


def test_every_command_of_the_cli_starts_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    env = _clean_env(venv)
    for argv in (["streamtx", "suite", "--help"], ["streamtx", "serve", "--help"],
                 ["streamtx-admin", "--help"]):
        done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, (argv, done.stderr)


def test_image_is_multi_stage_slim_and_non_root() -> None:
    stages = dockerfile.parse(ROOT / "Dockerfile")
    build, final = stages[0], stages[-1]
    assert final.name is None and [s.name for s in stages if s.name] == ["build", "runtime", "spark"]
    assert all(s.base == "python:3.11-slim" for s in stages)
    assert final.user not in (None, "root", "0")
    assert final.entrypoint == ["streamtx", "serve"] and final.healthcheck[:2] == ["streamtx", "probe"]
    # No compiler or package manager run in the final stage; only pip from the build's wheels.
    assert not any(word in run for run in final.runs for word in ("apt-get", "gcc", "build-essential"))
    assert any("--no-index" in run for run in final.runs)
    assert any("pip wheel" in run for run in build.runs)
    # The services' image installs no extra (the [spark] one is the spark target's).
    assert any('"streamtx[spark]"' in run for run in stages[2].runs)
    assert not any("[" in run for run in final.runs if "pip install" in run)
    assert all(k.startswith("STREAMTX_") or k == "PYTHONUNBUFFERED" for k in final.env)


def test_the_image_build_sees_every_root_the_wheel_maps() -> None:
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    text, ignore = (ROOT / "Dockerfile").read_text(), (ROOT / ".dockerignore").read_text().split()
    for root in wheel["sources"]:
        assert f"COPY {root}/ {root}/" in text, root
        assert f"!{root}/" in ignore, root
