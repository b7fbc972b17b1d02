"""The local launchers' child processes (`make run`: :mod:`streamtx.launch.suite`, `make run-geo`:
:mod:`streamtx.launch.geo`): started, watched and stopped together.

Ctrl-C or SIGTERM stops every child (SIGTERM, latest first, then SIGKILL after
a grace period) and exits 0. A child exiting on its own stops the others too,
after saying which, and the launcher exits 1; so does a launcher that cannot
finish starting (:meth:`Children.fail`): a script running `make run` sees a
service that failed to start, or died, as a failure.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import NoReturn


class Children:
    """Named child processes of one launcher, stopped together."""

    def __init__(self, prog: str, *, grace_s: float = 25.0) -> None:
        """``grace_s``: past a service's own bounded shutdown (about 20 s at most,
        :mod:`streamtx.service.shutdown`), so SIGKILL is only for a child that is truly stuck."""
        self.prog = prog
        self.grace_s = grace_s
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def on_signals(self) -> None:
        """Ctrl-C and SIGTERM stop everything."""
        signal.signal(signal.SIGINT, self._signalled)
        signal.signal(signal.SIGTERM, self._signalled)

    def _signalled(self, *_: object) -> None:
        self.stop_all()  # asked to stop: a clean exit

    def start(self, name: str, cmd: Sequence[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(list(cmd), env=env)
        self.procs.append((name, proc))
        return proc

    def say(self, text: str) -> None:
        print(f"{self.prog}: {text}", flush=True)

    def stop_all(self, status: int = 0) -> NoReturn:
        """Stop every child, then exit with ``status``."""
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        # One grace for all: N stuck children cost one grace, not N.
        deadline = time.monotonic() + self.grace_s
        for name, proc in self.procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say(f"{name} still running {self.grace_s:g} s after SIGTERM; killing it")
                proc.kill()
                proc.wait()
        self.say("stopped")
        sys.exit(status)

    def fail(self, text: str) -> NoReturn:
        """Say why, stop every child, exit 1."""
        self.say(text)
        self.stop_all(1)

    def watch(self, poll_s: float = 0.5) -> NoReturn:
        """Until a child exits: then stop the others and exit 1 (no service is meant to exit)."""
        while True:
            for name, proc in self.procs:
                if proc.poll() is not None:
                    self.fail(f"{name} exited with {proc.returncode}; stopping")
            time.sleep(poll_s)
