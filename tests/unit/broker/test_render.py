"""A fetch rendered as JSON and as the binary batch format carries the same messages."""

from __future__ import annotations

import base64
from typing import Any

from streamtx.broker.dispatch import render_batch, render_json
from streamtx.broker.partition import RawBatch
from streamtx.broker.pendingack_client import PendingAckClient
from streamtx.broker.registry import Broker
from streamtx.broker.settings import BrokerSettings
from streamtx.broker.subscription import SubscriptionType
from streamtx.broker.topic import Outgoing
from streamtx.contracts.msgid import MessageId
from streamtx.ledger import open_ledger_factory
from streamtx.records.partition import Message
from streamtx.wire import batch as wire

T = "persistent://t/n/r"


def as_json(m: wire.Received) -> dict[str, Any]:
    out = {"message_id": m.message_id, "partition": m.partition, "key": m.key,
           "value": base64.b64encode(m.value).decode(), "properties": m.properties,
           "publish_time": m.publish_time_ms}
    return {**out, "redelivery_count": m.redelivery_count} if m.redelivery_count else out


async def test_json_and_binary_answers_agree_on_partial_and_redelivered_entries() -> None:
    settings = BrokerSettings(ledger_url="memory://", ack_timeout_ms=60_000)  # type: ignore[call-arg]
    b = Broker(open_ledger_factory("memory://"), settings, PendingAckClient(None, 1.0))
    await b.start()
    try:
        await b.create_topic(T, 2)
        topic = b.topic(T)
        sub = await b.create_subscription(T, "s", SubscriptionType.SHARED, "earliest")
        await topic.produce([Outgoing(Message(f"j{i}".encode(), f"k{i}", {"i": str(i)}, i), 0)
                             for i in range(3)], None, None)
        _, body = wire.encode_messages([wire.Msg(b"solo", None, {})])
        await topic.produce_sections([(1, RawBatch(body, 1, 0, 4))], None, None)
        first = await sub.fetch_raw("c1", 2, 0)  # stops inside the three-message entry
        rest = await sub.fetch_raw("c1", 10, 0)
        await sub.nack([MessageId.parse(render_json(first)[1]["message_id"])])
        again = await sub.fetch_raw("c2", 10, 0)
        for handed in (first, rest, again):
            binary = [as_json(m) for m in wire.decode_messages_answer(render_batch(handed))]
            assert binary == render_json(handed)
        everything = render_json(first + rest)
        assert sorted(m["value"] for m in everything) == sorted(
            base64.b64encode(v).decode() for v in (b"j0", b"j1", b"j2", b"solo"))
        assert [m.get("redelivery_count") for m in render_json(again)] == [1]
    finally:
        await b.close()
