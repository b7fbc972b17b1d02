"""``make bench-recovery``'s logic in a short run: one kill -9 of each kind, its last line (issue 25);
and the same with two replicas of each service over Redis (``--replicas``).

The figures of a run this short on a shared machine mean little; what is checked
is that each kind is killed, restarted and recovered from, the job stays exactly
once, and the last line has the issue's exact format with a number for each kind.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.procs import python_env

LINE = re.compile(r"^bench recovery: broker_p99_ms=\d+ coordinator_p99_ms=\d+ pendingack_p99_ms=\d+ "
                  r"worker_p99_ms=\d+ longest_stall_ms=\d+$")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(400),
    pytest.mark.skipif(
        not all(importlib.util.find_spec(f"streamtx.{s}") for s in ("coordinator", "broker", "pendingack")),
        reason="needs the coordinator, broker and pending-ack services",
    ),
]


def test_one_kill_of_each_kind_is_recovered_from_and_reported(tmp_path: Path) -> None:
    bench = Path(__file__).resolve().parents[2] / "bench" / "recovery.py"
    proc = subprocess.run([sys.executable, str(bench), "--kills", "1", "--run-dir", str(tmp_path / "run")],
                          env=python_env(), capture_output=True, text=True, timeout=380)
    print(proc.stdout)
    print(proc.stderr[-5000:], file=sys.stderr)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0
    assert LINE.match(lines[-1]), lines[-1]  # a number for each kind: none of them "never"
    assert lines[-2].startswith("demo reshard: ")
    assert " kills=4 lost=0 duplicate=0 aborted_read=0 nonmonotonic=0" in lines[-2]
    for kind in ("broker", "coordinator", "pendingack", "worker"):
        assert re.search(rf"^kill -9 {kind} +1 ", proc.stdout, re.M), kind


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server (make setup)")
def test_replicas_one_kill_of_each_kind_spares_replica_0_and_is_reported(tmp_path: Path) -> None:
    bench = Path(__file__).resolve().parents[2] / "bench" / "recovery.py"
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, str(bench), "--replicas", "--kills", "1", "--run-dir", str(run)],
                          env=python_env(), capture_output=True, text=True, timeout=380)
    print(proc.stdout)
    print(proc.stderr[-5000:], file=sys.stderr)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0
    line = LINE.pattern.replace("^bench recovery:", "^bench recovery replicas:")
    assert re.match(line, lines[-1]), lines[-1]
    assert " kills=4 lost=0 duplicate=0 aborted_read=0 nonmonotonic=0" in lines[-2]
    # The replicas ran (each with its log) and the plan killed the ones behind replica 0.
    assert {p.name for p in (run / "logs").glob("*-1.log")} >= {"broker-1.log", "pendingack-1.log",
                                                                "coordinator-1.log"}
    assert "kills: broker-1, coordinator-1, pendingack-1, worker-0" in proc.stdout
    for kind in ("broker", "coordinator", "pendingack", "worker"):
        assert re.search(rf"^kill -9 {kind} +1 ", proc.stdout, re.M), kind
