"""The binary batch path (application/x-streamtx-batch) against a real broker process."""

from __future__ import annotations

import struct

from streamtx.wire import batch as wire
from tests.integration.broker.conftest import BrokerClient, BrokerFactory, values

BATCH = {"content-type": wire.CONTENT_TYPE}
P = "persistent://t/n/bin-partition-{}"


def produce(b: BrokerClient, body: bytes, expect: int = 200) -> list[str]:
    r = b.http.post("/v1/topics/t/n/bin/messages", content=body, headers=BATCH)
    assert r.status_code == expect, r.text
    if expect != 200:
        assert r.json()["error"]
        return []
    assert r.headers["content-type"] == wire.CONTENT_TYPE
    return wire.decode_produced(r.content)


def fetch(b: BrokerClient, sub: str, max: int = 100, wait_ms: int = 100) -> list[wire.Received]:
    r = b.http.get(f"/v1/topics/t/n/bin/subscriptions/{sub}/messages",
                   params={"max": max, "wait_ms": wait_ms, "consumer": "c1"},
                   headers={"accept": wire.CONTENT_TYPE})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == wire.CONTENT_TYPE
    return wire.decode_messages_answer(r.content)


def ack(b: BrokerClient, sub: str, ids: list[str], expect: int = 200, cumulative: bool = False) -> None:
    r = b.http.post(f"/v1/topics/t/n/bin/subscriptions/{sub}/acks", headers=BATCH,
                    content=wire.encode_acks(ids, cumulative=cumulative))
    assert r.status_code == expect, r.text


def msg(value: str, key: str | None = None, **props: str) -> wire.Msg:
    return wire.Msg(value.encode(), key, props)


def test_produce_fetch_ack_over_the_binary_path(broker: BrokerClient) -> None:
    b = broker  # the fast lane serves these routes
    b.create_topic("bin", 2)
    b.subscribe("bin", "s")
    b.subscribe("bin", "j")  # read as JSON: entries stored from a binary produce read alike
    ids = produce(b, wire.encode_produce([(1, [msg("a0", "k", p="1"), msg("a1")]), (0, [msg("b0")])]))
    assert len(ids) == 3 and ids[0].endswith(":0") and ids[1].endswith(":1") and ids[2].count(":") == 1
    # Two open transactions; read-committed holds back everything after their first messages.
    produce(b, wire.encode_produce([(0, [msg("x1"), msg("x2")])], txn=(5, 5)))
    produce(b, wire.encode_produce([(1, [msg("y1")])], txn=(6, 6)))
    produce(b, wire.encode_produce([(1, [msg("after")])]))
    got = fetch(b, "s", max=2)  # a limit inside an entry: the rest of it comes next, alone
    got += fetch(b, "s")
    assert sorted((m.value, m.key, m.properties) for m in got) == [
        (b"a0", "k", {"p": "1"}), (b"a1", None, {}), (b"b0", None, {})]
    assert {m.message_id for m in got} == set(ids)
    assert sorted(values(b.fetch("bin", "j"))) == ["a0", "a1", "b0"]
    b.end("5:5", P.format(0), "abort")
    b.end("6:6", P.format(1), "commit")
    later = fetch(b, "s")
    assert sorted(m.value for m in later) == [b"after", b"y1"]  # the aborted x1, x2 never; no markers
    assert fetch(b, "s", wait_ms=0) == []
    ack(b, "s", [m.message_id for m in got + later])
    ack(b, "s", [got[0].message_id], expect=200)  # acking twice outside a txn is harmless
    stats = b.call("GET", "/v1/topics/t/n/bin/subscriptions/s/stats")
    assert stats["msgBacklog"] == 0 and stats["unackedMessages"] == 0


def test_bad_binary_bodies_store_nothing_and_a_named_retry_is_deduplicated(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(fast_lane=False)  # FastAPI serves the same handlers, same format
    broker.create_topic("bin", 2)
    broker.subscribe("bin", "s")
    _, good = wire.encode_messages([msg("v", "k")])
    frame = wire.MAGIC + bytes([wire.VERSION, wire.PRODUCE, 0]) + struct.pack(">I", 1)

    def one(partition: int, n: int, body: bytes) -> bytes:
        return frame + struct.pack(">III", partition, n, len(body)) + body

    assert produce(broker, one(0, 1, good))
    produce(broker, one(7, 1, good), expect=404)  # a partition the topic does not have
    for bad in (one(0, 1, good[:-1] + b"\xff\xff"), one(0, 2, good),
                one(0, 1, wire.encode_messages([msg("v")], first_index=3)[1]),
                one(0, 1, good.replace(b"k", b"\xff")), b"STXB\x01\x01", b'{"messages": []}'):
        produce(broker, bad, expect=400)
    assert [m.value for m in fetch(broker, "s")] == [b"v"]  # only the good one landed
    named = wire.encode_produce([(0, [msg("d1"), msg("d2")]), (1, [msg("d3")])], producer=("gen", 1, 0))
    first = produce(broker, named)
    assert produce(broker, named) == first  # the retry: the first try's ids, nothing stored twice
    assert sorted(m.value for m in fetch(broker, "s")) == [b"d1", b"d2", b"d3"]
    r = broker.http.post("/v1/topics/t/n/bin/subscriptions/s/acks", headers=BATCH, content=b"STXB\x01\x04")
    assert r.status_code == 400 and r.json()["error"] == "malformed"
