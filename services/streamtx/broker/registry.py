"""The broker's registry of open topics and subscriptions.

What exists is the catalog's (:mod:`.catalog`, the ``broker/<cluster>/topics``
ledger). A broker alone opens every partition at start. Broker replicas
(``STREAMTX_REDIS_URL``, :mod:`.replicas`) each open only the PARTITIONS whose
lease they hold (:meth:`Broker.acquire`, :meth:`Broker.release`): as in Pulsar,
``x-partition-N`` is a topic of its own with its own owner, so a hot partitioned
topic spreads over the replicas. A replica's :class:`Topic` holds its partitions
of the topic and its subscriptions' dispatch and cursors on them.

A request names the topic (``x``) or one partition (``x-partition-N``,
:meth:`Broker.target`). The partition's name is served by the partition's owner;
the topic's name by a replica owning every partition (a broker alone, or
replicas between which the topic did not spread); anything else raises
:class:`~streamtx.errors.NotOwnerError` (307 to the owner, or 503 while it
moves or when the partitions are spread: address the partitions, as the SDK does).
Routes ask :meth:`Broker.resolve` instead: it turns the spread case into a
:class:`SpreadPlan` the route fans out (:mod:`.spread`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from streamtx.broker import txnchecker
from streamtx.broker.catalog import Catalog, TopicRecord
from streamtx.broker.dispatch import PartitionDispatch
from streamtx.broker.notify import Notifier
from streamtx.broker.partition import Partition, partition_ledger_name
from streamtx.broker.pendingack_client import PendingAckClient
from streamtx.broker.replicas.exclusive import ExclusiveClaims
from streamtx.broker.replicas.plan import SpreadPlan
from streamtx.broker.replication import metrics as replication_metrics
from streamtx.broker.replication.state import Replication
from streamtx.broker.settings import BrokerSettings
from streamtx.broker.subscription import Subscription, SubscriptionType
from streamtx.broker.topic import Topic
from streamtx.cursor import Cursor, cursor_ledger_name
from streamtx.errors import (
    ConflictError,
    MalformedError,
    NotFoundError,
    NotOwnerError,
    StreamtxError,
    UnavailableError,
)
from streamtx.ledger import LedgerFactory, ledger_id_for
from streamtx.names import MAX_PARTITIONS, check_name, check_topic, partition_name, split_partition
from streamtx.peers import CoordinatorLookup, TxnGuard

__all__ = ["Broker", "Local", "Resolved", "SpreadPlan", "partition_item", "split_item", "split_partition"]

log = logging.getLogger(__name__)

max_partitions = MAX_PARTITIONS


def partition_item(topic: str, index: int) -> str:
    """The lease item (and the name) of partition ``index`` of ``topic``."""
    return partition_name(topic, index)


@dataclass(frozen=True, slots=True)
class Local:
    """A request served here: the topic, and the partition its name names (None: the topic's name)."""

    topic: Topic
    index: int | None


#: What a request's topic name resolves to (:meth:`Broker.resolve`): served here, or fanned out.
Resolved = Local | SpreadPlan


def split_item(item: str) -> tuple[str, int]:
    base, index = split_partition(item)
    assert index is not None, item
    return base, index


class Broker:
    """The topics this process serves; with ``replicas`` only the partitions it holds the lease of."""

    def __init__(self, ledgers: LedgerFactory, settings: BrokerSettings, pendingack: PendingAckClient,
                 *, replicas: bool = False) -> None:
        self.ledgers = ledgers
        self.settings = settings
        self.pendingack = pendingack
        self.replicas = replicas
        self.catalog = Catalog(ledgers, settings.cluster, shared=replicas)
        self.topics: dict[str, Topic] = {}  # the open ones (replicas: with some partitions)
        self.owners: dict[str, str | None] = {}  # replicas: the owner URL of each partition not ours
        # replicas: returns once the topic created here has an owner (replicas.py)
        self.on_created: Callable[[str], Awaitable[None]] | None = None
        self.on_fenced: Callable[[str], None] | None = None  # replicas: a partition's ledger was fenced
        self._lock = asyncio.Lock()
        self._topic_locks: dict[str, asyncio.Lock] = {}
        self._ledger_partitions: dict[str, dict[int, int]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._lookup: CoordinatorLookup | None = None  # the stuck-transaction checker's
        # Every transactional produce and ack is checked with the coordinator (peers/txnguard.py);
        # a broker without one (tests of the broker alone) cannot ask, and takes them unchecked.
        self.txn_guard = (TxnGuard(settings.coordinator_url, token=settings.outgoing_token())
                          if settings.coordinator_url else None)
        self.replication = Replication(ledgers, settings.cluster)
        replication_metrics.watch(self.replication)
        self.exclusive = (ExclusiveClaims.from_url(settings.redis_url, settings.cluster,
                                                   settings.exclusive_idle_ms)
                          if replicas and settings.redis_url else None)

    # --- lifecycle ----------------------------------------------------------

    async def start(self) -> None:
        await self.catalog.open()
        if not self.replicas:  # alone: every partition is ours
            await self._acquire_all()
        self._tasks.append(asyncio.create_task(self._snapshot_timer()))
        self._tasks.append(asyncio.create_task(self._replication_timer()))
        s = self.settings
        if s.coordinator_url:
            self._lookup = CoordinatorLookup(s.coordinator_url, token=s.outgoing_token())
            checker = txnchecker.checker(
                self._lookup, self._partitions, self._subscriptions,
                after_s=s.stuck_txn_after_s, interval_s=s.stuck_txn_interval_s)
            self._tasks.append(asyncio.create_task(checker.run()))

    async def _acquire_all(self, at_once: int = 8) -> None:
        """Open every topic's partitions, topics side by side (at most ``at_once``): a restarted
        broker serves nothing until all are open, and one topic after another made its
        recovery after a crash the sum of every partition's ledger and cursor opens (issue 25).
        One topic's partitions still join it one at a time (its lock)."""
        gate = asyncio.Semaphore(at_once)

        async def topic(name: str) -> None:
            async with gate:
                for item in self.items_of(name):
                    await self.acquire(item)

        await asyncio.gather(*(topic(name) for name in list(self.catalog.topics)))

    def _partitions(self) -> list[Partition]:
        return [p for t in self.topics.values() for p in t.partitions]

    def _subscriptions(self) -> list[Subscription]:
        return [s for t in self.topics.values() for s in t.subscriptions.values()]

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):  # shutting down: errors were logged
                pass
        for item in self.open_items():
            await self.release(item, lost=False)
        await self.replication.close()
        await self.catalog.close()
        await self.pendingack.aclose()
        if self._lookup is not None:
            await self._lookup.aclose()
        if self.txn_guard is not None:
            await self.txn_guard.aclose()
        if self.exclusive is not None:
            await self.exclusive.aclose()

    async def _snapshot_timer(self) -> None:
        while True:
            await asyncio.sleep(self.settings.snapshot_interval_s)
            for topic in list(self.topics.values()):
                for p in topic.partitions:
                    try:
                        await p.maybe_snapshot_on_timer()
                    except StreamtxError as exc:
                        log.warning("snapshot of %s failed: %s", p.name, exc)

    async def _replication_timer(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            try:
                await self.replication.refresh()
            except StreamtxError as exc:
                log.warning("replication stats refresh failed: %s", exc)

    # --- ownership (replicas.py calls these) -------------------------------------

    def items_of(self, topic: str) -> list[str]:
        """The lease items of a topic: its partitions' names."""
        return [partition_item(topic, i) for i in range(self.catalog.topics[topic].partitions)]

    def all_items(self) -> list[str]:
        return [item for name in self.catalog.topics for item in self.items_of(name)]

    def open_items(self) -> list[str]:
        return [partition_item(name, i) for name, t in self.topics.items() for i in t.owned]

    def is_open(self, item: str) -> bool:
        base, index = split_item(item)
        return (t := self.topics.get(base)) is not None and index in t.owned

    async def acquire(self, item: str) -> None:
        """Open a partition the catalog names (``x-partition-N``): its ledger as writer, which
        fences any previous owner, then recovered from snapshot and ledger; and its dispatch
        and cursor in every subscription of the topic."""
        if self.is_open(item):
            return
        if self.replicas:  # what the previous owner recorded until it let go
            await self.catch_up()
        name, index = split_item(item)
        # Partitions of one topic are taken concurrently: one at a time joins its Topic.
        async with self._topic_lock(name):
            await self._acquire(name, index, item)

    def _topic_lock(self, name: str) -> asyncio.Lock:
        """What changes which partitions of ``name`` are open here, and which subscriptions are
        open on them, holds this: a subscription opened while a partition joins (or leaves) would
        otherwise list the partitions before the change and join the topic after it, missing the
        new partition for good (or keeping a closed one). Taken after ``_lock``, never before."""
        return self._topic_locks.setdefault(name, asyncio.Lock())

    async def _acquire(self, name: str, index: int, item: str) -> None:
        record = self.catalog.topics[name]
        topic = self.topics.get(name)
        new_topic = topic is None
        if topic is None:
            topic = Topic(name, [], Notifier(), self.replication.first_unreplicated, count=record.partitions,
                          indexes=[], owner_of=self._owner_of(name))
        part = await Partition.open(self.ledgers, item, name, self.settings, topic.notifier)
        part.on_fenced = self._fenced
        added: list[Subscription] = []
        cursors: list[tuple[Subscription, PartitionDispatch]] = []
        try:
            if new_topic:  # not resolvable here before it is in self.topics, below
                topic.add(index, part)
                for sub_name, rec in list(record.subscriptions.items()):
                    opened = await self._open_subscription(topic, sub_name, SubscriptionType(rec.type),
                                                           rec.initial_position, new=False, only=[index])
                    opened.replicated = rec.replicated
            else:
                # Every subscription's cursor opens before the partition joins the topic: once it
                # has, requests resolve it here, and a subscription still without it would take
                # its ids in a fanned-out end for another owner's and drop them (acks lost).
                for sub in list(topic.subscriptions.values()):
                    cursors.append((sub, await self._dispatch(part, index, sub.name, new=False,
                                                              initial="earliest")))
                topic.add(index, part)
                for sub, dispatch in cursors:
                    sub.add_part(dispatch)
                    added.append(sub)
                    self._restore_part_held(sub, index)
            # Its replication cursors open with it, before the controller first asks: they
            # hold back trims and show the backlog from the start, wherever the partition moved.
            for remote in sorted(record.remotes):
                await self.replication.link(name, index, part, remote)
        except BaseException:
            await self.replication.forget(name, index)
            topic.remove(index)
            for joined in added:
                joined.remove_part(index)
            for _, dispatch in cursors:
                await dispatch.cursor.close()
            if new_topic:
                for opened_sub in topic.subscriptions.values():
                    await opened_sub.close()
            await part.close()
            raise
        self.topics[name] = topic
        topic.notifier.changed()

    def _owner_of(self, name: str) -> Callable[[int], str | None]:
        return lambda index: self.owners.get(partition_item(name, index))

    async def catch_up(self) -> None:
        """Replicas: fold in what other replicas recorded since the last tick; a subscription
        recorded for a topic open here (by its previous owner, as it let go) opens here too."""
        # Under the lock creations take: a subscription created here is recorded before it
        # is opened, and must not be opened a second time (a second cursor writer) meanwhile.
        async with self._lock:
            for r in await self.catalog.refresh():
                topic = self.topics.get(r["topic"])
                if topic is None or r["kind"] == "topic":
                    continue
                if r["kind"] == "replication_cursor":  # another replica's partition replicates there
                    if r["remote"] in self.catalog.topics[topic.name].remotes:  # not removed since
                        for index, part in list(topic.owned.items()):
                            await self.replication.link(topic.name, index, part, r["remote"])
                    continue
                if r["kind"] == "replication_cursor_removed":  # removed through another replica
                    await self._drop_remote(topic.name, r["remote"])
                    continue
                if r["kind"] == "subscription_removed":  # unsubscribed through another replica
                    await self._drop_subscription(topic.name, r["subscription"])
                    continue
                sub = self.catalog.topics[r["topic"]].subscriptions.get(r["subscription"])
                if sub is not None and (opened_here := topic.subscriptions.get(r["subscription"])):
                    opened_here.replicated = sub.replicated  # another replica switched PIP-33 on or off
                    continue
                if sub is not None:
                    opened = await self._open_here(
                        topic.name, r["subscription"], SubscriptionType(sub.type), sub.initial_position,
                        new=False, fresh=True)
                    if opened is not None:
                        opened.replicated = sub.replicated

    async def release(self, item: str, *, lost: bool) -> None:
        """Close a partition: with a final snapshot and flushed cursors when handed over; at once
        when ``lost`` (another replica writes its ledgers now: nothing more can be written)."""
        name, index = split_item(item)
        async with self._topic_lock(name):
            await self._release(name, index, lost=lost)

    async def _release(self, name: str, index: int, *, lost: bool) -> None:
        topic = self.topics.get(name)
        if topic is None or index not in topic.owned:
            return
        part = topic.remove(index)
        assert part is not None
        for sub in topic.subscriptions.values():
            if (d := sub.remove_part(index)) is not None:
                await d.cursor.close()
        if not topic.owned:
            self.topics.pop(name, None)
            for sub in topic.subscriptions.values():
                await sub.close()
        await self.replication.forget(name, index)  # its replication cursors move with it
        if not lost:
            try:  # a clean stop leaves a fresh snapshot: the next owner replays nothing
                await part.maybe_snapshot_on_timer()
            except StreamtxError as exc:
                log.warning("final snapshot of %s failed: %s", part.name, exc)
        await part.close()
        topic.notifier.changed()  # long polls waiting on it end

    async def note_remote(self, topic: str, remote: str) -> None:
        """Record (once) that ``topic`` replicates to ``remote``: every owner of one of its
        partitions opens that partition's cursor ``pulsar.repl.<remote>`` from then on."""
        if remote in self.catalog.topics[topic].remotes:
            return
        async with self._lock:
            if remote not in self.catalog.topics[topic].remotes:
                await self._record({"kind": "replication_cursor", "topic": topic, "remote": remote})

    async def forget_remote(self, topic: str, remote: str) -> None:
        """``topic`` no longer replicates to ``remote`` (it left the topic's policy, or was deleted):
        recorded, so no owner opens its ``pulsar.repl.<remote>`` cursors again, and those of the
        partitions open here are deleted (other replicas delete theirs when they catch up). As
        Pulsar removes a replicator's cursor when its cluster leaves the replication clusters:
        a cursor nobody moves any more would hold back every trim for good."""
        await self.known(topic)
        async with self._lock:
            if remote in self.catalog.topics[topic].remotes:
                await self._record({"kind": "replication_cursor_removed", "topic": topic, "remote": remote})
            await self._drop_remote(topic, remote)

    async def _drop_remote(self, topic: str, remote: str) -> None:
        async with self._topic_lock(topic):  # no partition joins with the cursor meanwhile
            await self.replication.drop(topic, remote)

    def _fenced(self, partition: Partition) -> None:
        if self.on_fenced is not None:
            self.on_fenced(partition.name)

    async def _record(self, record: dict[str, Any]) -> None:
        await self.catalog.append(record)

    # --- topics ---------------------------------------------------------------

    def target(self, name: str, *, here: bool = False) -> tuple[Topic, int | None]:
        """What a request names: the topic (index None), served only where every partition is
        open; or one partition ``x-partition-N`` (its index), served where it is open.
        ``here``: a replica forwarding a request on a spread topic's name (:mod:`.spread`) asks
        for the partitions open here only."""
        topic = self.topics.get(name)
        if topic is not None and (here or topic.owns_all()):
            return topic, None
        base, index = split_partition(name)
        if index is not None and name not in self.catalog.topics and base in self.catalog.topics:
            topic = self.topics.get(base)
            if index >= self.catalog.topics[base].partitions:
                raise NotFoundError(f"{base} has no partition {index}")
            if topic is None or index not in topic.owned:
                owner = self.owners.get(name)
                raise NotOwnerError(f"partition {name} is owned by {owner or 'nobody yet (moving)'}", owner)
            return topic, index
        if self.replicas and name in self.catalog.topics:
            raise self._not_owner(name)
        raise NotFoundError(f"topic {name} does not exist")

    def resolve(self, name: str, *, here: bool = False) -> Resolved:
        """Where the request naming ``name`` is served: :class:`Local` (the topic or one partition
        open here, as :meth:`target`), or a :class:`SpreadPlan` when the topic's partitions are
        spread over replicas (the route fans out, :mod:`.spread`). ``here``: a forwarded request
        (header ``streamtx-partitions-here``), never fanned out again: refused instead. Otherwise
        :class:`~streamtx.errors.NotOwnerError` as :meth:`spread_plan` leaves it (307, or 503
        while a partition moves), :class:`~streamtx.errors.NotFoundError` for no such topic."""
        try:
            topic, index = self.target(name, here=here)
        except NotOwnerError as exc:
            if here:
                raise
            return self.spread_plan(name, exc)
        return Local(topic, index)

    def spread_plan(self, name: str, refused: NotOwnerError) -> SpreadPlan:
        """Where each partition of the topic named by a request this replica cannot serve alone
        is (:mod:`.spread` forwards to the owners); ``refused`` again when that is no answer
        (one other broker owns it all: its 307; a partition moving: 503)."""
        record = self.catalog.topics.get(name)
        if not self.replicas or record is None or refused.owner is not None:
            raise refused
        topic = self.topics.get(name)
        remote: dict[str, list[int]] = {}
        for i in range(record.partitions):
            if topic is not None and i in topic.owned:
                continue
            owner = self.owners.get(partition_item(name, i))
            if owner is None:
                raise refused
            remote.setdefault(owner, []).append(i)
        local = sorted(topic.owned) if topic is not None else []
        router = topic or Topic(name, [], Notifier(), count=record.partitions, indexes=[])
        return SpreadPlan(name, record.partitions, topic, local, remote, router, self.ledger_partitions(name))

    def ledger_partitions(self, name: str) -> dict[int, int]:
        """Partition ledger id (a message id's first part) -> partition index, for ``name``."""
        got = self._ledger_partitions.get(name)
        if got is None:
            got = self._ledger_partitions[name] = {
                ledger_id_for(partition_ledger_name(partition_item(name, i))): i
                for i in range(self.catalog.topics[name].partitions)}
        return got

    def _not_owner(self, name: str) -> NotOwnerError:
        """The topic's name reached a replica without every partition: 307 when one other
        replica owns them all, else 503 (moving, or spread: ask for each partition)."""
        owners = {self.owners.get(item) for item in self.items_of(name) if not self.is_open(item)}
        if len(owners) == 1 and not self.topics.get(name) and (owner := owners.pop()) is not None:
            return NotOwnerError(f"topic {name} is owned by {owner}", owner)
        return NotOwnerError(f"the partitions of {name} are moving or spread over brokers: "
                             f"address them one by one ({name}-partition-N)", None)

    async def subscription(self, topic: Topic, name: str) -> Subscription:
        """A subscription of a topic open here; replicas: one recorded by another replica since
        the last tick is opened first (each owner opens it on its partitions)."""
        if name not in topic.subscriptions and self.replicas:
            await self.catch_up()
        return topic.subscription(name)

    def topic(self, name: str) -> Topic:
        """The topic a request names, by its name or one of its partitions' (see :meth:`target`)."""
        return self.target(name)[0]

    async def known(self, name: str) -> TopicRecord:
        """What the catalog says of ``name`` (replicas: caught up first if it is not there yet)."""
        if name not in self.catalog.topics and self.replicas:
            await self.catch_up()
        record = self.catalog.topics.get(name)
        if record is None:
            raise NotFoundError(f"topic {name} does not exist")
        return record

    def resolve_partition(self, partition_name: str) -> Partition:
        """``persistent://t/n/x-partition-i`` → that partition."""
        _, index = split_partition(partition_name)
        if index is None:
            raise MalformedError(f"not a partition name: {partition_name!r}")
        topic, at = self.target(partition_name)
        return topic.partition(index if at is None else at)

    async def create_topic(self, name: str, partitions: int) -> None:
        check_topic(name)  # whoever asks (admin API, replication): no ledger for a name Pulsar refuses
        if not 1 <= partitions <= max_partitions:
            raise MalformedError(f"partitions must be within 1..{max_partitions}")
        async with self._lock:
            existing = self.catalog.topics.get(name)
            if existing is None:
                await self._record({"kind": "topic", "topic": name, "partitions": partitions})
                existing = self.catalog.topics[name]
                if not self.replicas:
                    for item in self.items_of(name):
                        await self.acquire(item)
            if existing.partitions != partitions:
                raise ConflictError(f"{name} exists with {existing.partitions} partitions")
        if self.on_created is not None:
            await self.on_created(name)

    # --- subscriptions --------------------------------------------------------------

    async def create_subscription(self, topic_name: str, name: str, sub_type: SubscriptionType,
                                  initial_position: str, replicated: bool | None = None
                                  ) -> Subscription | None:
        """Create (or retype) a subscription; ``replicated`` set, its PIP-33 state follows.

        Replicas: recorded for every partition, opened here on the partitions this replica
        owns (None when it owns none: their owners open it at their next tick)."""
        topic_name = await self._subscription_topic(topic_name, name)
        sub = await self._create_subscription(topic_name, name, sub_type, initial_position)
        if replicated is not None:
            await self.set_replicated(topic_name, name, sub, replicated)
        return sub

    async def _subscription_topic(self, topic_name: str, name: str) -> str:
        """The topic whose subscription ``name`` a request names (a partition's name: the topic's)."""
        check_name("subscription", name)
        if not self.replicas:
            return self.topic(topic_name).name
        base, index = split_partition(topic_name)
        if index is not None and topic_name not in self.catalog.topics and base in self.catalog.topics:
            topic_name = base  # a subscription of a partition's name is the topic's
        # Another replica may have created (or deleted) it meanwhile: its record decides (never a
        # second "new" one, which would move the cursors it has on partitions opened since).
        await self.catch_up()
        await self.known(topic_name)
        return topic_name

    async def delete_subscription(self, topic_name: str, name: str, *, force: bool) -> None:
        """Unsubscribe (Pulsar's ``DELETE .../subscription/{sub}``): recorded, so no restart or
        owner reopens it, and its cursors and their ledgers on the partitions open here deleted
        (other broker replicas delete theirs when they catch up). 404 when it does not exist;
        409 while consumers are connected here (unless ``force``) or while an open transaction
        holds acks on it (those acks would be lost: the transaction ends first)."""
        topic_name = await self._subscription_topic(topic_name, name)
        async with self._lock:
            if name not in self.catalog.topics[topic_name].subscriptions:
                raise NotFoundError(f"subscription {name} of {topic_name} does not exist")
            topic = self.topics.get(topic_name)
            sub = topic.subscriptions.get(name) if topic is not None else None
            if sub is not None:
                if any(p.held for p in sub.parts):
                    raise ConflictError(f"subscription {name} has acks pending in open transactions: "
                                        "end them first")
                if sub.consumers and not force:
                    raise ConflictError(f"subscription {name} has {len(sub.consumers)} connected "
                                        "consumers: close them or delete with force=true")
            await self._record({"kind": "subscription_removed", "topic": topic_name, "subscription": name})
            await self._drop_subscription(topic_name, name)

    async def _drop_subscription(self, topic_name: str, name: str) -> None:
        """Close the subscription here and delete its cursors' ledgers (a later one starts anew)."""
        async with self._topic_lock(topic_name):  # no partition joins with its cursor meanwhile
            topic = self.topics.get(topic_name)
            sub = topic.subscriptions.pop(name, None) if topic is not None else None
            if sub is None:
                return
            ledgers = [cursor_ledger_name(p.partition.ledger.name, name) for p in sub.parts]
            await sub.close()
            for ledger in ledgers:
                await self.ledgers.delete(ledger)
            sub.notifier.changed()  # waiting fetches end

    def _check_room(self, topic: str) -> None:
        """409 when the topic has ``max_subscriptions_per_topic`` subscriptions already (each holds a
        cursor ledger per partition: files, memory, a share of every trim's work)."""
        limit = self.settings.max_subscriptions_per_topic
        if len(self.catalog.topics[topic].subscriptions) >= limit:
            raise ConflictError(f"topic {topic} has {limit} subscriptions, the most it may have "
                                "(STREAMTX_MAX_SUBSCRIPTIONS_PER_TOPIC): delete one first")

    async def set_replicated(self, topic: str, name: str, sub: Subscription | None, replicated: bool) -> None:
        """Whether the subscription's position follows the consumer to other clusters (durable)."""
        async with self._lock:
            record = self.catalog.topics[topic].subscriptions.get(name)
            if record is not None and record.replicated is not replicated:
                await self._record({"kind": "subscription_replicated", "topic": topic,
                                    "subscription": name, "replicated": replicated})
            if sub is not None:
                sub.replicated = replicated

    async def _create_subscription(self, topic_name: str, name: str, sub_type: SubscriptionType,
                                   initial_position: str) -> Subscription | None:
        async with self._lock:
            topic = self.topics.get(topic_name)
            record = self.catalog.topics[topic_name].subscriptions.get(name)
            if record is not None and record.type != sub_type.value:
                sub = topic.subscriptions.get(name) if topic is not None else None
                if sub is not None and sub.consumers:
                    raise ConflictError(f"subscription {name} is {sub.type.value} and has consumers")
            if record is None:
                self._check_room(topic_name)
            if record is None or record.type != sub_type.value:
                await self._record(self._sub_record(topic_name, name, sub_type, initial_position))
            # The topic may have opened or closed here meanwhile: its lock decides.
            return await self._open_here(topic_name, name, sub_type, initial_position, new=record is None)

    async def open_recorded(self, topic_name: str, name: str) -> list[int]:
        """Replicas: open a subscription another replica just recorded on the partitions open
        here, now (a ``latest`` one at their end, unless it has a cursor there already): the
        partitions it is open on here. The creator asks every owner before answering."""
        await self.catch_up()  # opens it here if the record is new to this replica
        record = self.catalog.topics.get(topic_name)
        if record is None or name not in record.subscriptions:
            raise UnavailableError(f"subscription {name} of {topic_name} is not in the registry here yet")
        async with self._lock:
            topic = self.topics.get(topic_name)
            if topic is None:
                return []
            sub = topic.subscriptions.get(name)
            if sub is None:  # recorded before this replica opened the topic: opened then
                rec = record.subscriptions[name]
                sub = await self._open_here(topic_name, name, SubscriptionType(rec.type),
                                            rec.initial_position, new=False, fresh=True)
                if sub is None:  # its last partition here was handed over meanwhile
                    return []
                sub.replicated = rec.replicated
            return [p.index for p in sub.parts]

    def owners_elsewhere(self, topic_name: str, here: list[int]) -> dict[str, list[int]]:
        """The owner of each partition of the topic not in ``here``, by owner; 503 when one
        has none (it moves: retry)."""
        out: dict[str, list[int]] = {}
        for i in range(self.catalog.topics[topic_name].partitions):
            if i in here:
                continue
            owner = self.owners.get(partition_item(topic_name, i))
            if owner is None:
                raise NotOwnerError(f"partition {i} of {topic_name} is moving between brokers", None)
            out.setdefault(owner, []).append(i)
        return out

    @staticmethod
    def _sub_record(topic: str, name: str, sub_type: SubscriptionType, initial: str) -> dict[str, Any]:
        return {"kind": "subscription", "topic": topic, "subscription": name, "type": sub_type.value,
                "initial_position": initial}

    async def _dispatch(self, p: Partition, index: int, name: str, *, new: bool, initial: str,
                        fresh: bool = False) -> PartitionDispatch:
        """Subscription ``name``'s cursor on partition ``index`` (``p``). ``fresh``: the
        subscription was just recorded (by another replica): a ``latest`` one starts at the end
        here too, unless its cursor was saved already."""
        cursor = await Cursor.open(self.ledgers, p.ledger, name)
        # A saved cursor is an existing subscription's position on this partition: never moved.
        if initial == "latest" and (new or fresh) and not cursor.saved:
            last = p.ledger.last_position()
            if last is not None:
                await cursor.mark_delete(last)
        dispatch = PartitionDispatch(index, p, cursor, self.settings.dispatch_read_entries)
        if new and not cursor.saved:
            # A subscription created just now: no earlier process handed anything out on it, so
            # what was readable before it dispatched nothing (an ack of it is refused: it must
            # still be delivered); ``latest`` starts past its mark-delete.
            dispatch.dispatched_through = cursor.mark_delete_position
        return dispatch

    def _restore_part_held(self, sub: Subscription, index: int) -> None:
        """A partition joined a subscription: what open txns hold on it, from the pending-ack store."""
        if self.pendingack.configured:
            sub.held_ready.clear()
            self._tasks.append(asyncio.create_task(self._restore_held(sub, names=[
                sub.topic, partition_item(sub.topic, index)])))

    async def _open_here(self, topic_name: str, name: str, sub_type: SubscriptionType, initial_position: str,
                         *, new: bool, fresh: bool = False) -> Subscription | None:
        """Open a subscription on the partitions of ``topic_name`` open here (None: none is), under
        the topic's lock: no partition joins or leaves while its cursors open."""
        async with self._topic_lock(topic_name):
            topic = self.topics.get(topic_name)
            if topic is None:
                return None
            return await self._open_subscription(topic, name, sub_type, initial_position, new=new,
                                                 fresh=fresh)

    async def _open_subscription(self, topic: Topic, name: str, sub_type: SubscriptionType,
                                 initial_position: str, *, new: bool, only: list[int] | None = None,
                                 fresh: bool = False) -> Subscription:
        """The caller holds the topic's lock (:meth:`_topic_lock`)."""
        existing = topic.subscriptions.get(name)
        if existing is not None:  # a later record changed its type
            existing.type = sub_type
            return existing
        parts: list[PartitionDispatch] = []
        try:
            for i in sorted(topic.owned) if only is None else only:
                parts.append(await self._dispatch(topic.owned[i], i, name, new=new, initial=initial_position,
                                                  fresh=fresh))
        except BaseException:
            for opened in parts:  # no cursor writer left behind without a subscription
                await opened.cursor.close()
            raise
        sub = Subscription(topic.name, name, sub_type, parts, self.settings, topic.notifier,
                           count=topic.count)
        sub.claims = self.exclusive
        topic.subscriptions[name] = sub
        if new or not self.pendingack.configured:
            sub.held_ready.set()
        else:
            self._tasks.append(asyncio.create_task(self._restore_held(sub)))
        return sub

    async def _restore_held(self, sub: Subscription, names: list[str] | None = None) -> None:
        """Ask the pending-ack store which positions open txns hold; retry until it answers."""
        # Dispatching before it answers could hand a held position to another consumer,
        # so this subscription's fetches wait (and return empty) until then. Acks sent to
        # a partition's own name (the SDK's, over spread replicas) are held under that name.
        if names is None:
            names = [sub.topic, *(partition_item(sub.topic, p.index) for p in sub.parts)]
        for n in names:
            await sub.restore_held(*await self.pendingack.held_when_answering(n, sub.name))
        sub.held_ready.set()
        sub.notifier.changed()
