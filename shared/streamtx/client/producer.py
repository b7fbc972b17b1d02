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

    Every message is routed here, and the messages of a partition go to that
    partition's own name (``x-partition-N``): broker replicas own partitions (as
    Pulsar's brokers do), so a send spanning partitions is one request per
    partition, each to its owner (the client's owner cache remembers where each
    partition lives). A one-partition topic is addressed by its name.
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

    def _routes(self, messages: Sequence[OutMessage], identity: dict[str, Any] | None) -> list[int]:
        if identity is not None and not any(m.partition is not None or m.key is not None for m in messages):
            # A named producer's unkeyed request goes where its retry will (the broker's sticky rule).
            sticky = key_partition(f"{identity['name']}:{identity['sequence']}", self.partitions)
            return [sticky] * len(messages)
        return [self._route(m) for m in messages]

    def _path(self, partition: int) -> str:
        name = self.topic if self.partitions == 1 else self._partition_topic(partition)
        return f"/v1/topics/{path_of(name)}/messages"

    async def _send(
        self, messages: Sequence[OutMessage], txn: Transaction | None, identity: dict[str, Any] | None,
    ) -> list[str]:
        routed = self._routes(messages, identity)
        if txn is not None:
            # Registered before the broker sees a message of the transaction.
            await txn.add_partitions(self._partition_topic(p) for p in set(routed))
        by_partition: dict[int, list[int]] = {}
        for i, p in enumerate(routed):
            by_partition.setdefault(p, []).append(i)
        if not by_partition:
            by_partition = {routed[0] if routed else 0: []}
        send = self._send_binary if self.binary else self._send_json
        results = await asyncio.gather(*(
            send(p, [messages[i] for i in indexes], txn, identity) for p, indexes in by_partition.items()))
        ids = [""] * len(messages)
        for indexes, got in zip(by_partition.values(), results, strict=True):
            for i, message_id in zip(indexes, got, strict=True):
                ids[i] = message_id
        return ids

    async def _send_binary(
        self, partition: int, messages: Sequence[OutMessage], txn: Transaction | None,
        identity: dict[str, Any] | None,
    ) -> list[str]:
        body, order = wire.encode_produce_routed(
            [(partition, wire.Msg(m.value, m.key, m.properties)) for m in messages],
            txn=None if txn is None else txn.id,
            producer=(None if identity is None
                      else (identity["name"], identity["epoch"], identity["sequence"])),
        )
        _, reply = await self._broker.call_bytes(
            "POST", self._path(partition), content=body,
            content_type=wire.CONTENT_TYPE, idempotent=identity is not None,
        )
        return wire.ids_in_request_order(order, reply)

    async def _send_json(
        self, partition: int, messages: Sequence[OutMessage], txn: Transaction | None,
        identity: dict[str, Any] | None,
    ) -> list[str]:
        body: dict[str, Any] = {"messages": [
            {"key": m.key, "value": base64.b64encode(m.value).decode(), "properties": dict(m.properties),
             "partition": partition}
            for m in messages
        ]}
        if txn is not None:
            body["txn_id"] = txn.txn_id
        if identity is not None:
            body["producer"] = identity
        reply = await self._broker.call("POST", self._path(partition), json=body,
                                        idempotent=identity is not None)
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

