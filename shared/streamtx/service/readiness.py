"""Waiting for a service process to answer ``/readyz`` (supervisors, tests, benchmarks)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import httpx


def wait_ready(
    url: str,
    proc: subprocess.Popen[bytes] | None = None,
    *,
    timeout_s: float = 30.0,
    details: Callable[[], str] = lambda: "",
) -> None:
    """Block until ``{url}/readyz`` answers 200.

    Raises RuntimeError as soon as ``proc`` exits, TimeoutError after
    ``timeout_s``; both carry ``details()`` (a log tail, say). Blocking on
    purpose: callers are synchronous supervisors, never an event loop.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{url}: exited with {proc.returncode} before ready\n{details()}")
        try:
            if httpx.get(f"{url}/readyz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url}: not ready after {timeout_s}s\n{details()}")
