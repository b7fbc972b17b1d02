"""Consumers: receive from a subscription by long-poll, ack (maybe in a transaction), nack."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from streamtx.client.http import Endpoint
from streamtx.client.names import full_name, partition_name, path_of
from streamtx.client.transaction import Transaction
from streamtx.contracts.msgid import MessageId
from streamtx.errors import NotOwnerError
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

    ``spread`` (the client sets it when the topic's partitions have several owners,
    broker replicas): as Pulsar's consumer of a partitioned topic, one long poll per
    partition, each to the partition's own name (its owner), kept in flight between
    calls (what one brings beyond ``max`` waits for the next :meth:`receive`); acks
    and nacks go to each message's partition. A consumer that polls the topic's
    name turns to this when the topic's partitions spread later (its poll there is
    answered 503 ``not_owner`` and ``is_spread`` says so).
    """

    def __init__(self, broker: Endpoint, topic: str, subscription: str, name: str, *,
                 binary: bool = True, partitions: int = 1, spread: bool = False,
                 is_spread: Callable[[], Awaitable[bool]] | None = None) -> None:
        self.binary = binary
        self._broker = broker
        self.topic = full_name(topic)
        self.subscription = subscription
        self.name = name
        self._path = f"/v1/topics/{path_of(self.topic)}/subscriptions/{subscription}"
        self.partitions = partitions
        self.spread = spread and partitions > 1
        self._polls: dict[int, asyncio.Task[list[Message]]] = {}
        self._ready: list[Message] = []
        self._partition_of: dict[int, int] = {}  # a message id's ledger id -> its partition
        self._is_spread = is_spread

    def _partition_path(self, index: int) -> str:
        return f"/v1/topics/{path_of(partition_name(self.topic, index))}/subscriptions/{self.subscription}"

    async def receive(self, max: int = 100, wait_ms: int = 500) -> list[Message]:
        """Up to ``max`` messages, waiting up to ``wait_ms`` for the first."""
        if self.spread:
            return await self._receive_spread(max, wait_ms)
        if self.partitions == 1 or self._is_spread is None:
            return await self._fetch(self._path, max, wait_ms)
        try:  # a partitioned topic's name: no waiting out a move here, it may have spread
            return await self._fetch(self._path, max, wait_ms, moving_wait_s=0.0)
        except NotOwnerError:
            if await self._is_spread():
                self.spread = True
                return await self._receive_spread(max, wait_ms)
            await asyncio.sleep(min(wait_ms, 500) / 1000)  # moving: as if nothing came
            return []

    async def _receive_spread(self, max: int, wait_ms: int) -> list[Message]:
        if not self._ready:
            for i in range(self.partitions):
                if i not in self._polls:
                    task = asyncio.create_task(self._fetch(self._partition_path(i), max, wait_ms))
                    # A poll still out when the client closes must not log "never retrieved".
                    task.add_done_callback(lambda t: t.cancelled() or t.exception())
                    self._polls[i] = task
            # Empty only once every partition's poll came back empty: an idle partition's
            # answer says nothing of the others.
            pending: set[asyncio.Task[list[Message]]] = set(self._polls.values())
            failed: BaseException | None = None
            while pending and not self._ready and failed is None:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for i, task in list(self._polls.items()):
                    if task in done:
                        del self._polls[i]
                        if task.exception() is not None:
                            failed = failed or task.exception()
                        else:
                            self._ready += task.result()
            if failed is not None and not self._ready:
                raise failed
        out, self._ready = self._ready[:max], self._ready[max:]
        return out

    async def _fetch(self, path: str, max: int, wait_ms: int, moving_wait_s: float | None = None
                     ) -> list[Message]:
        params = {"max": max, "wait_ms": wait_ms, "consumer": self.name}
        got = await self._fetch_raw(path, params, moving_wait_s)
        for m in got:
            if m.partition is not None:
                self._partition_of[MessageId.parse(m.message_id).ledger_id] = m.partition
        return got

    async def _fetch_raw(self, path: str, params: dict[str, Any], moving_wait_s: float | None
                         ) -> list[Message]:
        media, raw = await self._broker.call_bytes("GET", f"{path}/messages", params=params,
                                                   accept=wire.CONTENT_TYPE if self.binary else None,
                                                   moving_wait_s=moving_wait_s)
        if wire.is_batch(media):  # JSON asked, or a broker that predates the format
            return [Message.from_wire(m) for m in wire.decode_messages_answer(raw)]
        return [Message.from_json(m) for m in orjson.loads(raw)["messages"]]

    def _by_path(self, ids: list[str]) -> dict[tuple[str, str], list[str]]:
        """(topic or partition name, its subscription path) -> the ids to send there."""
        out: dict[tuple[str, str], list[str]] = {}
        for i in ids:
            # The one parser: a malformed id is the API's 400 here, before any call.
            index = self._partition_of.get(MessageId.parse(i).ledger_id) if self.spread else None
            key = ((self.topic, self._path) if index is None
                   else (partition_name(self.topic, index), self._partition_path(index)))
            out.setdefault(key, []).append(i)
        return out

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
        groups = self._by_path(ids)
        if txn is not None:
            # Spread: acked on each partition's own name, registered (and ended) per partition.
            for topic, _ in groups:
                await txn.add_subscription(topic, self.subscription)
        await asyncio.gather(*(self._ack(path, group, txn, cumulative)
                               for (_, path), group in groups.items()))

    async def _ack(self, path: str, ids: list[str], txn: Transaction | None, cumulative: bool) -> None:
        if self.binary:
            content = wire.encode_acks(ids, txn=None if txn is None else txn.id,
                                       cumulative=cumulative)
            await self._broker.call_bytes("POST", f"{path}/acks", content=content,
                                          content_type=wire.CONTENT_TYPE)
            return
        body: dict[str, Any] = {"message_ids": ids, "cumulative": cumulative}
        if txn is not None:
            body["txn_id"] = txn.txn_id
        await self._broker.call("POST", f"{path}/acks", json=body)

    async def close(self) -> None:
        """Leave the subscription now: on a Failover subscription its partitions move to
        the other consumers at once instead of after the broker's ``failover_idle_ms``."""
        polls, self._polls = list(self._polls.values()), {}
        for task in polls:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        paths = [self._partition_path(i) for i in range(self.partitions)] if self.spread else [self._path]
        await asyncio.gather(*(self._broker.call("DELETE", f"{p}/consumers/{self.name}") for p in paths))

    async def nack(self, messages: Iterable[MessageRef]) -> None:
        """Ask for redelivery of these messages."""
        ids = _ids(messages)
        for (_, path), group in self._by_path(ids).items():
            await self._broker.call("POST", f"{path}/nacks", json={"message_ids": group})
