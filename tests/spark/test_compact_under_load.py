"""Compaction while the resharding demo runs under chaos: the checker finds no anomaly.

The demo (``streamtx demo reshard --chaos``: kill -9s and restarts of the
services, file ledgers) runs as a subprocess; meanwhile the test runs the
``compact`` job over its ledgers again and again. The services adopt the bases
while they run and read them when they recover; the demo's checker then reads
every output and history and must find nothing lost, duplicated, aborted or
reordered.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.test_demo_chaos import SUMMARY
from tests.support.procs import python_env

from streamtx.jobs import compact
from streamtx.ledger import segment

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _trim_start(ledgers: Path, name: str) -> int:
    try:
        raw = (ledgers / segment.ledger_dir_name(name) / "TRIM").read_bytes()
    except FileNotFoundError:
        return 0
    return segment.decode_trim_state(raw)[0]


def test_compaction_during_a_transactional_workload(spark: Any, tmp_path: Path) -> None:
    run = tmp_path / "run"
    ledgers = run / "ledgers"
    env = python_env()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamtx.cli", "demo", "reshard", "--quiet", "--run-dir", str(run),
         "--duration", "15", "--rate", "300", "--workers", "2", "--chaos", "--kill-every", "5",
         "--txn-timeout-ms", "4000", "--commit-interval-ms", "300"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    cuts: dict[str, list[int]] = {}
    try:
        while proc.poll() is None:
            if any(ledgers.glob("txnlog*")):
                for r in compact.run(spark, f"file://{ledgers}"):
                    cuts.setdefault(r.ledger, []).append(r.cut)
            time.sleep(1)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print(out)
    print(err[-5000:], file=sys.stderr)
    lines = out.strip().splitlines()
    m = SUMMARY.match(lines[-1]) if lines else None
    assert m, f"last line is not the summary: {lines[-1:]!r}"
    assert (m["lost"], m["duplicate"], m["aborted_read"], m["nonmonotonic"]) == ("0", "0", "0", "0")
    assert proc.returncode == 0
    assert any(name.startswith("txnlog/") for name in cuts), cuts
    assert any(name.startswith("pendingack/") for name in cuts), cuts
    assert any(name.startswith("tbsnapshot/") for name in cuts), cuts
    # Owners adopted bases: some log is trimmed at or past a cut the job chose.
    assert any(_trim_start(ledgers, name) >= min(cs) for name, cs in cuts.items()), cuts
