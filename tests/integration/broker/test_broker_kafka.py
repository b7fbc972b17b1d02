"""The broker on the kafka ledger backend (tansu): produce, txn isolation, kill -9 recovery."""

from __future__ import annotations

import time

import pytest

from tests.conftest import kafka_url
from tests.integration.broker.conftest import BrokerFactory, values

P = "persistent://t/n/kf-partition-{}"


@pytest.mark.kafka
def test_broker_on_kafka(broker_factory: BrokerFactory, kafka_bootstrap: str) -> None:
    b = broker_factory(kafka_url(kafka_bootstrap), snapshot_interval_s=0.2, snapshot_segment_size=2)
    b.create_topic("kf", 2)
    b.subscribe("kf", "s", "Exclusive")
    b.produce("kf", ["p0"], msg={"partition": 0})
    b.produce("kf", ["t-commit"], txn_id="5:1", msg={"partition": 0})
    since_ms = time.time() * 1000
    for i in range(5):
        b.produce("kf", [f"t-abort{i}"], txn_id=f"5:{10 + i}", msg={"partition": 1})
        b.end(f"5:{10 + i}", P.format(1), "abort")
    b.produce("kf", ["p1"], msg={"partition": 1})
    assert sorted(values(b.fetch("kf", "s", wait_ms=300))) == ["p0", "p1"]  # t-commit is open
    b.end("5:1", P.format(0), "commit")
    b.produce("kf", ["dup"], producer={"name": "pr", "epoch": 1, "sequence": 1})
    b.produce("kf", ["dup"], producer={"name": "pr", "epoch": 1, "sequence": 1})
    b.wait_snapshot("kf", [1], since_ms)
    before = b.tb_stats("kf", 1)
    assert before["abortedTxnCount"] == 5 and before["segmentsSize"] == 2
    b.proc.restart()
    after = b.tb_stats("kf", 1)
    for key in ("abortedTxnCount", "maxReadPosition", "ongoingTxnSize", "segmentsSize"):
        assert after[key] == before[key], key
    b.subscribe("kf", "all", "Exclusive", "earliest")
    assert sorted(b.drain("kf", "all", consumer="x", ack=False)) == ["dup", "p0", "p1", "t-commit"]
    b.produce("kf", ["x"], expect=409, producer={"name": "pr", "epoch": 0, "sequence": 9})
