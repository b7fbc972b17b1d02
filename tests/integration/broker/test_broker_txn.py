"""Transactions on a real broker: read isolation, markers, recovery from TB snapshots."""

from __future__ import annotations

import time

from tests.integration.broker.conftest import BrokerClient, BrokerFactory, values

P0 = "persistent://t/n/{}-partition-0"


def test_txn_produce_invisible_until_commit(broker: BrokerClient) -> None:
    broker.create_topic("c", 1)
    broker.subscribe("c", "s")
    broker.produce("c", ["t1", "t2"], txn_id="1:1")
    assert broker.fetch("c", "s", wait_ms=100) == []
    assert broker.tb_stats("c", 0)["ongoingTxnSize"] == 1
    res = broker.end("1:1", P0.format("c"), "commit")
    assert res["marker"] and res["action"] == "commit"
    assert broker.end("1:1", P0.format("c"), "commit") == res  # idempotent: same marker, nothing new
    assert broker.drain("c", "s") == ["t1", "t2"]
    # Ending the other way now conflicts; a commit of a txn that never produced here writes nothing.
    broker.call("POST", "/v1/txn/partitions/end", 409,
                json={"txn_id": "1:1", "partition": P0.format("c"), "action": "abort"})
    assert broker.end("9:9", P0.format("c"), "commit")["marker"] is None
    broker.produce("c", ["late"], expect=409, txn_id="1:1")  # a txn ended here takes no more messages
    assert broker.drain("c", "s") == []


def test_an_abort_where_the_txn_never_produced_refuses_its_late_produce_after_a_restart(
    broker: BrokerClient,
) -> None:
    broker.create_topic("z", 1)
    broker.subscribe("z", "s")
    res = broker.end("7:7", P0.format("z"), "abort")
    assert res["marker"] is not None  # logged, not only remembered
    broker.proc.kill9()
    broker.proc.start()
    broker.produce("z", ["zombie"], expect=409, txn_id="7:7")
    broker.produce("z", ["plain"])
    assert broker.tb_stats("z", 0)["ongoingTxnSize"] == 0
    assert broker.drain("z", "s") == ["plain"]  # readers are not held back by the zombie


def test_abort_hides_and_reader_stops_at_open_txn(broker: BrokerClient) -> None:
    broker.create_topic("i", 1)
    broker.subscribe("i", "s", "Exclusive")
    broker.produce("i", ["before"])
    broker.produce("i", ["open-1"], txn_id="2:1")
    broker.produce("i", ["plain-after"])
    broker.produce("i", ["aborted"], txn_id="2:2")
    broker.produce("i", ["open-2"], txn_id="2:1")
    # Nothing after the first message of the open txn 2:1, not even the plain message.
    assert values(broker.fetch("i", "s", wait_ms=100)) == ["before"]
    broker.end("2:2", P0.format("i"), "abort")
    assert broker.fetch("i", "s", wait_ms=100) == []
    t0 = time.monotonic()
    import threading
    threading.Timer(0.3, lambda: broker.end("2:1", P0.format("i"), "commit")).start()
    got = broker.fetch("i", "s", wait_ms=30_000)  # the commit wakes the long poll
    assert time.monotonic() - t0 < 15  # woken, not timed out (loose: CI machines are noisy)
    got += broker.fetch("i", "s", wait_ms=100)
    assert values(got) == ["open-1", "plain-after", "open-2"]
    stats = broker.tb_stats("i", 0)
    assert stats["abortedTxnCount"] == 1 and stats["ongoingTxnSize"] == 0


def _everything(broker: BrokerClient, topic: str, sub: str) -> list[str]:
    broker.subscribe(topic, sub, "Exclusive", "earliest")
    return broker.drain(topic, sub, consumer=sub, ack=False)


def test_kill9_recovers_tb_from_snapshot_with_same_messages(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(snapshot_interval_s=0.2, snapshot_segment_size=3, snapshot_every_ops=5)
    broker.create_topic("k", 2)
    since_ms = time.time() * 1000
    for i in range(20):
        part = i % 2
        txn = f"3:{i}"
        broker.produce("k", [f"v{i}"], txn_id=txn, msg={"partition": part})
        broker.produce("k", [f"plain{i}"], msg={"partition": part})
        broker.end(txn, P0.format("k")[:-1] + str(part), "abort" if i % 3 else "commit")
    broker.produce("k", ["still-open"], txn_id="3:99", msg={"partition": 0})
    broker.produce("k", ["behind-open"], msg={"partition": 0})
    broker.wait_snapshot("k", [0, 1], since_ms)
    before = _everything(broker, "k", "r1")
    stats_before = [broker.tb_stats("k", p) for p in (0, 1)]
    assert stats_before[0]["lastSnapshotTimestamp"] > 0 and stats_before[0]["segmentsSize"] >= 1
    assert "still-open" not in before and "behind-open" not in before
    broker.proc.restart()
    after = _everything(broker, "k", "r2")
    assert after == before
    stats_after = [broker.tb_stats("k", p) for p in (0, 1)]
    for b, a in zip(stats_before, stats_after, strict=True):
        for key in ("maxReadPosition", "ongoingTxnSize", "abortedTxnCount"):
            assert a[key] == b[key], key
    broker.end("3:99", P0.format("k"), "commit")
    assert sorted(_everything(broker, "k", "r3")) == sorted([*before, "still-open", "behind-open"])


def test_tb_stats_forms_trim_and_metrics(broker: BrokerClient) -> None:
    broker.create_topic("m", 2)
    for i in range(6):
        broker.produce("m", [f"a{i}"], txn_id=f"4:{i}", msg={"partition": 0})
        broker.end(f"4:{i}", P0.format("m"), "abort")
    broker.produce("m", ["open"], txn_id="4:100", msg={"partition": 0})
    by_query = broker.tb_stats("m", 0)
    by_name = broker.call("GET", "/admin/v3/transactions/transactionBufferStats/t/n/m-partition-0")
    whole = broker.call("GET", "/admin/v3/transactions/transactionBufferStats/t/n/m")
    assert by_query["abortedTxnCount"] == by_name["abortedTxnCount"] == whole["abortedTxnCount"] == 6
    assert by_query["ongoingTxnSize"] == 1 and len(whole["partitions"]) == 2
    assert by_query["segmentsSize"] == 1 and by_query["unsealedAbortedTxnIdSize"] == 2  # segments of 4
    first_open = broker.produce("m", ["x"], msg={"partition": 0})["message_ids"][0]
    # Trimming the partition drops the aborted ids whose markers went with it.
    out = broker.call("POST", "/admin/v2/persistent/t/n/m/trim",
                      json={"partition": 0, "before": first_open})
    assert out["abortedIdsDropped"] == 6
    assert broker.tb_stats("m", 0)["abortedTxnCount"] == 0
    broker.end("4:100", P0.format("m"), "commit")  # the open txn's message was not trimmed
    assert _everything(broker, "m", "after-trim") == ["open", "x"]
    metrics = broker.http.get("/metrics").text
    for name in ("streamtx_broker_messages_in_total", "streamtx_broker_txn_markers_total",
                 "pulsar_txn_tb_active_total", "pulsar_txn_tb_aborted_total"):
        assert name in metrics, name
    broker.call("GET", "/admin/v3/transactions/transactionBufferStats/t/n/nope", 404)
    broker.call("POST", "/v1/txn/partitions/end", 400,
                json={"txn_id": "x", "partition": "p", "action": "commit"})
