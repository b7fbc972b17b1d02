"""A partitioned topic: routing of produced messages, its partitions and subscriptions."""

from __future__ import annotations

import asyncio
import itertools
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from streamtx.broker.codec import Message, ProducerInfo
from streamtx.broker.notify import Notifier
from streamtx.broker.partition import Partition, RawBatch
from streamtx.broker.subscription import Subscription
from streamtx.contracts.txnid import TxnId
from streamtx.errors import ConflictError, MalformedError, NotFoundError
from streamtx.ledger import Position


def key_partition(key: str, partitions: int) -> int:
    """Keyed routing: CRC32 of the key's UTF-8 bytes mod N (stable across processes)."""
    return zlib.crc32(key.encode()) % partitions


@dataclass(slots=True)
class Outgoing:
    message: Message
    partition: int | None


class Topic:
    def __init__(self, name: str, partitions: list[Partition], notifier: Notifier,
                 unreplicated: Callable[[str, int], Position | None] = lambda t, i: None) -> None:
        self.name = name  # persistent://t/n/x
        self._unreplicated = unreplicated  # the first position a remote cluster still needs
        self.partitions = partitions
        self.notifier = notifier
        self.subscriptions: dict[str, Subscription] = {}
        self._rr = itertools.count()

    def partition_name(self, index: int) -> str:
        return f"{self.name}-partition-{index}"

    def partition(self, index: int) -> Partition:
        if not 0 <= index < len(self.partitions):
            raise NotFoundError(f"{self.name} has no partition {index}")
        return self.partitions[index]

    def subscription(self, name: str) -> Subscription:
        sub = self.subscriptions.get(name)
        if sub is None:
            raise NotFoundError(f"subscription {name} of {self.name} does not exist")
        return sub

    def fence_epoch(self, producer: str) -> int | None:
        """The latest epoch of this producer name on any partition."""
        epochs = [e for p in self.partitions if (e := p.producers.max_epoch(producer)) is not None]
        return max(epochs, default=None)

    def check_epoch(self, producer: ProducerInfo | None) -> int | None:
        """The producer name's latest epoch (None without a producer or epoch yet); 409 when
        ``producer`` is older (a fenced zombie)."""
        if producer is None:
            return None
        fence = self.fence_epoch(producer.name)
        if fence is not None and producer.epoch < fence:
            raise ConflictError(f"producer {producer.name} epoch {producer.epoch} is fenced "
                                f"(latest epoch {fence})")
        return fence

    def route(self, messages: list[Outgoing], producer: ProducerInfo | None = None
              ) -> dict[int, list[Message]]:
        """Explicit partition, else hash of the key, else round robin.

        Unkeyed messages of a producer's request all go to one partition chosen by
        hash of ``name:sequence``, so a retried request lands where the first try
        did and is recognised there as a duplicate.
        """
        n = len(self.partitions)
        out: dict[int, list[Message]] = {}
        sticky = None if producer is None else key_partition(f"{producer.name}:{producer.sequence}", n)
        for m in messages:
            if m.partition is not None:
                if not 0 <= m.partition < n:
                    raise MalformedError(f"partition {m.partition} out of range 0..{n - 1}")
                index = m.partition
            elif m.message.key is not None:
                index = key_partition(m.message.key, n)
            elif sticky is not None:
                index = sticky
            else:
                index = next(self._rr) % n
            out.setdefault(index, []).append(m.message)
        return out

    async def produce(self, messages: list[Outgoing], txn: TxnId | None,
                      producer: ProducerInfo | None) -> list[str]:
        """Store one entry per partition touched; message ids in request order."""
        fence = self.check_epoch(producer)
        routed = self.route(messages, producer)
        if not routed and producer is not None:
            routed = {0: []}  # no messages: just record the producer's epoch
        results = await asyncio.gather(*(
            self.partitions[i].produce(msgs, txn, producer, fence) for i, msgs in routed.items()
        ))
        ids = [""] * len(messages)
        for pairs in results:
            for request_index, message_id in pairs:
                if request_index < len(ids):
                    ids[request_index] = message_id
        return ids

    async def produce_sections(self, sections: list[tuple[int, RawBatch]], txn: TxnId | None,
                               producer: ProducerInfo | None) -> list[tuple[int, int, int]]:
        """Store pre-encoded sections (one partition each, validated by the caller), one entry
        per section; ``(ledger_id, entry_id, count)`` per section in request order."""
        n = len(self.partitions)
        seen: set[int] = set()
        for index, _ in sections:
            if not 0 <= index < n:
                raise MalformedError(f"partition {index} out of range 0..{n - 1}")
            if index in seen:
                raise MalformedError(f"partition {index} named by two sections")
            seen.add(index)
        fence = self.check_epoch(producer)
        if not sections:
            if producer is not None:  # no messages: just record the producer's epoch
                await self.partitions[0].produce_batch(RawBatch(b"", 0, 0, 0), txn, producer, fence)
            return []
        results = await asyncio.gather(*(
            self.partitions[i].produce_batch(batch, txn, producer, fence) for i, batch in sections
        ))
        out: list[tuple[int, int, int]] = []
        for got in results:
            if isinstance(got, list):  # a duplicate: the ids the first try got
                if not got:
                    out.append((0, 0, 0))
                    continue
                lid, _, rest = got[0][1].partition(":")
                out.append((int(lid), int(rest.partition(":")[0]), len(got)))
            else:
                pos, count = got
                out.append((pos.ledger_id, pos.entry_id, count))
        return out

    async def trim(self, index: int, before: Position) -> int:
        """Trim a partition before ``before``, but never past an open transaction's first
        message nor past what a subscription has yet to consume; aborted ids dropped."""
        part = self.partition(index)
        limit = before
        if part.tb.ongoing:
            limit = min(limit, next(iter(part.tb.ongoing.values())))
        for sub in self.subscriptions.values():
            limit = min(limit, sub.parts[index].cursor.first_undeleted())
        if (needed := self._unreplicated(self.name, index)) is not None:
            limit = min(limit, needed)
        return await part.trim(limit)
