"""A subscription over every partition of a topic: consumers, fetch, acks, txn holds.

Exclusive admits one consumer at a time (another gets 409 until the owner has
been idle for ``exclusive_idle_ms``; over broker replicas, for the whole topic:
:mod:`.exclusive`); Shared spreads messages over consumers
and redelivers what is not acked within the ack timeout or is negatively acked;
Failover gives each partition one active consumer (:mod:`.failover`): a
consumer fetches only its partitions, and when a partition moves (a consumer
joined, closed, or stopped fetching for ``failover_idle_ms``) what it had out
unacked goes to the new active consumer first, in position order.
Positions acked in an open transaction are held: never dispatched, never acked
by anyone else, until the pending-ack store reports the transaction's end.

Long polls sleep on the topic's :class:`Notifier`, which a partition fires when
an append is *applied* to its transaction buffer rather than when it lands in
the ledger (what ``Ledger.wait_for_append`` reports): the broker is the ledger's
only writer, and an entry is readable only once the buffer has judged it, so
this is the earliest moment a waiter can be served. Acks, nacks, transaction
ends and the ack timeout wake them too.
"""

from __future__ import annotations

import asyncio
import enum
import math
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

from streamtx.broker import failover, metrics
from streamtx.broker.dispatch import (
    Handed,
    PartitionDispatch,
    handed_count,
    handed_units,
    render_json,
    unit_id,
)
from streamtx.broker.held import UNNAMED
from streamtx.broker.notify import Notifier
from streamtx.broker.outstanding import Taken, Unit, unit_order
from streamtx.broker.replicas.exclusive import ExclusiveClaims
from streamtx.broker.settings import BrokerSettings
from streamtx.contracts.msgid import MessageId, parse_many
from streamtx.contracts.txnid import TxnId
from streamtx.errors import ConflictError, MalformedError, NotFoundError, TooManyRequestsError
from streamtx.ledger import Position
from streamtx.service.longpoll import LongPoll

_max_ended = 10_000  # transactions whose end a subscription remembers (as the store does)
_new_tuple = tuple.__new__
_sweep_every_s = 1.0  # how often a fetch looks for idle consumers to forget (Shared, Exclusive)


class SubscriptionType(enum.StrEnum):
    EXCLUSIVE = "Exclusive"
    SHARED = "Shared"
    FAILOVER = "Failover"


@dataclass(slots=True)
class ConsumerInfo:
    name: str
    last_seen: float
    delivered: int = 0
    fetching: int = 0  # its fetches under way (Failover liveness)


