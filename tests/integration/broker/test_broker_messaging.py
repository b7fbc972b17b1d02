"""Produce, dispatch and acks against a real broker process on the file ledger."""

from __future__ import annotations

import time
import zlib

from tests.integration.broker.conftest import BrokerClient, values


def test_produce_fetch_ack_and_stats(broker: BrokerClient) -> None:
    broker.create_topic("a", 3)
    assert broker.call("GET", "/admin/v2/persistent/t/n/a/partitions") == {"partitions": 3}
    broker.subscribe("a", "s")
    ids = broker.produce("a", [f"m{i}" for i in range(12)])["message_ids"]
    assert len(ids) == 12 and len(set(ids)) == 12
    stats = broker.call("GET", "/admin/v2/persistent/t/n/a/stats")
    assert stats["subscriptions"]["s"]["msgBacklog"] == 12
    got = broker.fetch("a", "s", max=100)
    assert sorted(values(got)) == sorted(f"m{i}" for i in range(12))
    broker.ack("a", "s", [m["message_id"] for m in got])
    assert broker.fetch("a", "s", wait_ms=50) == []
    stats = broker.call("GET", "/admin/v2/persistent/t/n/a/stats")
    assert stats["subscriptions"]["s"]["msgBacklog"] == 0
    assert broker.call("GET", "/v1/topics/t/n/a/subscriptions/s/stats")["msgOutCounter"] == 12


def test_messages_in_order_per_partition_and_cumulative_ack(broker: BrokerClient) -> None:
    broker.create_topic("o", 1)
    broker.subscribe("o", "s", "Exclusive")
    for i in range(5):
        broker.produce("o", [f"{i}-{j}" for j in range(3)])
    got = broker.fetch("o", "s", max=100)
    assert values(got) == [f"{i}-{j}" for i in range(5) for j in range(3)]
    broker.ack("o", "s", [got[7]["message_id"]], cumulative=True)  # through 2-1
    broker.proc.restart()
    assert values(broker.fetch("o", "s", max=100)) == [f"{i}-{j}" for i in range(5) for j in range(3)][8:]


def test_fetch_limited_to_partitions(broker: BrokerClient) -> None:
    broker.create_topic("pf", 3)
    broker.subscribe("pf", "s", "Exclusive")
    for p in range(3):
        for i in range(4):
            broker.produce("pf", [f"{p}-{i}"], msg={"partition": p})
    path = "/v1/topics/t/n/pf/subscriptions/s/messages"
    got = broker.call("GET", path, params={"max": 100, "wait_ms": 50, "partitions": "2,0",
                                          "consumer": "c1"})["messages"]
    assert sorted(values(got)) == sorted(f"{p}-{i}" for p in (0, 2) for i in range(4))
    assert {m["partition"] for m in got} == {0, 2}
    assert values(broker.fetch("pf", "s", max=100)) == [f"1-{i}" for i in range(4)]
    broker.call("GET", path, 404, params={"partitions": "3"})  # a partition the topic does not have
    broker.call("GET", path, 400, params={"partitions": "a"})


def test_keyed_routing(broker: BrokerClient) -> None:
    broker.create_topic("k", 4)
    broker.subscribe("k", "s")
    keys = [f"key{i}" for i in range(20)]
    for k in keys:
        broker.produce("k", [k], msg={"key": k})
    for m in broker.fetch("k", "s", max=100):
        assert m["partition"] == zlib.crc32(m["key"].encode()) % 4
    pinned = broker.produce("k", ["x"], msg={"partition": 2})["message_ids"][0]
    assert broker.fetch("k", "s")[0]["message_id"] == pinned
    broker.produce("k", ["x"], expect=404, msg={"partition": 9})  # unknown partition (as in every path)
    broker.produce("nope", ["x"], expect=404)


