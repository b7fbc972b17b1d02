"""A service whose Kafka is gone still stops on SIGTERM, within its bounded shutdown.

Its write waits for an append that retries until the ledger's operation timeout,
and closing its logs waits for that write: before the bound, a SIGTERM'd
coordinator was still running two minutes later (and, under a supervisor killed
meanwhile, was left behind as an orphan).
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.conftest import kafka_url
from tests.support.procs import tansu_broker
from tests.support.services import ServiceProcess

SHUTDOWN_S = 2.0
# Open requests get 5 s (uvicorn), the shutdown SHUTDOWN_S, and the watchdog ends the process
# 5 s after both: the wait below is twice that, and less than the stuck write's first try takes
# to fail (the Kafka ledger's 30 s operation timeout), which any unbounded shutdown waits for.
EXIT_WAIT_S = 25.0

STUCK_WRITES = {
    "coordinator": ("/v1/transactions", {"timeout_ms": 60_000}),
    "pendingack": ("/v1/pendingack/acks", {"topic": "persistent://t/n/gone", "subscription": "s",
                                           "txn_id": "1:7", "message_ids": ["1:0"]}),
}


@pytest.mark.parametrize("service", sorted(STUCK_WRITES))
def test_a_service_whose_kafka_is_gone_exits_on_sigterm(tmp_path: Path, service: str) -> None:
    path, body = STUCK_WRITES[service]
    with tansu_broker() as bootstrap:
        proc = ServiceProcess(service, {
            "STREAMTX_LEDGER_URL": kafka_url(bootstrap), "STREAMTX_TEST_LOG_DIR": str(tmp_path),
            "STREAMTX_SHUTDOWN_TIMEOUT_S": str(SHUTDOWN_S), "STREAMTX_COORDINATOR_IDS": "0",
        })
        proc.start(60)
        try:
            r = httpx.post(f"{proc.url}{path}", json=body, timeout=30)
            assert r.status_code == 200, r.text  # its log is open as writer on Kafka
            _kill_tansu(bootstrap)
            stuck = threading.Thread(target=_post_quietly, args=(f"{proc.url}{path}", body), daemon=True)
            stuck.start()  # a write the service cannot finish: Kafka is gone
            _wait_for(lambda: "Got error produce response" in proc.log_tail(400),
                      "the write's append to be retrying against the gone Kafka", proc)
            assert proc.proc is not None
            proc.proc.send_signal(signal.SIGTERM)
            try:
                code = proc.proc.wait(EXIT_WAIT_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{service} still running {EXIT_WAIT_S:.0f} s after SIGTERM:\n{proc.log_tail()}")
            assert code in (0, -signal.SIGTERM), proc.log_tail()
        finally:
            proc.kill9()


def _kill_tansu(bootstrap: str) -> None:
    """The session's tansu is another process: this one is ours alone, found by its port."""
    port = bootstrap.rsplit(":", 1)[1]
    found = subprocess.run(["pgrep", "-f", f"tansu broker --listener-url tcp://127.0.0.1:{port} "],
                           capture_output=True, text=True, check=False).stdout.split()
    assert len(found) == 1, found
    subprocess.run(["kill", "-9", found[0]], check=True)


def _wait_for(check: Callable[[], bool], what: str, proc: ServiceProcess, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s}s: {what}\n{proc.log_tail()}"
        time.sleep(0.1)


def _post_quietly(url: str, body: object) -> None:
    try:
        httpx.post(url, json=body, timeout=EXIT_WAIT_S)
    except httpx.HTTPError:
        pass  # the service stopped under it: that is the point
