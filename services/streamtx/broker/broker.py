"""The broker's registry of open topics and subscriptions.

What exists is the catalog's (:mod:`.catalog`, the ``broker/<cluster>/topics``
ledger). A broker alone opens every topic at start. Broker replicas
(``STREAMTX_REDIS_URL``, :mod:`.replicas`) each open only the topics whose lease
they hold (:meth:`Broker.acquire`, :meth:`Broker.release`); a request for a
topic another replica owns raises :class:`~streamtx.errors.NotOwnerError`
(307 to the owner, or 503 while it moves).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from streamtx.broker import replication_metrics
from streamtx.broker.catalog import Catalog, TopicRecord
from streamtx.broker.dispatch import PartitionDispatch
from streamtx.broker.notify import Notifier
from streamtx.broker.partition import Partition
from streamtx.broker.pendingack_client import PendingAckClient
from streamtx.broker.replication import Replication
from streamtx.broker.settings import BrokerSettings
from streamtx.broker.subscription import Subscription, SubscriptionType
from streamtx.broker.topic import Topic
from streamtx.broker.txnchecker import StuckTxnChecker
from streamtx.cursor import Cursor
from streamtx.errors import ConflictError, MalformedError, NotFoundError, NotOwnerError, StreamtxError
from streamtx.ledger import LedgerFactory
from streamtx.names import check_name, check_topic

log = logging.getLogger(__name__)

max_partitions = 1024


class Broker:
    """The topics this process serves; with ``replicas`` only those it holds the lease of."""

    def __init__(self, store: LedgerFactory, settings: BrokerSettings, pendingack: PendingAckClient,
                 *, replicas: bool = False) -> None:
        self.store = store
        self.settings = settings
        self.pendingack = pendingack
        self.replicas = replicas
        self.catalog = Catalog(store, settings.cluster, shared=replicas)
        self.topics: dict[str, Topic] = {}  # the open ones
        self.owners: dict[str, str | None] = {}  # replicas: the owner URL of each topic not ours
        # replicas: returns once the topic created here has an owner (replicas.py)
        self.on_created: Callable[[str], Awaitable[None]] | None = None
        self.on_fenced: Callable[[str], None] | None = None  # replicas: a topic's ledger was fenced
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._checker: StuckTxnChecker | None = None
        self.replication = Replication(store, settings.cluster)
        replication_metrics.watch(self.replication)

    # --- lifecycle ----------------------------------------------------------

    async def start(self) -> None:
        await self.catalog.open()
        if not self.replicas:  # alone: every topic is ours
            for name in list(self.catalog.topics):
                await self.acquire(name)
        self._tasks.append(asyncio.create_task(self._snapshot_timer()))
        self._tasks.append(asyncio.create_task(self._replication_timer()))
        if self.settings.coordinator_url:
            self._checker = StuckTxnChecker(
                self.settings.coordinator_url, token=self.settings.outgoing_token(),
                after_s=self.settings.stuck_txn_after_s, interval_s=self.settings.stuck_txn_interval_s)
            self._tasks.append(asyncio.create_task(self._checker.run(self._partitions)))

    def _open_partitions(self, topic: str) -> list[Partition]:
        """A topic's partitions if it is open here (replicas: another may own it)."""
        return t.partitions if (t := self.topics.get(topic)) is not None else []

    def _partitions(self) -> list[Partition]:
        return [p for t in self.topics.values() for p in t.partitions]

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):  # shutting down: errors were logged
                pass
        for name in list(self.topics):
            await self.release(name, lost=False)
        await self.replication.close()
        await self.catalog.close()
        await self.pendingack.aclose()
        if self._checker is not None:
            await self._checker.aclose()

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
                await self.replication.refresh(self._open_partitions)
            except StreamtxError as exc:
                log.warning("replication stats refresh failed: %s", exc)

    # --- ownership (replicas.py calls these) -------------------------------------

    async def acquire(self, name: str) -> None:
        """Open a topic the catalog names: its partitions (as the ledgers' writer, which fences
        any previous owner, then recovered from snapshot and ledger) and its subscriptions."""
        if name in self.topics:
            return
        if self.replicas:  # what the previous owner recorded until it let go
            await self.catch_up()
        record = self.catalog.topics[name]
        notifier = Notifier()
        parts: list[Partition] = []
        try:
            for i in range(record.partitions):
                parts.append(await Partition.open(self.store, f"{name}-partition-{i}", name, self.settings,
                                                  notifier))
                parts[-1].on_fenced = self._fenced
            topic = Topic(name, parts, notifier, self.replication.first_unreplicated)
            for sub_name, sub in list(record.subscriptions.items()):
                opened = await self._open_subscription(topic, sub_name, SubscriptionType(sub.type),
                                                       sub.initial_position, new=False)
                opened.replicated = sub.replicated
        except BaseException:
            for p in parts:
                await p.close()
            raise
        self.topics[name] = topic

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
                sub = self.catalog.topics[r["topic"]].subscriptions.get(r["subscription"])
                if sub is not None and r["subscription"] not in topic.subscriptions:
                    opened = await self._open_subscription(
                        topic, r["subscription"], SubscriptionType(sub.type), sub.initial_position, new=False)
                    opened.replicated = sub.replicated

    async def release(self, name: str, *, lost: bool) -> None:
        """Close a topic: with a final snapshot and flushed cursors when handed over; at once when
        ``lost`` (another replica writes its ledgers now: nothing more can be written)."""
        topic = self.topics.pop(name, None)
        if topic is None:
            return
        for sub in topic.subscriptions.values():
            await sub.close()
        await self.replication.forget(name)
        for p in topic.partitions:
            if not lost:
                try:  # a clean stop leaves a fresh snapshot: the next owner replays nothing
                    await p.maybe_snapshot_on_timer()
                except StreamtxError as exc:
                    log.warning("final snapshot of %s failed: %s", p.name, exc)
            await p.close()
        topic.notifier.changed()  # long polls waiting on it end

    def _fenced(self, partition: Partition) -> None:
        if self.on_fenced is not None:
            self.on_fenced(partition.topic)

    async def _record(self, record: dict[str, Any]) -> None:
        await self.catalog.append(record)

    # --- topics ---------------------------------------------------------------

    def topic(self, name: str) -> Topic:
        topic = self.topics.get(name)
        if topic is None:
            if self.replicas and name in self.catalog.topics:
                owner = self.owners.get(name)
                raise NotOwnerError(f"topic {name} is owned by {owner or 'nobody yet (moving)'}", owner)
            raise NotFoundError(f"topic {name} does not exist")
        return topic

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
        base, sep, index = partition_name.rpartition("-partition-")
        if not sep or not index.isdigit():
            raise MalformedError(f"not a partition name: {partition_name!r}")
        return self.topic(base).partition(int(index))

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
                    await self.acquire(name)
            if existing.partitions != partitions:
                raise ConflictError(f"{name} exists with {existing.partitions} partitions")
        if self.on_created is not None:
            await self.on_created(name)

    # --- subscriptions --------------------------------------------------------------

    async def create_subscription(self, topic_name: str, name: str, sub_type: SubscriptionType,
                                  initial_position: str, replicated: bool | None = None) -> Subscription:
        """Create (or retype) a subscription; ``replicated`` set, its PIP-33 state follows."""
        sub = await self._create_subscription(topic_name, name, sub_type, initial_position)
        if replicated is not None:
            await self.set_replicated(sub, replicated)
        return sub

    async def set_replicated(self, sub: Subscription, replicated: bool) -> None:
        """Whether the subscription's position follows the consumer to other clusters (durable)."""
        async with self._lock:
            if sub.replicated is not replicated:
                await self._record({"kind": "subscription_replicated", "topic": sub.topic,
                                    "subscription": sub.name, "replicated": replicated})
                sub.replicated = replicated

    async def _create_subscription(self, topic_name: str, name: str, sub_type: SubscriptionType,
                                   initial_position: str) -> Subscription:
        check_name("subscription", name)
        topic = self.topic(topic_name)
        async with self._lock:
            sub = topic.subscriptions.get(name)
            if sub is not None:
                if sub.type is not sub_type:
                    if sub.consumers:
                        raise ConflictError(f"subscription {name} is {sub.type.value} and has consumers")
                    sub.type = sub_type
                    await self._record(self._sub_record(topic_name, name, sub_type, initial_position))
                return sub
            await self._record(self._sub_record(topic_name, name, sub_type, initial_position))
            return await self._open_subscription(topic, name, sub_type, initial_position, new=True)

    @staticmethod
    def _sub_record(topic: str, name: str, sub_type: SubscriptionType, initial: str) -> dict[str, Any]:
        return {"kind": "subscription", "topic": topic, "subscription": name, "type": sub_type.value,
                "initial_position": initial}

    async def _open_subscription(self, topic: Topic, name: str, sub_type: SubscriptionType,
                                 initial_position: str, *, new: bool) -> Subscription:
        existing = topic.subscriptions.get(name)
        if existing is not None:  # a later record changed its type
            existing.type = sub_type
            return existing
        parts = []
        for i, p in enumerate(topic.partitions):
            cursor = await Cursor.open(self.store, p.ledger, name)
            if new and initial_position == "latest":
                last = p.ledger.last_position()
                if last is not None:
                    await cursor.mark_delete(last)
            parts.append(PartitionDispatch(i, p, cursor, self.settings.dispatch_read_entries))
        sub = Subscription(topic.name, name, sub_type, parts, self.settings, topic.notifier)
        topic.subscriptions[name] = sub
        if new or not self.pendingack.configured:
            sub.held_ready.set()
        else:
            self._tasks.append(asyncio.create_task(self._restore_held(sub)))
        return sub

    async def _restore_held(self, sub: Subscription) -> None:
        """Ask the pending-ack store which positions open txns hold; retry until it answers."""
        # Dispatching before it answers could hand a held position to another consumer,
        # so this subscription's fetches wait (and return empty) until then.
        delay = 0.1
        while True:
            try:
                sub.restore_held(await self.pendingack.held(sub.topic, sub.name))
                break
            except StreamtxError as exc:
                log.warning("pending-ack store did not answer for %s/%s: %s; retrying",
                            sub.topic, sub.name, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        sub.held_ready.set()
        sub.notifier.changed()