class Subscription:
    def __init__(self, topic: str, name: str, sub_type: SubscriptionType,
                 parts: list[PartitionDispatch], settings: BrokerSettings, notifier: Notifier,
                 count: int | None = None) -> None:
        """``parts``: the partitions open here (broker replicas own partitions, not topics:
        a replica's subscription dispatches from the partitions it owns) of ``count``."""
        self.topic = topic
        self.name = name
        self.type = sub_type
        self.parts = sorted(parts, key=lambda p: p.index)
        self.count = len(parts) if count is None else count
        self._by_index = {p.index: p for p in parts}
        self.settings = settings
        self.notifier = notifier
        self.consumers: dict[str, ConsumerInfo] = {}
        self.replicated = False  # PIP-33: its position follows the consumer to other clusters
        self.closed = False  # deleted or its last partition left: a waiting fetch ends empty
        self.owner: str | None = None
        # Broker replicas: the topic-wide Exclusive consumer (the others' partitions' too)
        self.claims: ExclusiveClaims | None = None
        self.held_ready = asyncio.Event()
        # Transactions whose end was applied here (bounded): a pending-ack store's ``held``
        # answer lists an ending transaction's ids until it has written the end, so one can
        # arrive after the end: holding them then would hold them forever (never redelivered).
        self._ended: OrderedDict[TxnId, None] = OrderedDict()
        # Holders learned from a ``held`` answer (loop time first seen): when this broker took
        # the partition after the end was applied by its previous owner, no end comes here.
        self._restored: dict[TxnId, float] = {}
        self._by_ledger = {p.partition.ledger.ledger_id: p for p in parts}
        self._rr = 0
        self.active: dict[int, str] = {}  # Failover: partition index → active consumer
        self._next_sweep = -math.inf  # monotonic loop time; never swept yet
        self._labels = (settings.cluster, topic)

    def add_part(self, part: PartitionDispatch) -> None:
        """A partition this replica took over joins the subscription here."""
        self._by_index[part.index] = part
        self._by_ledger[part.partition.ledger.ledger_id] = part
        self.parts = sorted(self._by_index.values(), key=lambda p: p.index)
        self.active.pop(part.index, None)  # Failover: assigned afresh at the next fetch
        self.notifier.changed()

    def part(self, index: int) -> PartitionDispatch:
        return self._by_index[index]

    def remove_part(self, index: int) -> PartitionDispatch | None:
        """A partition handed over (or lost) leaves; the caller closes its cursor."""
        part = self._by_index.pop(index, None)
        if part is not None:
            self._by_ledger.pop(part.partition.ledger.ledger_id, None)
            self.parts = sorted(self._by_index.values(), key=lambda p: p.index)
            self.active.pop(index, None)
        return part

    # --- resolving message ids -------------------------------------------------

    def resolve(self, mid: MessageId) -> tuple[PartitionDispatch, Unit]:
        part = self._by_ledger.get(mid[0])
        if part is None:
            # A well-formed id of no partition here names no message of this topic: unknown (404).
            raise NotFoundError(f"message id {mid} is not of topic {self.topic}")
        # tuple.__new__: half the cost of NamedTuple's Python-level __new__ (per acked id).
        return part, (_new_tuple(Position, (mid[0], mid[1])), None if mid[2] < 0 else mid[2])

    def _resolve_all(self, ids: Iterable[MessageId]) -> list[tuple[PartitionDispatch, Unit]]:
        # Acks and ends list thousands of ids of a few entries: each entry is looked up once.
        out: list[tuple[PartitionDispatch, Unit]] = []
        entries: dict[tuple[int, int], tuple[PartitionDispatch, Position]] = {}
        for m in ids:
            hit = entries.get((m[0], m[1]))
            if hit is None:
                part, unit = self.resolve(m)
                entries[(m[0], m[1])] = (part, unit[0])
                out.append((part, unit))
            else:
                out.append((hit[0], (hit[1], None if m[2] < 0 else m[2])))
        return out

    async def units(self, ids: Iterable[MessageId], *, through: bool = False, strict: bool = True
                    ) -> list[tuple[PartitionDispatch, Unit]]:
        """The messages ``ids`` name, each as its one canonical unit (docs/api.md, "Message ids"):
        ``(entry, None)`` for a one-message entry (``L:E`` or ``L:E:0``), ``(entry, i)`` for
        message ``i`` of a batch entry. A whole-entry id ``L:E`` of a batch entry names all of its
        messages, or with ``through`` (a cumulative ack) its last one. Every path that changes
        a message's state reads ids here first: two spellings of one message were two units
        (a plain ack of ``L:E`` deleted what a transaction held as ``L:E:0``...).

        ``strict``: a batch index past its entry is 400 (a request); else it is kept as it came
        (an end or a restore replaying what was accepted before: it names nothing here)."""
        out: list[tuple[PartitionDispatch, Unit]] = []
        sizes: dict[tuple[int, Position], int] = {}  # one look-up per entry, not per id
        for part, (pos, bi) in self._resolve_all(ids):
            size = sizes.get((part.index, pos))
            if size is None:
                size = sizes[(part.index, pos)] = (part.known_batch_size(pos, bi)
                                                   or await part.batch_size(pos, bi))
            if size <= 1:
                if not bi:  # None or 0: the entry's one message
                    out.append((part, (pos, None)))
                    continue
            elif bi is None:
                if through:
                    out.append((part, (pos, size - 1)))
                else:
                    out += zip(repeat(part), zip(repeat(pos), range(size)))
                continue
            if bi >= size and strict:
                raise MalformedError(f"batch index {bi} is not within the batch of {size} at {pos}")
            out.append((part, (pos, bi)))
        return out

    def _check_dispatched(self, resolved: list[tuple[PartitionDispatch, Unit]]) -> None:
        """400 for an id past what its partition has dispatched to this subscription (issue 21
        item 1): nobody can have been handed it, and acking it would hide the message written
        there later (a cumulative one: every message up to it). docs/api.md, "Acks"."""
        for part, (pos, bi) in resolved:
            through, partial = part.dispatched_through, part.dispatched_partial
            if through is None or pos > through or (
                    pos == through and partial is not None and (bi is None or bi > partial)):
                raise MalformedError(
                    f"message id {pos} was never delivered on subscription {self.name} (partition "
                    f"{part.index} has dispatched {'nothing' if through is None else f'up to {through}'})")

    # --- consumers ------------------------------------------------------------

    def _refuse_if_taken(self, consumer: str, now: float) -> None:
        """Exclusive: 409 while another consumer fetches here, or fetched within ``exclusive_idle_ms``
        (a long poll longer than that is no silence: its consumer may still be handed messages)."""
        owner = self.consumers.get(self.owner) if self.owner else None
        idle_s = self.settings.exclusive_idle_ms / 1000
        if owner is not None and owner.name != consumer and (owner.fetching > 0 or
                                                             now - owner.last_seen < idle_s):
            raise ConflictError(f"subscription {self.name} is Exclusive and has consumer {owner.name}")

    def _admit(self, consumer: str, now: float) -> None:
        if self.type is SubscriptionType.EXCLUSIVE:
            self._refuse_if_taken(consumer, now)
            if self.owner != consumer:
                self.owner = consumer
                for p in self.parts:  # what the old owner did not ack goes to the new one
                    p.release(p.pending.units())
        info = self.consumers.get(consumer)
        if info is None:
            cap = self.settings.max_consumers_per_subscription
            if self.type is not SubscriptionType.FAILOVER:  # Failover forgets its idle ones as it assigns
                self._forget_idle(now, full=len(self.consumers) >= cap)
            if len(self.consumers) >= cap:
                raise TooManyRequestsError(
                    f"subscription {self.name} has {len(self.consumers)} consumers fetching or seen within "
                    f"consumer_idle_ms: retry once some left (DELETE .../consumers/NAME closes one)")
            info = self.consumers[consumer] = ConsumerInfo(consumer, now)
        info.last_seen = now
        if self.type is SubscriptionType.FAILOVER:
            self._reassign(now)

    def _forget_idle(self, now: float, full: bool = False) -> None:
        """Shared, Exclusive: forget consumers not fetching for ``consumer_idle_ms`` (at least
        ``exclusive_idle_ms``: an Exclusive owner is forgotten only once another may take over).
        Looked for once a second, or now when the subscription is full."""
        if now < self._next_sweep and not full:
            return
        self._next_sweep = now + _sweep_every_s
        idle_s = max(self.settings.consumer_idle_ms, self.settings.exclusive_idle_ms) / 1000
        for name in [n for n, c in self.consumers.items() if c.fetching == 0 and now - c.last_seen >= idle_s]:
            del self.consumers[name]

    def _reassign(self, now: float) -> None:
        """Failover: forget consumers gone idle, recompute the active consumers, and hand
        the unacked messages of every partition that moved to its new one, in order."""
        idle_s = self.settings.failover_idle_ms / 1000
        names = failover.live(self.consumers, now, idle_s)
        for gone in [n for n in self.consumers if n not in names]:
            del self.consumers[gone]
        after = failover.assign(self.count, names)
        moved = failover.moved(self.active, after)
        self.active = after
        released = 0
        for i in moved:
            part = self._by_index.get(i)
            if part is None:  # owned by another replica
                continue
            released += len(part.pending)
            part.release(part.pending.units())
            _in_position_order(part)
        if released:
            metrics.redeliveries.labels(*self._labels).inc(released)
        if moved:
            self.notifier.changed()  # the new active consumers' long polls look again

    async def close_consumer_everywhere(self, consumer: str) -> bool:
        """:meth:`close_consumer`, and (replicas) its topic-wide Exclusive claim given up."""
        closed = self.close_consumer(consumer)
        if self.type is SubscriptionType.EXCLUSIVE and self.claims is not None:
            await self.claims.release(self.topic, self.name, consumer)
        return closed

    def close_consumer(self, consumer: str) -> bool:
        """The consumer leaves now (its Failover partitions move at once); False if unknown."""
        if self.consumers.pop(consumer, None) is None:
            return False
        if self.owner == consumer:
            self.owner = None
        if self.type is SubscriptionType.FAILOVER:
            self._reassign(asyncio.get_running_loop().time())
        self.notifier.changed()
        return True

    def partitions_of(self, consumer: str) -> list[int]:
        """The partitions ``consumer`` is active on now (Failover); every partition otherwise."""
        if self.type is not SubscriptionType.FAILOVER:
            return [p.index for p in self.parts]
        self._reassign(asyncio.get_running_loop().time())
        return sorted(i for i, name in self.active.items() if name == consumer and i in self._by_index)

    def _assigned(self, consumer: str, only: list[PartitionDispatch]) -> list[PartitionDispatch]:
        if self.type is not SubscriptionType.FAILOVER:
            return only
        return [p for p in only if self.active.get(p.index) == consumer]

    async def fetch(self, consumer: str, max_messages: int, wait_ms: int,
                    partitions: list[int] | None = None, poll: LongPoll | None = None,
                    ) -> list[dict[str, Any]]:
        """:meth:`fetch_raw`, rendered as the JSON answer's messages."""
        return render_json(await self.fetch_raw(consumer, max_messages, wait_ms, partitions, poll))

    async def fetch_raw(self, consumer: str, max_messages: int, wait_ms: int,
                        partitions: list[int] | None = None, poll: LongPoll | None = None,
                        ) -> list[Handed]:
        """Long-poll for messages; ``partitions`` limits the fetch to those partitions.

        The wait ends early, with what was found (nothing), once ``poll`` ends:
        the client went away or the service is stopping. What is handed out
        points at the stored entries (``dispatch.render_json``/``render_batch``).
        """
        asked = self.parts
        if partitions is not None:
            bad = [i for i in partitions if not 0 <= i < self.count]
            if bad:
                raise NotFoundError(f"{self.topic} has no partition {bad[0]}")  # unknown, as in every path
            asked = [self._by_index[i] for i in sorted(set(partitions)) if i in self._by_index]
        loop = asyncio.get_running_loop()
        end = loop.time() + wait_ms / 1000
        if self.type is SubscriptionType.EXCLUSIVE and self.claims is not None:
            self._refuse_if_taken(consumer, loop.time())  # no Redis call to refuse a local rival
            await self.claims.claim(self.topic, self.name, consumer, hold_ms=wait_ms)
        self._admit(consumer, loop.time())
        info = self.consumers[consumer]
        info.fetching += 1
        try:
            return await self._fetch_loop(consumer, info, asked, max_messages, end, poll)
        finally:
            info.fetching -= 1
            info.last_seen = loop.time()

    async def _fetch_loop(self, consumer: str, info: ConsumerInfo, asked: list[PartitionDispatch],
                          max_messages: int, end: float, poll: LongPoll | None) -> list[Handed]:
        loop = asyncio.get_running_loop()
        failover_type = self.type is SubscriptionType.FAILOVER
        while True:
            if self.closed:  # unsubscribed (force) while it waited: its cursors are gone
                return []
            if failover_type:
                if self.consumers.get(consumer) is not info:
                    return []  # it closed meanwhile: its next fetch joins again
                self._reassign(loop.time())
            elif self.type is SubscriptionType.EXCLUSIVE and self.owner != consumer:
                return []  # it closed and another consumer holds the subscription now
            parts = self._assigned(consumer, asked)
            await _until_ready(parts)
            remaining = end - loop.time()
            if not self.held_ready.is_set():
                # Held positions are not known yet (pending-ack store not answering);
                # restoring them wakes the notifier.
                if remaining <= 0 or (poll is not None and poll.ended):
                    return []
                await self.notifier.wait(remaining, poll)
                continue
            out = await self._fetch_once(consumer, max_messages, loop.time(), parts)
            if failover_type and out:
                out = self._still_assigned(consumer, out)
            if out or remaining <= 0 or (poll is not None and poll.ended):
                got = handed_count(out)
                info.delivered += got
                metrics.messages_out.labels(*self._labels).inc(got)
                return out
            wake = self._next_deadline()
            if failover_type:  # a silent consumer's partitions move when it expires
                expiry = failover.next_expiry(self.consumers, loop.time(),
                                              self.settings.failover_idle_ms / 1000)
                if expiry is not None:
                    wake = expiry if wake is None else min(wake, expiry)
            timeout = remaining if wake is None else min(remaining, max(wake - loop.time(), 0.001))
            await self.notifier.wait(timeout, poll)

    def give_back(self, consumer: str, handed: list[Handed]) -> None:
        """What a fetch of ``consumer`` took but could not answer (its client went away):
        deliverable again at once, in position order, as a nack makes it (on Exclusive and
        Failover nothing else would ever hand it out again: it would stay out with that consumer)."""
        self._release_runs(consumer, handed)
        self.notifier.changed()

    def _still_assigned(self, consumer: str, out: list[Handed]) -> list[Handed]:
        """Drop (and hand back for redelivery) what was read from a partition that moved to
        another consumer while this fetch read it."""
        lost = {i for i, name in self.active.items() if name != consumer}
        if not lost.intersection(h[0].partition for h in out):
            return out
        self._release_runs(consumer, [h for h in out if h[0].partition in lost])
        return [h for h in out if h[0].partition not in lost]

    def _release_runs(self, consumer: str, handed: list[Handed]) -> None:
        """Make what of ``handed`` is still out with ``consumer`` deliverable again, in position
        order (a Failover move during the fetch released it already, and the new consumer may
        have it now). One release and one sort per partition: a sort per message was quadratic
        (a fetch of thousands that lost its partition as a second worker joined cost the broker
        ~15 s)."""
        by_part: dict[int, list[Handed]] = {}
        for h in handed:
            by_part.setdefault(h[0].partition, []).append(h)
        for i, runs in by_part.items():
            if (part := self._by_index.get(i)) is not None:  # else handed over: its cursor moved on
                part.give_back(consumer, handed_units(runs))
                _in_position_order(part)

    async def _fetch_once(self, consumer: str, limit: int, now: float,
                          parts: list[PartitionDispatch]) -> list[Handed]:
        ack_deadline = math.inf
        if self.type is SubscriptionType.SHARED:
            ack_deadline = now + self.settings.ack_timeout_ms / 1000
            expired = sum(p.expire(now) for p in self.parts)
            if expired:
                metrics.redeliveries.labels(*self._labels).inc(expired)
        out: list[Handed] = []
        got, n = 0, len(parts)
        start, self._rr = self._rr % max(n, 1), self._rr + 1
        for k in range(n):  # rotate so no partition starves the others
            if got >= limit:
                break
            part = parts[(start + k) % n]
            handed = await part.fetch(consumer, limit - got, ack_deadline)
            out += handed
            got += handed_count(handed)
        return out

    def _next_deadline(self) -> float | None:
        if self.type is not SubscriptionType.SHARED:
            return None
        return min((d for p in self.parts if (d := p.next_deadline()) is not None), default=None)

    # --- acks -------------------------------------------------------------------

    def _check_not_held(self, resolved: list[tuple[PartitionDispatch, Unit]]) -> None:
        for part, unit in resolved:
            if unit in part.held:
                raise ConflictError(f"message {unit_id(unit)} is held by an open transaction")

    async def ack(self, ids: list[MessageId], cumulative: bool) -> None:
        self._check_dispatched(self._resolve_all(ids))
        await _until_ready(self.parts)
        resolved = await self.units(ids, through=cumulative)
        self._check_not_held(resolved)
        batch = _CursorBatch()
        if cumulative:
            for part, (pos, bi) in resolved:
                await self._add_cumulative(batch, part, pos, bi)
        else:
            await self._add_deletes(batch, resolved)
        await batch.apply()
        if cumulative:
            for part, (pos, bi) in resolved:
                part.take_through(pos, bi)
        else:
            for part, unit in resolved:
                part.forget([unit])
        self.notifier.changed()

    async def _add_deletes(self, batch: _CursorBatch, units: list[tuple[PartitionDispatch, Unit]]) -> None:
        """Add these messages' deletes to ``batch`` (checked now, applied with the batch)."""
        for part, (pos, bi) in units:
            ops = batch.of(part)
            if bi is None:
                ops.entries.append(pos)
                continue
            size = part.known_batch_size(pos, bi) or await part.batch_size(pos, bi)
            if bi >= size:
                raise MalformedError(f"batch index {bi} is not within the batch of {size} at {pos}")
            ops.records.append((pos, bi, size))

    async def _add_cumulative(self, batch: _CursorBatch, part: PartitionDispatch, pos: Position,
                              bi: int | None, *, check_held: bool = True) -> None:
        """Add a cumulative ack through ``(pos, bi)`` to ``batch``."""
        if check_held:
            held_before = part.held.first_through(pos, bi, part.cursor.first_undeleted())
            if held_before is not None:
                raise ConflictError(f"cumulative ack to {pos} covers {unit_id(held_before)}, held "
                                    "by an open transaction")
        size = 1 if bi is None else await part.batch_size(pos, bi)
        if bi is not None and bi >= size:
            raise MalformedError(f"batch index {bi} is not within the batch of {size} at {pos}")
        ops = batch.of(part)
        if bi is None or bi == size - 1:
            ops.mark(pos)
        else:
            if pos.entry_id > 0:
                ops.mark(Position(pos.ledger_id, pos.entry_id - 1))
            ops.prefixes.append((pos, bi, size))

    async def ack_synced(self, part: PartitionDispatch, units: list[Unit],
                         fillers: Iterable[Position] = ()) -> int:
        """Acknowledge what another cluster's consumer acknowledged (beyond PIP-33): how many.

        A unit an open transaction holds here is left to that transaction. ``fillers``
        (markers, aborted entries: no message) are deleted along, uncounted.
        """
        held = part.held
        free = [(part, u) for u in units if u not in held and (u[1] is None or (u[0], None) not in held)]
        skips = [p for p in fillers if not part.cursor.is_deleted(p)]
        if free or skips:
            batch = _CursorBatch()
            await self._add_deletes(batch, free)
            batch.of(part).entries.extend(skips)
            await batch.apply()
            part.forget([u for _, u in free])
            self.notifier.changed()
        return len(free)

    async def nack(self, ids: list[MessageId]) -> None:
        by_part: dict[int, list[Unit]] = {}
        for part, unit in await self.units(ids):
            if unit in part.pending:
                by_part.setdefault(part.index, []).append(unit)
        for index, units in by_part.items():
            self._by_index[index].release(units)
        metrics.redeliveries.labels(*self._labels).inc(sum(len(u) for u in by_part.values()))
        self.notifier.changed()

    # --- transactional acks -------------------------------------------------------

    async def until_ready(self) -> None:
        """Wait while a partition reloads after a failed append (503 if it takes too long)."""
        await _until_ready(self.parts)

    async def check_txn_ack(self, ids: list[MessageId], txn: TxnId, cumulative: bool = False
                            ) -> list[tuple[PartitionDispatch, Unit]]:
        """The canonical units of a transactional ack (:meth:`units`), once it is known that
        ``txn`` may hold them: 409 if another transaction holds one, one is acked already, or
        ``txn`` ended here (its end let go of its holds: a hold now would outlive it)."""
        if txn in self._ended:
            raise ConflictError(f"transaction {txn[0]}:{txn[1]} has ended on subscription {self.name}")
        self._check_dispatched(self._resolve_all(ids))
        resolved = await self.units(ids, through=cumulative)
        for part, unit in resolved:
            if part.is_gone(unit):
                raise ConflictError(f"message {unit_id(unit)} is already acknowledged")
            holder = part.held.get(unit)
            if holder is not None and holder not in (txn, UNNAMED):
                raise ConflictError(f"message {unit_id(unit)} is held by another transaction")
        return resolved

    def hold(self, resolved: list[tuple[PartitionDispatch, Unit]], txn: TxnId, cumulative: bool = False
             ) -> list[NewHold]:
        """Hold units (canonical: :meth:`check_txn_ack`) for ``txn``; return, by partition, those
        it did not hold already (for :meth:`unhold`).

        A cumulative ack also holds what is out with consumers at or before its id: tens of
        thousands of messages, held as the entries they came in (:mod:`.held`), and its reach:
        what is not out (queued, or not read again since a rewind) is not dispatched either.
        """
        newly: list[NewHold] = []
        for part, listed in _by_partition(resolved).values():
            held = part.held
            listed = list(dict.fromkeys(listed))
            part.forget(listed)
            fresh = Taken(units=held.hold(listed, txn))
            reach_before = held.reach(txn)
            for pos, bi in listed if cumulative else ():
                # Taken back from consumers now (given back by ``unhold`` if the store refuses):
                # held by nobody, as what is held is never out, and not listed (forgotten above).
                through = part.take_through(pos, bi)
                held.hold_taken(through, txn)
                held.extend_reach(txn, (pos, bi))
                fresh.entries += through.entries
                fresh.units += through.units
            newly.append(NewHold(part, fresh, reach_before, cumulative))
        return newly

    def unhold(self, newly: list[NewHold], txn: TxnId) -> None:
        """Undo :meth:`hold` after the pending-ack store refused or failed: every unit it took
        is deliverable again, also when the transaction's end came meanwhile (the store was
        ending it: its end let go of holds it never listed, which nobody would give back)."""
        ended = txn in self._ended
        for change in newly:
            part, held = change.part, change.part.held
            if change.cumulative:
                held.set_reach(txn, None if ended else change.reach_before)
            back = []
            for u in change.units:
                holder = held.get(u)
                if holder == txn:
                    held.pop(u)
                    back.append(u)
                elif holder is None and u not in part.pending and u not in part.redeliver:
                    back.append(u)  # let go by the end: found again by the read pass
            part.release(back)
            if change.cumulative:
                part.rewind_all()  # what only the reach held (not out, not queued) is read again
        self.notifier.changed()

    async def end_txn(self, ids: list[str], txn: TxnId | None, commit: bool,
                      cumulative_ids: list[str] | None = None) -> None:
        """The pending-ack store ended a txn: commit deletes, abort makes deliverable (idempotent).

        Every unit the txn holds is let go, listed or not; a cumulative ack commits as a
        mark-delete through each of ``cumulative_ids`` (at most one per partition).
        """
        await _until_ready(self.parts)
        resolved = await self.units(parse_many(ids), strict=False)
        cumulatives = await self.units(parse_many(cumulative_ids or ()), through=True, strict=False)
        batch = _CursorBatch()
        if commit:
            await self._add_deletes(batch, [(p, u) for p, u in resolved if not p.is_gone(u)])
            for part, (pos, bi) in cumulatives:
                # The pending-ack store already ruled on conflicts: apply, never refuse.
                await self._add_cumulative(batch, part, pos, bi, check_held=False)
        listed_here = _by_partition(resolved)
        await batch.apply()
        if commit:
            # A retried end finds its deletes already applied in memory (the first try's
            # persist failed after applying them): it must not answer before they are durable.
            touched = {p.index: p for p, _ in resolved}
            touched.update((part.index, part) for part, _ in cumulatives)
            await asyncio.gather(*(part.cursor.sync() for part in touched.values()))
        for part, (pos, bi) in cumulatives if commit else ():
            part.take_through(pos, bi)
        for part in self.parts:
            listed = listed_here[part.index][1] if part.index in listed_here else []
            reached = txn is not None and part.held.reach(txn) is not None
            # A commit's holds go unopened: what it held is deleted by the cursor batch above.
            let_go = part.held.let_go(txn, listed, units=not commit)
            if commit:
                # What a transaction holds is never out with a consumer (a hold takes it back):
                # only the listed units may be, held by nobody (a hold lost to a restart).
                part.forget(listed)
            else:
                # An abort lets go only what it held here: a repeated end (the store's retry
                # after a lost answer) that came after its units were delivered again must not
                # hand them to a second consumer while the first one has them.
                part.release(let_go)
                if reached:
                    part.rewind_all()  # what only its reach held is read again
        if txn is not None:
            self._ended[txn] = None
            self._ended.move_to_end(txn)
            while len(self._ended) > _max_ended:
                self._ended.popitem(last=False)
        self.notifier.changed()

    async def restore_held(self, held: list[tuple[str, TxnId | None]],
                           reaches: Iterable[tuple[str, TxnId]] = ()) -> None:
        """Hold what the pending-ack store says open transactions hold: ``(id, holder)``
        (holder None: the store did not say), and ``reaches``: ``(id, holder)`` of cumulative
        acks, each holding everything up to its id (as before the restart, not only the id)."""
        # An answer can overtake nothing but be overtaken: the store lists a transaction's ids
        # until it has written its end, after the end was applied here. A unit already gone
        # was deleted by such a commit; the ids of a transaction that ended here (an abort:
        # not gone) are skipped too, or they would never be dispatched again.
        # Broker replicas: the store lists the holds of every partition; only ours matter here.
        live = [(i, t) for i, t in held if self._owns_id(i) and (t is None or t not in self._ended)]
        now = asyncio.get_running_loop().time()
        for (i, txn) in live:
            # One id may name several units (a whole batch entry, from before ids were canonical).
            for part, unit in await self.units([MessageId.parse(i)], strict=False):
                if not part.is_gone(unit):
                    part.forget([unit])  # what is held is not out with a consumer
                    part.held.restore(unit, txn)
                    part.restored_hold(unit[0])
                    if txn is not None:
                        self._restored.setdefault(txn, now)
        for i, txn in reaches:
            if txn in self._ended or not self._owns_id(i):
                continue
            for part, unit in await self.units([MessageId.parse(i)], through=True, strict=False):
                part.take_through(*unit)  # what is held is not out with a consumer
                part.held.extend_reach(txn, unit)
                part.restored_hold(unit[0])
                self._restored.setdefault(txn, now)

    def restored_holders(self, older_than_s: float) -> list[TxnId]:
        """Transactions a ``held`` answer named that still hold something here after
        ``older_than_s``: their end may have reached the partition's previous owner only
        (the stuck-transaction checker asks the coordinator about them)."""
        if not self._restored:
            return []  # the common case: no scan of every hold
        now = asyncio.get_running_loop().time()
        holding = set().union(*(p.held.holders() for p in self.parts))
        for txn in [t for t in self._restored if t not in holding]:
            del self._restored[txn]
        return [t for t, since in self._restored.items() if now - since >= older_than_s]

    async def release_aborted(self, txn: TxnId) -> None:
        """The coordinator aborted ``txn``: what it holds here is deliverable again (as its
        abort's end would make it; a late end is then a repeat)."""
        ids = [unit_id(u) for p in self.parts for u in p.held.units_of(txn)]
        await self.end_txn(ids, txn, commit=False)
        self._restored.pop(txn, None)

    def owned_ids(self, ids: list[str]) -> list[str]:
        """Those of ``ids`` on partitions open here (a spread topic's fanned-out end)."""
        return [i for i in ids if self._owns_id(i)]

    def _owns_id(self, message_id: str) -> bool:
        try:
            return MessageId.parse(message_id).ledger_id in self._by_ledger
        except MalformedError:
            return True  # resolving it raises the error

    # --- stats -----------------------------------------------------------------------

    async def stats(self, only: list[int] | None = None) -> dict[str, Any]:
        """Pulsar's subscription stats, of partitions ``only`` (all open here when None)."""
        parts = self.parts if only is None else [p for p in self.parts if p.index in only]
        backlog = 0
        for p in parts:
            backlog += await p.backlog()
        return {
            "type": self.type.value,
            "msgBacklog": backlog,
            "unackedMessages": sum(len(p.pending) for p in parts),
            "pendingRedelivery": sum(len(p.redeliver) for p in parts),
            "heldByTransactions": sum(len(p.held) for p in parts),
            "msgOutCounter": sum(p.delivered for p in parts),
            "markDeletePositions": [str(p.cursor.mark_delete_position) if p.cursor.mark_delete_position
                                    else None for p in parts],
            "consumers": [{"consumerName": c.name, "msgOutCounter": c.delivered} for c in
                          self.consumers.values()],
            "activeConsumerName": self.owner if self.type is SubscriptionType.EXCLUSIVE else None,
            "activeConsumers": ({str(i): n for i, n in sorted(self.active.items())}
                                if self.type is SubscriptionType.FAILOVER else None),
        }

    async def close(self) -> None:
        self.closed = True
        for p in self.parts:
            await p.cursor.close()


