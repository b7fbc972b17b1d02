"""Child processes of the demo: the services and the workers, with kill -9 and restart."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import streamtx
from streamtx.service.readiness import wait_ready

T = TypeVar("T")
LOOPS = ("uvloop", "asyncio")


def run_async(coro: Coroutine[Any, Any, T], loop: str) -> T:
    """Run ``coro`` on a new event loop of the kind named (``uvloop`` or ``asyncio``): the
    demo's workers and generator take ``--loop`` so bench/stack.py can compare them."""
    if loop == "uvloop":
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


def child_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment of a child: ours, with every root of the ``streamtx`` namespace
    package on ``PYTHONPATH`` (so children import the same code however we were started)."""
    roots = [str(Path(p).parent) for p in streamtx.__path__]
    path = os.pathsep.join([*roots, *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "PYTHONPATH": path, **extra}


def free_port() -> int:
    """A port free on 127.0.0.1 now, for a child to listen on later: below the kernel's ephemeral
    range. One from that range (what binding port 0 gives) can be taken before the child binds
    it by any outgoing connection or port-0 listener of another process (a Spark JVM's took a
    demo's pending-ack store port in CI, and every restart of the store failed to bind)."""
    low = _ephemeral_low()
    if low > _LOWEST + 1000:
        for _ in range(100):
            port = random.randrange(_LOWEST, low)
            with socket.socket() as s, contextlib.suppress(OSError):
                s.bind(("127.0.0.1", port))
                return port
    with socket.socket() as s:  # no room below the range: the kernel's pick
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_LOWEST = 10000  # above the well-known and most registered ports


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, from /proc (0 where unavailable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


class Child:
    """One ``python -m <module> [args]`` process; its output goes to ``log_path``."""

    def __init__(self, name: str, module: str, args: list[str], env: dict[str, str], log_path: Path,
                 ready_url: str | None = None) -> None:
        self.name, self.module, self.args, self.env = name, module, args, env
        self.log_path = log_path
        self.ready_url = ready_url
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, timeout_s: float = 60.0) -> Child:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", self.module, *self.args],
                                     env=child_env(self.env), stdout=log, stderr=log,
                                     start_new_session=True)
        log.close()
        self.starts += 1
        if self.ready_url:
            self.wait_ready(timeout_s)
        return self

    def wait_ready(self, timeout_s: float) -> None:
        wait_ready(self.ready_url or "", self.proc, timeout_s=timeout_s,
                   details=lambda: f"{self.name} log:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)

    def kill9(self) -> None:
        """Crash it: SIGKILL, no chance to flush or close anything."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout_s: float = 15.0) -> None:
        if not self.alive():
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill9()

    def wait_stopped(self, timeout_s: float = 1.0) -> None:
        """After SIGSTOP: wait until the kernel shows the process stopped."""
        deadline = time.monotonic() + timeout_s
        while self.proc is not None and time.monotonic() < deadline:
            try:
                state = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                return
            if state in ("T", "t"):
                return
            time.sleep(0.002)

    def cpu_s(self) -> float:
        """CPU seconds (user + system) of the current process, 0 when gone."""
        return cpu_seconds(self.proc.pid) if self.alive() and self.proc is not None else 0.0

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def redis_server(port: int, timeout_s: float = 20.0) -> subprocess.Popen[bytes]:
    """A throw-away redis-server (no persistence) on ``port``, once it accepts connections: the
    replicas' leases (``--replicas``). The caller stops it."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise FileNotFoundError("redis-server not found: run `make setup` (apt-get install redis-server)")
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"redis-server did not start on port {port}") from None
            time.sleep(0.05)
