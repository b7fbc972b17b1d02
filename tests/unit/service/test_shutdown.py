"""The bounds on a stopping service: its app's shutdown, and the watchdog behind it."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest

from streamtx.service.shutdown import EXIT_CODE, bounded_exit


@contextlib.asynccontextmanager
async def closing(log: list[str], hang: bool) -> AsyncIterator[None]:
    log.append("open")
    try:
        yield
    finally:
        if hang:  # a flush waiting for a Kafka that is gone
            await asyncio.Event().wait()
        log.append("closed")


async def test_a_shutdown_that_hangs_is_cut_short() -> None:
    log: list[str] = []
    async with bounded_exit(closing(log, hang=True), 0.2, "t"):
        assert log == ["open"]
    assert log == ["open"]  # it never got to its end, and we are out


async def test_a_shutdown_in_time_runs_to_its_end_and_errors_still_propagate() -> None:
    log: list[str] = []
    with pytest.raises(KeyError):
        async with bounded_exit(closing(log, hang=False), 10, "t"):
            raise KeyError("x")
    assert log == ["open", "closed"]


def test_the_watchdog_ends_a_process_stuck_after_its_stop_signal() -> None:
    stuck = ("import threading, time\n"
             "from streamtx.service.shutdown import Watchdog\n"
             "Watchdog(0.3).arm()\n"
             "threading.Event().wait(60)\n")  # a shutdown that never ends
    done = subprocess.run([sys.executable, "-c", stuck], capture_output=True, text=True, timeout=50,
                          check=False)
    assert done.returncode == EXIT_CODE, done.stderr
    assert "exiting now" in done.stderr
