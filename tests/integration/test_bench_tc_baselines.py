"""bench-tc's baselines start: the bare FastAPI app and the same endpoint on the service kit
(``bench/coordinator.py --serve-bare/--serve-kit``). A name the package stopped exporting left the
bare one exiting at once, and ``make bench-tc`` failing, with every test green."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.procs import ROOT, free_port, python_env, stop, wait_for_port


@pytest.mark.parametrize("flag", ["--serve-bare", "--serve-kit"])
def test_a_baseline_app_serves_the_benchmarked_route(flag: str, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "baseline.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "coordinator.py"), flag, str(port)],
                                env=python_env({}), stdout=out, stderr=out)
    try:
        try:
            wait_for_port(port, proc=proc)
        except RuntimeError as exc:
            raise AssertionError(log.read_text(errors="replace")[-2000:]) from exc
        r = httpx.post(f"http://127.0.0.1:{port}/v1/transactions", json={"timeout_ms": 1000}, timeout=10)
        assert r.status_code == 200 and r.json()["txn_id"] == "0:0", r.text
    finally:
        stop(proc)
