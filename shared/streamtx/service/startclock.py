"""How long this process took to start, by phase: issue 25's breakdown of a restart after a crash.

``mark(phase)`` notes the first time a phase was reached (wall clock);
:func:`startup_line` says how long after the process started (from ``/proc``)
each came: a restarted service logs it once ready, a demo worker once it
rejoined, so the log shows how much of a recovery is the interpreter and its
imports and how much the service's own start-up (ledger open and replay).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_marks: dict[str, float] = {}


def process_started_at() -> float | None:
    """When this process started (wall clock, s; to the kernel's tick, 10 ms), None off Linux.
    From the system's uptime, not its boot time, which ``/proc`` gives to the second only."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return time.time() - (uptime_s - start_ticks / os.sysconf("SC_CLK_TCK"))


def mark(phase: str) -> None:
    """Note that ``phase`` was reached now (the first time only)."""
    _marks.setdefault(phase, time.time())


def startup_line(now: float | None = None) -> str:
    """``2.41 s after the process started: imported 1.80, ready 2.41`` (each mark's offset, in order)."""
    now = time.time() if now is None else now
    started = process_started_at()
    if started is None:
        return "(process start unknown)"
    ordered = sorted(_marks.items(), key=lambda m: m[1])
    marks = ", ".join(f"{phase} {at - started:.2f}" for phase, at in ordered)
    return f"{now - started:.2f} s after the process started: {marks}"
