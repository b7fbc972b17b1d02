"""The suite as a reader of the docs runs it (``make run``), and the docs' marked blocks as one script.

    with made_run(work, env={"STREAMTX_AUTH_JWT_SECRET": s}) as base: ...
    run_blocks(marked_blocks(ROOT / "README.md"), work, {"BASE_PORT": str(base)})

``made_run`` is ``python -m streamtx.launch.suite`` (what ``make run`` runs) on free
ports, in ``work`` (its ``data/`` holds the ledgers), stopped with Ctrl-C's SIGINT.
Used by tests/e2e/test_doc_commands.py and tests/e2e/test_auth.py.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.docs import Block
from tests.support.procs import free_port, python_env

READY_LINE = "Ctrl-C stops"  # the suite's last line once every service answers /readyz


def free_base_port(count: int = 4) -> int:
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


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    """Ours without credentials (make run runs with auth off) and with this venv's bin first."""
    env = {k: v for k, v in python_env().items()
           if not (k.startswith("STREAMTX_") and ("TOKEN" in k or "AUTH" in k or k == "STREAMTX_URL"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return {**env, **extra}


@contextlib.contextmanager
def made_run(work: Path, env: dict[str, str] | None = None) -> Iterator[int]:
    """The suite as ``make run`` starts it, with ``env`` added to a clean environment; its base port."""
    base = free_base_port()
    log = work / "suite.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamtx.launch.suite", "--data-dir", str(work / "data"),
             "--base-port", str(base)],
            stdout=out, stderr=subprocess.STDOUT, env=clean_env(env or {}), cwd=work, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while READY_LINE not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                output = log.read_text(errors="replace")
                pytest.fail(f"the suite did not start (exit {proc.poll()}):\n{output}")
            time.sleep(0.2)
        yield base
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
        "trap 'echo \"doc-commands: the block at $DOC_BLOCK failed\" >&2' ERR",
    ]
    for block in blocks:
        lines.append(f"DOC_BLOCK={shlex.quote(block.where)}")
        if block.lang == "sh":
            lines.append(block.code)
        else:
            python = shlex.quote(sys.executable)
            lines.append("echo")  # curl's answers end without one: the block's output starts a line
            lines.append(f"{python} - <<'DOC_COMMANDS_PYTHON'\n{block.code}DOC_COMMANDS_PYTHON")
    return "\n".join(lines) + "\n"


def run_blocks(blocks: list[Block], work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``blocks`` in one ``bash -Eeuo pipefail`` from ``work``, asserted to exit 0.

    ``curl`` fails on an HTTP error here (``--fail-with-body``), so a command the API refuses
    fails the script: a ``curl`` first on the PATH, so that a block's own ``curl`` function
    (docs/security.md's adds the token) reaches it through ``command curl``.
    """
    real = shutil.which("curl")
    assert real, "the documented commands need curl"
    bin_dir = work / ".doc-bin"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "curl"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(real)} --fail-with-body "$@"\n')
    wrapper.chmod(0o755)
    full = clean_env(env)
    full["PATH"] = os.pathsep.join([str(bin_dir), full["PATH"]])
    run = subprocess.run(["bash", "-Eeuo", "pipefail", "-c", script(blocks)], cwd=work, env=full,
                         capture_output=True, text=True, timeout=120)
    where = blocks[0].path.name if blocks else "no blocks"
    assert run.returncode == 0, (f"{where}: exit {run.returncode}\n"
                                 f"--- stdout\n{run.stdout[-4000:]}\n--- stderr\n{run.stderr[-4000:]}")
    return run


_PRINT = re.compile(r"^\s*print\(")
_PROMISE = re.compile(r"^\s*# (.+)$")


def promised(blocks: list[Block]) -> list[str]:
    """What the python blocks promise to print: the comment line right under each ``print(...)``."""
    found = []
    for block in blocks:
        if block.lang != "python":
            continue
        lines = block.code.splitlines()
        for line, after in itertools.pairwise(lines):
            if _PRINT.match(line) and (m := _PROMISE.match(after)):
                found.append(m.group(1).strip())
    return found
