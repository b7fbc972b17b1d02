"""Bad settings stop each service at start-up, with a message naming the setting (the
coordinator's other cases: tests/integration/coordinator/test_coordinator_api.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.procs import python_env
from tests.support.services import ServiceProcess

CASES = [
    ("broker", {"STREAMTX_ACK_TIMEOUT_MS": "0"}, "ack_timeout_ms"),
    ("pendingack", {"STREAMTX_BATCHING__MAX_RECORDS": "5"}, "max_records"),
    ("coordinator", {"STREAMTX_FANOUT_REQUEST_TIMEOUT_MS": "0"}, "fanout_request_timeout_ms"),
]


@pytest.mark.parametrize(("service", "env", "setting"), CASES, ids=[f"{s}-{n}" for s, _, n in CASES])
def test_bad_settings_stop_the_start(tmp_path: Path, service: str, env: dict[str, str], setting: str) -> None:
    proc = ServiceProcess(service, {"STREAMTX_LEDGER_URL": f"file://{tmp_path / 'ledgers'}",
                                    "STREAMTX_TEST_LOG_DIR": str(tmp_path), **env})
    try:
        with pytest.raises(RuntimeError, match="exited") as failed:
            proc.start(timeout=60)
    finally:
        proc.stop()
    assert setting in str(failed.value), proc.log_tail()
    assert not (tmp_path / "ledgers").exists()  # stopped before it touched any state


@pytest.mark.parametrize("service", ["broker", "pendingack", "coordinator", "replication"])
def test_a_bad_ledger_url_is_one_line_naming_the_setting(tmp_path: Path, service: str) -> None:
    """It failed in the app's start-up: a 74-line traceback."""
    out = subprocess.run([sys.executable, "-m", f"streamtx.{service}"], capture_output=True, text=True,
                         timeout=60, env=python_env({"STREAMTX_LEDGER_URL": "bogus://x",
                                                     "STREAMTX_PORT": "1"}))
    assert out.returncode == 1
    assert out.stderr.splitlines() == [
        f"streamtx {service}: invalid setting STREAMTX_LEDGER_URL (ledger_url): unknown ledger URL "
        "scheme in 'bogus://x' (file://, kafka://, memory://)"]
