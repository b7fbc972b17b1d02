"""The pending-ack store on the kafka backend (the session's tansu broker): kill -9 recovery."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import kafka_url
from tests.integration.pendingack.conftest import FakeBroker
from tests.integration.pendingack.test_pendingack_service import ack, held, txn_call
from tests.support.services import ServiceProcess

pytestmark = pytest.mark.kafka


def test_kill9_restart_recovers_on_kafka(
    tmp_path: Path, kafka_bootstrap: str, fake_broker: FakeBroker
) -> None:
    proc = ServiceProcess("pendingack", {
        "STREAMTX_LEDGER_URL": kafka_url(kafka_bootstrap),
        "STREAMTX_BROKER_URL": fake_broker.url,
        "STREAMTX_TEST_LOG_DIR": str(tmp_path),
    }).start()
    try:
        url = proc.url
        for i in range(10):
            assert ack(url, f"0:{i}", f"1:{i}").status_code == 200
        admin = f"{url}/admin/v3/transactions"
        assert httpx.post(f"{admin}/pendingAckBatchLog", json={"enabled": False}).status_code == 200
        for i in range(10, 15):
            assert ack(url, f"0:{i}", f"1:{i}").status_code == 200
        for i in range(0, 15, 3):
            assert txn_call(url, "end", f"0:{i}", action="commit").status_code == 200

        proc.restart()

        assert held(url) == [f"1:{i}" for i in range(15) if i % 3]
        assert ack(url, "9:9", "1:1").status_code == 409
        assert ack(url, "9:9", "1:0").status_code == 200  # committed before the crash: forgotten
    finally:
        proc.stop()
