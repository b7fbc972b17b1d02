"""Producers: send messages to a (partitioned) topic, optionally in a transaction."""

from __future__ import annotations

import asyncio
import base64
import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from streamtx.client.http import Endpoint
from streamtx.client.names import full_name, key_partition, partition_name, path_of
from streamtx.client.transaction import Transaction
from streamtx.wire import batch as wire


@dataclass(frozen=True, slots=True)
class OutMessage:
    """One message to send; ``partition`` None routes by key (or round robin)."""

    value: bytes
    key: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    partition: int | None = None


class Producer:
    """Sends to one topic; create it with :meth:`StreamtxClient.producer`.

    A named producer sends with an epoch and a per-request sequence: the broker
    drops a retried request it already stored, and fences (409) every producer
    of the same name with an older epoch. Its sends are serialised, since a
    later sequence arriving first would make the earlier one look like a
    duplicate. The epoch defaults to the wall clock in ms, so a restarted
    producer fences its previous incarnation.

    ``binary`` (the default): requests in the binary batch format
    (``application/x-streamtx-batch``), every message routed here; else JSON.
    """

    def __init__(
        self, broker: Endpoint, topic: str, partitions: int, *, name: str | None, epoch: int | None,
        binary: bool = True,
    ) -> None:
        self._broker = broker
        self.topic = full_name(topic)
        self.partitions = partitions
        self.name = name
        self.epoch = epoch if epoch is not None else time.time_ns() // 1_000_000
        self._sequence = itertools.count()
        self._round_robin = itertools.count()
        self._lock = asyncio.Lock()
        self.binary = binary

    async def send(
        self, value: bytes, *, key: str | None = None, properties: Mapping[str, str] | None = None,
        partition: int | None = None, txn: Transaction | None = None,
    ) -> str:
        """Send one message; its message id."""
        ids = await self.send_many([OutMessage(value, key, properties or {}, partition)], txn=txn)
        return ids[0]

    async def send_many(self, messages: Sequence[OutMessage], *, txn: Transaction | None = None) -> list[str]:
        """Send messages in one request; their ids in order."""
        if self.name is None:
            return await self._send(messages, txn, None)
        async with self._lock:
            sequence = next(self._sequence)
            identity = {"name": self.name, "epoch": self.epoch, "sequence": sequence}
            return await self._send(messages, txn, identity)

    async def _send_binary(
        self, messages: Sequence[OutMessage], txn: Transaction | None, identity: dict[str, Any] | None,
    ) -> list[str]:
        if identity is not None and not any(m.partition is not None or m.key is not None for m in messages):
            # A named producer's unkeyed request goes where its retry will (the broker's sticky rule).
            sticky = key_partition(f"{identity['name']}:{identity['sequence']}", self.partitions)
            routed = [sticky] * len(messages)
        else:
            routed = [self._route(m) for m in messages]
        if txn is not None:
            await txn.add_partitions(self._partition_topic(p) for p in set(routed))
        body, order = wire.encode_produce_routed(
            [(p, wire.Msg(m.value, m.key, m.properties)) for p, m in zip(routed, messages, strict=True)],
            txn=None if txn is None else txn.id,
            producer=(None if identity is None
                      else (identity["name"], identity["epoch"], identity["sequence"])),
        )
        _, reply = await self._broker.call_bytes(
            "POST", f"/v1/topics/{path_of(self.topic)}/messages", content=body,
            content_type=wire.CONTENT_TYPE, idempotent=identity is not None,
        )
        return wire.ids_in_request_order(order, reply)

    async def _send(
        self, messages: Sequence[OutMessage], txn: Transaction | None, identity: dict[str, Any] | None,
    ) -> list[str]:
        if self.binary:
            return await self._send_binary(messages, txn, identity)
        routed = [self._route(m) if txn is not None else m.partition for m in messages]
        if txn is not None:
            # Registered before the broker sees a message of the transaction.
            await txn.add_partitions(self._partition_topic(p) for p in routed if p is not None)
        body: dict[str, Any] = {"messages": [
            {"key": m.key, "value": base64.b64encode(m.value).decode(), "properties": dict(m.properties),
             **({"partition": p} if p is not None else {})}
            for m, p in zip(messages, routed, strict=True)
        ]}
        if txn is not None:
            body["txn_id"] = txn.txn_id
        if identity is not None:
            body["producer"] = identity
        reply = await self._broker.call(
            "POST", f"/v1/topics/{path_of(self.topic)}/messages", json=body, idempotent=identity is not None
        )
        return [str(i) for i in reply["message_ids"]]

    def _route(self, message: OutMessage) -> int:
        """The partition a message goes to, chosen here so the transaction registers exactly it."""
        if message.partition is not None:
            return message.partition
        if message.key is not None:
            return key_partition(message.key, self.partitions)
        return next(self._round_robin) % self.partitions

    def _partition_topic(self, index: int) -> str:
        return partition_name(self.topic, index)

