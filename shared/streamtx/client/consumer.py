"""Consumers: receive from a subscription by long-poll, ack (maybe in a transaction), nack."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from streamtx.client.http import Endpoint
from streamtx.client.names import full_name, path_of
from streamtx.client.transaction import Transaction
from streamtx.wire import batch as wire


@dataclass(frozen=True, slots=True)
class Message:
    """A received message (committed data only)."""

    message_id: str
    partition: int | None
    key: str | None
    value: bytes
    properties: Mapping[str, str]
    publish_time: Any
    replicated_from: str | None = None  # the cluster it was first written in, if copied here
    source_message_id: str | None = None  # its id there

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Message:
        return cls(
            message_id=str(body["message_id"]),
            partition=body.get("partition"),
            key=body.get("key"),
            value=base64.b64decode(body.get("value") or ""),
            properties=dict(body.get("properties") or {}),
            publish_time=body.get("publish_time"),
            replicated_from=body.get("replicated_from"),
            source_message_id=body.get("source_message_id"),
        )


    @classmethod
    def from_wire(cls, m: wire.Received) -> Message:
        return cls(m.message_id, m.partition, m.key, m.value, m.properties, m.publish_time_ms,
                   m.replicated_from, m.source_message_id)


MessageRef = str | Message


def _ids(messages: Iterable[MessageRef]) -> list[str]:
    return [m.message_id if isinstance(m, Message) else m for m in messages]


class Consumer:
    """One consumer of a subscription; create it with :meth:`StreamtxClient.consumer`.

    ``binary`` (the default): fetches accept, and acks send, the binary batch
    format (``application/x-streamtx-batch``); else JSON.
    """

    def __init__(self, broker: Endpoint, topic: str, subscription: str, name: str, *,
                 binary: bool = True) -> None:
        self.binary = binary
        self._broker = broker
        self.topic = full_name(topic)
        self.subscription = subscription
        self.name = name
        self._path = f"/v1/topics/{path_of(self.topic)}/subscriptions/{subscription}"

    async def receive(self, max: int = 100, wait_ms: int = 500) -> list[Message]:
        """Up to ``max`` messages, waiting up to ``wait_ms`` for the first."""
        params = {"max": max, "wait_ms": wait_ms, "consumer": self.name}
        if self.binary:
            media, raw = await self._broker.call_bytes("GET", f"{self._path}/messages", params=params,
                                                       accept=wire.CONTENT_TYPE)
            if wire.is_batch(media):  # a broker that predates the format answers JSON
                return [Message.from_wire(m) for m in wire.decode_messages_answer(raw)]
            return [Message.from_json(m) for m in orjson.loads(raw)["messages"]]
        body = await self._broker.call(
            "GET", f"{self._path}/messages", params={"max": max, "wait_ms": wait_ms, "consumer": self.name}
        )
        return [Message.from_json(m) for m in body["messages"]]

    async def ack(
        self, messages: Iterable[MessageRef], txn: Transaction | None = None, cumulative: bool = False,
    ) -> None:
        """Acknowledge; in a transaction the subscription is registered with the coordinator first.

        ConflictError (409) when another open transaction holds a message, or
        it was already acked.
        """
        ids = _ids(messages)
        if not ids:
            return
        if txn is not None:
            await txn.add_subscription(self.topic, self.subscription)
        if self.binary:
            content = wire.encode_acks(ids, txn=None if txn is None else txn.id,
                                       cumulative=cumulative)
            await self._broker.call_bytes("POST", f"{self._path}/acks", content=content,
                                          content_type=wire.CONTENT_TYPE)
            return
        body: dict[str, Any] = {"message_ids": ids, "cumulative": cumulative}
        if txn is not None:
            body["txn_id"] = txn.txn_id
        await self._broker.call("POST", f"{self._path}/acks", json=body)

    async def close(self) -> None:
        """Leave the subscription now: on a Failover subscription its partitions move to
        the other consumers at once instead of after the broker's ``failover_idle_ms``."""
        await self._broker.call("DELETE", f"{self._path}/consumers/{self.name}")

    async def nack(self, messages: Iterable[MessageRef]) -> None:
        """Ask for redelivery of these messages."""
        ids = _ids(messages)
        if ids:
            await self._broker.call("POST", f"{self._path}/nacks", json={"message_ids": ids})