def _by_partition(units: Iterable[tuple[PartitionDispatch, Unit]]
                  ) -> dict[int, tuple[PartitionDispatch, list[Unit]]]:
    """Units grouped by their partition's index, each group in the order given."""
    groups: dict[int, tuple[PartitionDispatch, list[Unit]]] = {}
    for part, unit in units:
        group = groups.get(part.index)
        if group is None:
            group = groups[part.index] = (part, [])
        group[1].append(unit)
    return groups


def _in_position_order(part: PartitionDispatch) -> None:
    """Sort what waits for redelivery by position: a moved partition's new consumer gets it in order."""
    part.redeliver = OrderedDict(sorted(part.redeliver.items(), key=lambda kv: unit_order(kv[0])))


async def _until_ready(parts: list[PartitionDispatch]) -> None:
    """Wait for partitions that reload after a failed append (503 if that takes too long)."""
    for part in parts:
        if part.partition.reloading:
            await part.partition.until_ready()


@dataclass(frozen=True, slots=True)
class NewHold:
    """What :meth:`Subscription.hold` held on one partition that ``txn`` did not hold before,
    and its reach before (a cumulative ack extends it): :meth:`Subscription.unhold` undoes it."""

    part: PartitionDispatch
    units: Taken
    reach_before: Unit | None
    cumulative: bool


