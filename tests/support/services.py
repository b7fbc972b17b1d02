"""Run streamtx services as real processes over real HTTP, for integration tests."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from pathlib import Path

from streamtx.service.readiness import wait_ready
from tests.support.procs import free_port, python_env, stop


class ServiceProcess:
    """One service process (``python -m streamtx.<module>``) on a free port.

    ``env`` holds ``STREAMTX_*`` settings; ``restart()`` keeps the port so peers
    that know its URL reach the new process.
    """

    def __init__(self, module: str, env: dict[str, str], port: int | None = None) -> None:
        self.module = module
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = Path(env.get("STREAMTX_TEST_LOG_DIR", "/tmp")) / f"{module}-{self.port}.log"

    def start(self, timeout: float = 30.0, *, ready: bool = True) -> ServiceProcess:
        """Start it; wait until it is ready (``/readyz``) unless ``ready`` is False."""
        env = python_env({"STREAMTX_HOST": "127.0.0.1", "STREAMTX_PORT": str(self.port), **self.env})
        with self.log_path.open("ab") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", f"streamtx.{self.module}"], env=env, stdout=log, stderr=log
            )
        if ready:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        wait_ready(self.url, self.proc, timeout_s=timeout,
                   details=lambda: f"{self.module} log:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def children(self) -> list[int]:
        """Its child processes' pids (a supervisor's workers), from /proc: a process's parent
        is field 4 of its stat."""
        if self.proc is None:
            return []
        found = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError):
                if int(stat.read_text().rpartition(")")[2].split()[1]) == self.proc.pid:
                    found.append(int(stat.parent.name))
        return sorted(found)

    def kill9(self) -> None:
        """Crash it: SIGKILL, no chance to flush or close anything."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def restart(self, timeout: float = 30.0) -> ServiceProcess:
        self.kill9()
        return self.start(timeout)

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)
