"""A partitioned topic: routing of produced messages, its partitions and subscriptions.

Broker replicas own partitions, not topics (Pulsar: ``x-partition-N`` is a topic of
its own, with its own owner), so a :class:`Topic` holds the partitions open HERE
(all of them on a broker alone) out of ``count``. Routing is over all ``count``; a
message routed to a partition another replica owns is refused with
:class:`~streamtx.errors.NotOwnerError` (307 to that owner, or 503 while it moves)
before anything is stored. Producer epochs fence per partition, as in Pulsar.
"""

from __future__ import annotations

import asyncio
import itertools
import zlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from streamtx.broker.notify import Notifier
from streamtx.broker.partition import Partition, RawBatch
from streamtx.broker.subscription import Subscription
from streamtx.contracts.msgid import MessageId
from streamtx.contracts.txnid import TxnId
from streamtx.errors import ConflictError, MalformedError, NotFoundError, NotOwnerError
from streamtx.ledger import Position
from streamtx.names import partition_name
from streamtx.records.partition import Message, ProducerInfo


def key_partition(key: str, partitions: int) -> int:
    """Keyed routing: CRC32 of the key's UTF-8 bytes mod N (stable across processes)."""
    return zlib.crc32(key.encode()) % partitions


#: ``await check(indexes)``: 403/404/409 unless the request's transaction may write to those
#: partitions (the route's :class:`~streamtx.peers.TxnGuard` call, with the caller).
TxnCheck = Callable[[Iterable[int]], Awaitable[None]]


@dataclass(slots=True)
class Outgoing:
    message: Message
    partition: int | None