@dataclass(slots=True)
class _CursorOps:
    entries: list[Position] = field(default_factory=list)
    records: list[tuple[Position, int, int]] = field(default_factory=list)
    prefixes: list[tuple[Position, int, int]] = field(default_factory=list)  # records 0..index
    mark_delete: Position | None = None

    def mark(self, pos: Position) -> None:
        if self.mark_delete is None or pos > self.mark_delete:
            self.mark_delete = pos


class _CursorBatch:
    """The cursor changes of one request, per partition: applied at once, one persist each."""

    __slots__ = ("_ops",)

    def __init__(self) -> None:
        self._ops: dict[int, tuple[PartitionDispatch, _CursorOps]] = {}

    def of(self, part: PartitionDispatch) -> _CursorOps:
        got = self._ops.get(part.index)
        if got is None:
            got = self._ops[part.index] = (part, _CursorOps())
        return got[1]

    async def apply(self) -> None:
        """Apply every partition's changes in memory now, then await their snapshots together."""
        waits = [part.cursor.apply(ops.entries, ops.records, ops.mark_delete, ops.prefixes)
                 for part, ops in self._ops.values()
                 if ops.entries or ops.records or ops.prefixes or ops.mark_delete is not None]
        if len(waits) == 1:
            await waits[0]
        elif waits:
            await asyncio.gather(*waits)
