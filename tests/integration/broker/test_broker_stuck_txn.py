"""A txn the coordinator finished but never told this partition about (the client did not
register the partition) is ended by the broker itself once it asks the coordinator.

Such messages are refused at the door now (issue 21 item 2: the broker asks the coordinator
before it stores a transactional message), so the test stores them with a broker that has no
coordinator to ask (as one that predates the check did), then restarts it with one."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.integration.broker.conftest import BrokerFactory
from tests.support.services import ServiceProcess


def test_stuck_txns_are_ended_as_the_coordinator_did(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    ledgers = f"file://{tmp_path / 'ledgers'}"
    tc = ServiceProcess("coordinator", {"STREAMTX_LEDGER_URL": ledgers,
                                        "STREAMTX_TEST_LOG_DIR": str(tmp_path)}).start()
    try:
        unchecked = broker_factory(ledgers)
        unchecked.create_topic("st", 1)
        unchecked.subscribe("st", "s", "Exclusive")
        txn = httpx.post(f"{tc.url}/v1/transactions", json={"timeout_ms": 60000}).json()["txn_id"]
        unchecked.produce("st", ["unregistered"], txn_id=txn)  # the TC does not know this partition
        unchecked.produce("st", ["zombie"], txn_id="1:424242")  # a txn the TC never heard of
        unchecked.proc.stop()
        b = broker_factory(ledgers, coordinator_url=tc.url, stuck_txn_after_s=0.3, stuck_txn_interval_s=0.2)
        b.produce("st", ["again"], expect=409, txn_id=txn)  # refused at the door now
        b.produce("st", ["again"], expect=404, txn_id="1:424242")
        b.produce("st", ["plain"])
        assert b.fetch("st", "s", wait_ms=100) == []
        assert httpx.post(f"{tc.url}/v1/transactions/{txn}/abort").status_code == 200
        deadline = time.monotonic() + 10
        got: list[str] = []
        while time.monotonic() < deadline and not got:
            got = b.drain("st", "s", ack=False)
        assert got == ["plain"]
        stats = b.tb_stats("st", 0)
        assert stats["ongoingTxnSize"] == 0 and stats["abortedTxnCount"] == 2
    finally:
        tc.stop()
