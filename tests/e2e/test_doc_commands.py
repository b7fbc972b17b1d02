"""Every documented command runs (issue 24 item 5).

The blocks of README.md and docs/*.md marked ``<!-- run -->`` run against one suite
started as ``make run`` starts it (``python -m streamtx.launch.suite``, a temporary
data directory, free ports as ``BASE_PORT``): each file's blocks in order in one
``bash -Eeuo pipefail`` (a block may use what an earlier one set), from a folder whose
``data/`` is the suite's, with this venv's ``bin`` first on the PATH, as the README
asks a reader to put ``.venv/bin``. ``curl`` fails on an HTTP error here
(``--fail-with-body``), so a command the API refuses fails its file.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.docs import Block, marked_blocks
from tests.support.procs import ROOT, free_port, python_env

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = [path for path in DOCS if marked_blocks(path)]
READY_LINE = "Ctrl-C stops"  # the suite's last line once every service answers /readyz


def _free_base_port(count: int = 4) -> int:
    """A port with the next ``count - 1`` free as well (the suite takes base..base+3)."""
    for _ in range(50):
        base = free_port()  # below the ephemeral range, as the suite's children need
        if base + count > 65535:
            continue
        with contextlib.ExitStack() as held:
            try:
                for port in range(base, base + count):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return base
    raise RuntimeError("no four consecutive free ports")


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    """Ours without credentials (make run runs with auth off) and with this venv's bin first."""
    env = {k: v for k, v in python_env().items()
           if not (k.startswith("STREAMTX_") and ("TOKEN" in k or "AUTH" in k or k == "STREAMTX_URL"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return {**env, **extra}


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int]]:
    work = tmp_path_factory.mktemp("doc-commands")
    base = _free_base_port()
    log = work / "suite.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamtx.launch.suite", "--data-dir", str(work / "data"),
             "--base-port", str(base)],
            stdout=out, stderr=subprocess.STDOUT, env=_clean_env({}), cwd=work, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while READY_LINE not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                output = log.read_text(errors="replace")
                pytest.fail(f"the suite did not start (exit {proc.poll()}):\n{output}")
            time.sleep(0.2)
        yield work, base
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # Ctrl-C, as a reader stops make run
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def script(blocks: list[Block]) -> str:
    """One bash script running ``blocks`` in order; a failure names its block."""
    lines = [
        'curl() { command curl --fail-with-body "$@"; }',
        "trap 'echo \"doc-commands: the block at $DOC_BLOCK failed\" >&2' ERR",
    ]
    for block in blocks:
        lines.append(f"DOC_BLOCK={shlex.quote(block.where)}")
        if block.lang == "sh":
            lines.append(block.code)
        else:
            python = shlex.quote(sys.executable)
            lines.append(f"{python} - <<'DOC_COMMANDS_PYTHON'\n{block.code}DOC_COMMANDS_PYTHON")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("doc", RUNNABLE, ids=[p.name for p in RUNNABLE])
def test_the_documented_commands_run(suite: tuple[Path, int], doc: Path) -> None:
    work, base = suite
    run = subprocess.run(["bash", "-Eeuo", "pipefail", "-c", script(marked_blocks(doc))],
                         cwd=work, env=_clean_env({"BASE_PORT": str(base)}),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, (f"{doc.name}: exit {run.returncode}\n"
                                 f"--- stdout\n{run.stdout[-4000:]}\n--- stderr\n{run.stderr[-4000:]}")


def test_the_readme_tour_runs_again(suite: tuple[Path, int]) -> None:
    # A reader tries the tour twice: nothing in it may hold for a fresh data directory only (the
    # hard-coded transaction id 0:0 did: a second run registered a partition in a committed one).
    work, base = suite
    for _ in range(2):
        run = subprocess.run(["bash", "-Eeuo", "pipefail", "-c", script(marked_blocks(ROOT / "README.md"))],
                             cwd=work, env=_clean_env({"BASE_PORT": str(base)}),
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, (f"exit {run.returncode}\n"
                                     f"--- stdout\n{run.stdout[-4000:]}\n--- stderr\n{run.stderr[-4000:]}")


def test_the_readme_tour_runs() -> None:
    # The README's tour is what a reader runs first: it must stay marked.
    assert ROOT / "README.md" in RUNNABLE
    assert any("/v1/transactions" in b.code for b in marked_blocks(ROOT / "README.md"))