class Topic:
    """A topic's partitions open here (``owned``, by index) out of ``count``, and its subscriptions."""

    def __init__(self, name: str, partitions: list[Partition], notifier: Notifier,
                 unreplicated: Callable[[str, int], Position | None] = lambda t, i: None, *,
                 count: int | None = None, indexes: list[int] | None = None,
                 owner_of: Callable[[int], str | None] = lambda i: None) -> None:
        self.name = name  # persistent://t/n/x
        self._unreplicated = unreplicated  # the first position a remote cluster still needs
        self.count = len(partitions) if count is None else count
        at = indexes if indexes is not None else range(len(partitions))
        self.owned: dict[int, Partition] = dict(zip(at, partitions, strict=True))
        self.partitions = self._sorted()
        self._owner_of = owner_of  # replicas: the URL of another replica's partition, if known
        self.notifier = notifier
        self.subscriptions: dict[str, Subscription] = {}
        self._rr = itertools.count()

    def _sorted(self) -> list[Partition]:
        return [self.owned[i] for i in sorted(self.owned)]

    def add(self, index: int, partition: Partition) -> None:
        self.owned[index] = partition
        self.partitions = self._sorted()

    def remove(self, index: int) -> Partition | None:
        part = self.owned.pop(index, None)
        self.partitions = self._sorted()
        return part

    def owns_all(self) -> bool:
        return len(self.owned) == self.count

    def partition_name(self, index: int) -> str:
        return partition_name(self.name, index)

    def partition(self, index: int) -> Partition:
        if not 0 <= index < self.count:
            raise NotFoundError(f"{self.name} has no partition {index}")
        part = self.owned.get(index)
        if part is None:
            raise self.not_owner(index)
        return part

    def not_owner(self, index: int) -> NotOwnerError:
        owner = self._owner_of(index)
        return NotOwnerError(f"partition {self.partition_name(index)} is owned by "
                             f"{owner or 'nobody yet (moving)'}", owner)

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

    def route(self, messages: list[Outgoing], producer: ProducerInfo | None = None,
              only: int | None = None, *, check: bool = True) -> dict[int, list[Message]]:
        """Explicit partition, else hash of the key, else round robin; ``only`` (a request on
        the partition's own name ``x-partition-N``): every message goes there.

        Unkeyed messages of a producer's request all go to one partition chosen by
        hash of ``name:sequence``, so a retried request lands where the first try
        did and is recognised there as a duplicate.
        """
        n = self.count
        out: dict[int, list[Message]] = {}
        sticky = None if producer is None else key_partition(f"{producer.name}:{producer.sequence}", n)
        for m in messages:
            if only is not None:
                if m.partition is not None and m.partition != only:
                    raise MalformedError(f"partition {m.partition} sent to {self.partition_name(only)}")
                index = only
            elif m.partition is not None:
                if not 0 <= m.partition < n:
                    # A partition the topic does not have is unknown (404), as in every other path.
                    raise NotFoundError(f"partition {m.partition} out of range 0..{n - 1}")
                index = m.partition
            elif m.message.key is not None:
                index = key_partition(m.message.key, n)
            elif sticky is not None:
                index = sticky
            else:
                index = next(self._rr) % n
            out.setdefault(index, []).append(m.message)
        if check:  # else: the caller sends each partition's share to its owner (spread.py)
            self._check_owned(out)
        return out

    def _check_owned(self, indexes: Iterable[int]) -> None:
        for i in indexes:
            if i not in self.owned:
                raise self.not_owner(i)

    async def produce(self, messages: list[Outgoing], txn: TxnId | None,
                      producer: ProducerInfo | None, only: int | None = None,
                      check: TxnCheck | None = None) -> list[str]:
        """Store one entry per partition touched; message ids in request order. ``check``: the
        transaction's door check, once the partitions are known and before anything is stored."""
        routed = self.route(messages, producer, only)
        if not routed and producer is not None:
            routed = {0 if only is None else only: []}  # no messages: just record the producer's epoch
            self._check_owned(routed)
        if check is not None and txn is not None:
            await check(routed)
        fence = self.check_epoch(producer)
        results = await asyncio.gather(*(
            self.owned[i].produce(msgs, txn, producer, fence) for i, msgs in routed.items()
        ))
        ids = [""] * len(messages)
        for pairs in results:
            for request_index, message_id in pairs:
                if request_index < len(ids):
                    ids[request_index] = message_id
        return ids

    async def produce_sections(self, sections: list[tuple[int, RawBatch]], txn: TxnId | None,
                               producer: ProducerInfo | None, only: int | None = None
                               ) -> list[tuple[int, int, int]]:
        """Store pre-encoded sections (one partition each, validated by the caller), one entry
        per section; ``(ledger_id, entry_id, count)`` per section in request order. ``only``:
        the request named partition ``only`` itself, the one partition its sections may name."""
        n = self.count
        seen: set[int] = set()
        for index, _ in sections:
            if not 0 <= index < n:
                raise NotFoundError(f"partition {index} out of range 0..{n - 1}")
            if only is not None and index != only:
                raise MalformedError(f"partition {index} sent to {self.partition_name(only)}")
            if index in seen:
                raise MalformedError(f"partition {index} named by two sections")
            seen.add(index)
        first = 0 if only is None else only
        self._check_owned(seen or {first})
        fence = self.check_epoch(producer)
        if not sections:
            if producer is not None:  # no messages: just record the producer's epoch
                await self.owned[first].produce_batch(RawBatch(b"", 0, 0, 0), txn, producer, fence)
            return []
        results = await asyncio.gather(*(
            self.owned[i].produce_batch(batch, txn, producer, fence) for i, batch in sections
        ))
        out: list[tuple[int, int, int]] = []
        for got in results:
            if isinstance(got, list):  # a duplicate: the ids the first try got
                if not got:
                    out.append((0, 0, 0))
                    continue
                head = MessageId.parse(got[0][1])
                out.append((head.ledger_id, head.entry_id, len(got)))
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
            limit = min(limit, sub.part(index).cursor.first_undeleted())
        if (needed := self._unreplicated(self.name, index)) is not None:
            limit = min(limit, needed)
        return await part.trim(limit)
