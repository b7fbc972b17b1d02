"""The resharding demo under chaos: kill -9s and zombies, and the checker finds nothing.

Runs ``streamtx demo reshard --chaos --zombie`` as a user would (a subprocess,
the real services on file ledgers) for about a minute with a kill every 4 s,
and reads its last line. Slow (deselect with ``-m "not slow"``), but part of
``make test`` and CI.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.procs import python_env

SUMMARY = re.compile(
    r"^demo reshard: records=(?P<records>\d+) mb_per_s=(?P<mb>[\d.]+) e2e_p99_ms=(?P<p99>\S+) "
    r"kills=(?P<kills>\d+) lost=(?P<lost>\d+) duplicate=(?P<duplicate>\d+) "
    r"aborted_read=(?P<aborted_read>\d+) nonmonotonic=(?P<nonmonotonic>\d+)$"
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        not all(importlib.util.find_spec(f"streamtx.{s}") for s in ("coordinator", "broker", "pendingack")),
        reason="needs the coordinator, broker and pending-ack services",
    ),
]


def run_demo(tmp_path: Path, *args: str) -> tuple[int, list[str]]:
    env = python_env()
    proc = subprocess.run(
        [sys.executable, "-m", "streamtx.cli", "demo", "reshard", "--quiet",
         "--run-dir", str(tmp_path / "run"), *args],
        env=env, capture_output=True, text=True, timeout=840,
    )
    lines = proc.stdout.strip().splitlines()
    print(proc.stdout)
    print(proc.stderr[-5000:], file=sys.stderr)
    return proc.returncode, lines


def test_reshard_exactly_once_under_chaos(tmp_path: Path) -> None:
    code, lines = run_demo(
        tmp_path, "--duration", "60", "--rate", "500", "--workers", "2", "--chaos", "--kill-every", "4",
        "--zombie", "--txn-timeout-ms", "4000",
    )
    assert lines, "no output"
    m = SUMMARY.match(lines[-1])
    assert m, f"last line is not the summary: {lines[-1]!r}"
    assert int(m["records"]) >= 60 * 500 // 2  # the generator falls behind while the broker is down
    assert int(m["kills"]) >= 10
    assert (m["lost"], m["duplicate"], m["aborted_read"], m["nonmonotonic"]) == ("0", "0", "0", "0")
    assert code == 0
    # Zombies: paused inside a transaction past its timeout; none of those may commit.
    zombies = next(line for line in lines if line.startswith("zombies: "))
    assert not zombies.startswith("zombies: 0 "), zombies
    assert "committed" not in zombies, zombies