def test_producer_dedup_and_fencing(broker: BrokerClient) -> None:
    broker.create_topic("p", 2)
    broker.subscribe("p", "s")
    first = broker.produce("p", ["a", "b", "c"], producer={"name": "pr", "epoch": 1, "sequence": 1})
    again = broker.produce("p", ["a", "b", "c"], producer={"name": "pr", "epoch": 1, "sequence": 1})
    assert again == first
    broker.produce("p", ["d"], producer={"name": "pr", "epoch": 2, "sequence": 0})
    err = broker.produce("p", ["zombie"], expect=409, producer={"name": "pr", "epoch": 1, "sequence": 2})
    assert err["error"] == "conflict"
    # The fence and the dedup state survive a crash (rebuilt from the ledger).
    broker.proc.restart()
    broker.produce("p", ["zombie"], expect=409, producer={"name": "pr", "epoch": 1, "sequence": 3})
    assert broker.produce("p", ["d"], producer={"name": "pr", "epoch": 2, "sequence": 0})["message_ids"]
    assert sorted(broker.drain("p", "s")) == ["a", "b", "c", "d"]


def test_exclusive_second_consumer_409(broker: BrokerClient) -> None:
    broker.create_topic("e", 1)
    broker.subscribe("e", "s", "Exclusive")
    broker.produce("e", ["x"])
    assert values(broker.fetch("e", "s", consumer="one")) == ["x"]
    err = broker.fetch("e", "s", consumer="two", expect=409)
    assert err["error"] == "conflict"


def test_shared_redelivery_after_ack_timeout_and_nack(broker: BrokerClient) -> None:
    broker.create_topic("r", 2)
    broker.subscribe("r", "s")
    broker.produce("r", ["a", "b"], msg={"partition": 0})
    got = broker.fetch("r", "s", consumer="c1")
    assert sorted(values(got)) == ["a", "b"]
    assert broker.fetch("r", "s", consumer="c2", wait_ms=50) == []  # still out with c1
    t0 = time.monotonic()
    again = broker.fetch("r", "s", consumer="c2", wait_ms=30_000)  # ack timeout is 600 ms
    assert sorted(values(again)) == ["a", "b"] and time.monotonic() - t0 < 15
    broker.ack("r", "s", [again[0]["message_id"]])
    broker.call("POST", "/v1/topics/t/n/r/subscriptions/s/nacks",
                json={"message_ids": [again[1]["message_id"]]})
    third = broker.fetch("r", "s", consumer="c3", wait_ms=100)
    assert [m["message_id"] for m in third] == [again[1]["message_id"]]
    assert third[0]["redelivery_count"] >= 2
    broker.ack("r", "s", [third[0]["message_id"]])
    # Acked, so nothing is left to redeliver, however long one waits.
    stats = broker.call("GET", "/v1/topics/t/n/r/subscriptions/s/stats")
    assert (stats["msgBacklog"], stats["unackedMessages"], stats["pendingRedelivery"]) == (0, 0, 0), stats
    assert broker.fetch("r", "s", consumer="c1", wait_ms=50) == []


def test_long_poll_wakes_on_produce(broker: BrokerClient) -> None:
    import threading

    broker.create_topic("w", 1)
    broker.subscribe("w", "s")
    # Its own client: an httpx.Client is not to be shared between threads.
    late = BrokerClient(broker.proc)
    timer = threading.Timer(0.3, lambda: late.produce("w", ["late"]))
    t0 = time.monotonic()
    timer.start()
    got = broker.fetch("w", "s", wait_ms=30_000)
    timer.join()
    late.http.close()
    assert values(got) == ["late"] and time.monotonic() - t0 < 15  # woken, not timed out


def test_bad_input_is_4xx(broker: BrokerClient) -> None:
    broker.create_topic("bad", 1)
    for body in ('{"messages":[{"key":"\\ud800","value":""}]}',
                 '{"messages":[{"properties":{"\\ud800":"x"},"value":""}]}',
                 '{"messages":[{"value":"not base64!"}]}',
                 '{"messages":[{"value":""}],"txn_id":"1"}',
                 '{"messages":"x"}'):
        r = broker.http.post("/v1/topics/t/n/bad/messages", content=body,
                             headers={"content-type": "application/json"})
        assert r.status_code == 400, (body, r.text)
    broker.call("PUT", "/admin/v2/persistent/t/n/bad/partitions", 409, json={"partitions": 2})
    broker.call("PUT", "/admin/v2/persistent/t/n/bad/partitions", 400, json={"partitions": 0})
    broker.subscribe("bad", "s")
    broker.ack("bad", "s", ["x:y"], expect=400)
    broker.ack("bad", "s", ["1:2"], expect=404)  # well formed, but no message of this topic
    broker.call("GET", "/v1/topics/t/n/bad/subscriptions/nope/messages", 404)
