"""Every subscription's pending-ack store in this process: opened when named, closed when idle.

Only an ack creates a subscription's store (the broker forwards acks of
subscriptions it knows). Everything else - ``held``, prepare, end, the admin
API - opens a store only if its log exists: a name nobody acked on opens
nothing (``held`` and the admin API answer 404; prepare and end have nothing
to do there and answer 200). So a client inventing names cannot make the
service hold ledgers, file descriptors and memory for each.

A store is opened (its log replayed) on first use, so after a restart nothing
is lost, and - as in Pulsar - the batch-log stat lists only subscriptions opened
since. At most ``pending_ack_max_open_stores`` stay open: past that, the least
recently used stores that hold no transaction and serve no request are closed
(reopening replays their log).

With replicas (``pendingack/leases.py``) a process serves only the
subscriptions of the slots it leases: ``gate`` refuses the others (307 to their
owner) before anything is opened, and ``before_open`` lists a subscription in
its slot's index before its log is first opened.

An end of a transaction on a subscription whose store is not open is
remembered here (bounded, like a store's own ended set), so an ack of it
arriving later is refused (409) as an open store would refuse it.

One store per subscription of a *topic* (:class:`~streamtx.names.TopicSubscription`): a
request naming a partition (``x-partition-2``) reaches the topic's store, so acks sent under
either name of a partition meet one conflict check (issue 32 defect 1; the state keeps
partitions apart by their ledger ids). Before that, a log was kept per name acked on: the
first request naming a partition takes the open transactions of that partition's old log
(``pendingack/<x-partition-N>/<sub>``) into the topic's store and deletes the old log
(:meth:`PendingAckStore.absorb`).

Deleting a subscription (:meth:`PendingAckStores.delete`) deletes its log, refused (409)
while a transaction holds acks in it, so a subscription created again with the same name
starts with no remembered commits (issue 32 defect 10).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

from streamtx.contracts.txnid import TxnId
from streamtx.errors import ConflictError, FencedError, NotFoundError, UnavailableError
from streamtx.ledger import LedgerFactory
from streamtx.names import TopicSubscription, check_name, check_topic, partition_name
from streamtx.pendingack.broker_client import BrokerNotifier
from streamtx.pendingack.metrics import PendingAckMetrics
from streamtx.pendingack.settings import PendingAckSettings
from streamtx.pendingack.store import PendingAckStore, WriterFactory, delete_log, log_name

log = logging.getLogger(__name__)


Key = TopicSubscription
Hook = Callable[[Key], Awaitable[None]]


def check_names(topic: str, subscription: str) -> None:
    """400 unless ``topic`` is ``persistent://t/n/x`` and both follow Pulsar's naming rule
    (streamtx.names: what the broker and the OpenAPI documents allow)."""
    check_topic(topic)
    check_name("subscription", subscription)


class PendingAckStores:
    """The stores of one process, keyed by (topic, subscription); see the module docstring."""

    def __init__(
        self, ledgers: LedgerFactory, settings: PendingAckSettings, *, notifier: BrokerNotifier,
        writer_factory: WriterFactory, metrics: PendingAckMetrics | None = None,
    ) -> None:
        self._ledgers = ledgers
        self._settings = settings
        self._notifier = notifier
        self._writer_factory = writer_factory
        self._metrics = metrics
        if metrics is not None:
            metrics.track_open_txns(lambda: sum(len(s.state.txns) for s in self._stores.values()))
            metrics.track_open_stores(lambda: len(self._stores))
        self._stores: OrderedDict[Key, PendingAckStore] = OrderedDict()  # least recently used first
        self._users: dict[Key, int] = {}  # requests using each store now: never closed under them
        self._opening: dict[Key, asyncio.Task[PendingAckStore]] = {}
        self._closing: dict[Key, asyncio.Task[Any]] = {}  # closes, and deletes (bool)
        # Old logs kept under a partition's name: (partition name, subscription) looked at, and
        # the absorptions running (one per old log however many requests name it).
        self._absorbed: set[tuple[str, str]] = set()
        self._absorbing: dict[tuple[str, str], asyncio.Task[None]] = {}
        # Ends of transactions on subscriptions with no store: commit (True) or abort.
        self._ended: OrderedDict[tuple[str, str, TxnId], bool] = OrderedDict()  # (topic, sub, txn)
        self.batch_enabled = settings.batching.enabled
        self.gate: Hook | None = None  # raises when another replica owns the subscription
        self.before_open: Hook | None = None
        self.on_fenced: Callable[[Key], None] | None = None

    @contextlib.asynccontextmanager
    async def use(self, topic: str, subscription: str, *, create: bool = False
                  ) -> AsyncIterator[PendingAckStore | None]:
        """The subscription's store for the block, opened (and replayed) on first use.

        None when the subscription has no log and ``create`` is false. The store
        is not closed while the block runs.
        """
        check_names(topic, subscription)
        key = TopicSubscription.of(topic, subscription)
        if self.gate is not None:
            await self.gate(key)
        self._users[key] = self._users.get(key, 0) + 1
        try:
            store = await self._get(key, create)
            if topic != key.topic:  # named by a partition: its log from before may hold acks
                await self._absorb_old((topic, subscription), key)
                store = store or await self._get(key, create)
            yield store
        except UnavailableError as exc:
            if isinstance(exc.__cause__, FencedError) and self.on_fenced is not None:
                self.on_fenced(key)  # another replica opened the log: it owns it now
            raise
        finally:
            left = self._users[key] - 1
            if left:
                self._users[key] = left
            else:
                del self._users[key]
            self._evict()

    async def require(self, topic: str, subscription: str) -> PendingAckStore:
        """The store of a subscription that has one, else 404 (queries: held, stats)."""
        async with self.use(topic, subscription) as store:
            if store is None:
                raise NotFoundError(f"no pending acks were ever logged for {topic} {subscription}")
            return store

    async def _absorb_old(self, old: tuple[str, str], key: Key) -> None:
        """Take the open transactions of the log kept under ``old`` (a partition's name, before
        names were canonical) into ``key``'s store, then delete that log; once per process."""
        if old in self._absorbed:
            return
        task = self._absorbing.get(old)
        if task is None:
            task = self._absorbing[old] = asyncio.ensure_future(self._absorb(old, key))
        try:
            await asyncio.shield(task)
        finally:
            if task.done() and self._absorbing.get(old) is task:
                del self._absorbing[old]

    async def _absorb(self, old: tuple[str, str], key: Key) -> None:
        if await self._ledgers.exists(log_name(*old)):
            store = await self._get(key, True)
            assert store is not None
            s = self._settings
            legacy = await PendingAckStore.open(  # as writer: fences an older version's store
                self._ledgers, *old, writer_factory=self._writer_factory, notifier=self._notifier,
                batch_enabled=False, max_committed_ids=0, max_ended_txns=s.pending_ack_max_ended_txns,
                trim_every_ends=s.trim_every_ends,
            )
            try:
                taken = await store.absorb(legacy.state)
            finally:
                await legacy.close()
            await delete_log(self._ledgers, *old)
            log.info("pending-ack log of %s %s (a partition's name) taken into %s: %d open "
                     "transactions", *old, key.topic, taken)
        self._absorbed.add(old)

    async def delete(self, topic: str, subscription: str, partitions: int = 0) -> bool:
        """Delete the subscription's pending-ack state (its log, and the old logs kept under its
        first ``partitions`` partitions' names): the subscription is deleted. 409 while a
        transaction holds acks in it (ending them is the coordinator's: the caller ends them
        first). False when there was nothing to delete."""
        key = TopicSubscription.of(topic, subscription)
        async with self.use(key.topic, subscription) as store:
            if store is not None:
                if store.state.txns:
                    txns = ", ".join(sorted(str(t) for t in store.state.txns))
                    raise ConflictError(f"subscription {subscription} of {key.topic} has acks pending in "
                                        f"open transactions {txns}: end them first")
                del self._stores[key]
            # Under the closing mark a request naming the subscription meanwhile waits, then
            # opens a new, empty log.
            dropping = asyncio.ensure_future(self._drop(key, store, partitions))
            self._closing[key] = dropping
        return await asyncio.shield(dropping)

    async def _drop(self, key: Key, store: PendingAckStore | None, partitions: int) -> bool:
        """Close and delete; a request meanwhile waits (``_closing``), then opens a new log."""
        try:
            if store is not None:
                await store.close()
            deleted = await delete_log(self._ledgers, *key)
            for i in range(partitions):
                old = (partition_name(key.topic, i), key.subscription)
                deleted = await delete_log(self._ledgers, *old) or deleted
                self._absorbed.discard(old)
            for ended in [e for e in self._ended if e[:2] == key]:
                del self._ended[ended]
            return deleted
        finally:
            if self._closing.get(key) is asyncio.current_task():
                del self._closing[key]

    async def _get(self, key: Key, create: bool) -> PendingAckStore | None:
        store = self._stores.get(key)
        if store is not None:
            self._stores.move_to_end(key)
            return store
        if not create and key not in self._opening:
            exists = await self._ledgers.exists(log_name(*key))
            store = self._stores.get(key)  # an ack may have opened it while we looked
            if store is not None:
                return store
            if not exists and key not in self._opening:
                return None
        # One opening per subscription however many requests wait for it; a
        # failed opening is forgotten so the next request tries again.
        task = self._opening.get(key)
        if task is None:
            task = self._opening[key] = asyncio.ensure_future(self._open(key))
        try:
            return await asyncio.shield(task)
        finally:
            if task.done() and self._opening.get(key) is task:
                del self._opening[key]

    async def _open(self, key: Key) -> PendingAckStore:
        closing = self._closing.get(key)
        if closing is not None:  # its log is still written by the store being closed
            await asyncio.shield(closing)
        if self.before_open is not None:
            await self.before_open(key)
        s = self._settings
        store = await PendingAckStore.open(
            self._ledgers, *key,
            writer_factory=self._writer_factory,
            notifier=self._notifier, batch_enabled=self.batch_enabled,
            max_committed_ids=s.pending_ack_max_committed_ids,
            max_ended_txns=s.pending_ack_max_ended_txns, trim_every_ends=s.trim_every_ends,
            metrics=self._metrics,
        )
        for (topic, subscription, txn), commit in list(self._ended.items()):
            if (topic, subscription) == key:
                del self._ended[(topic, subscription, txn)]
                await store.end(txn, commit)  # holds nothing here: remembered in its state
        self._stores[key] = store
        return store

    def remember_end(self, topic: str, subscription: str, txn: TxnId, commit: bool) -> None:
        """An end on a subscription with no store: refuse a later ack of ``txn`` there.

        409 when the same transaction was already ended the other way here.
        """
        key = (*TopicSubscription.of(topic, subscription), txn)
        done = self._ended.get(key)
        if done is not None and done is not commit:
            raise ConflictError(f"transaction {txn} already {'COMMITTED' if done else 'ABORTED'}")
        self._ended[key] = commit
        self._ended.move_to_end(key)
        while len(self._ended) > self._settings.pending_ack_max_ended_txns:
            self._ended.popitem(last=False)

    def _evict(self) -> None:
        """Close the least recently used stores beyond the cap that hold nothing and serve nobody."""
        excess = len(self._stores) - self._settings.pending_ack_max_open_stores
        if excess <= 0:
            return
        for key, store in list(self._stores.items()):
            if excess <= 0:
                break
            if self._users.get(key) or store.state.txns:
                continue
            del self._stores[key]
            excess -= 1
            self._closing[key] = asyncio.ensure_future(self._close(key, store))

    async def _close(self, key: Key, store: PendingAckStore) -> None:
        try:
            await store.close()
        except Exception:  # its log is intact; the next opening replays it
            log.exception("closing the idle pending-ack store of %s %s failed", *key)
        finally:
            if self._closing.get(key) is asyncio.current_task():
                del self._closing[key]

    async def preload(self, keys: Iterable[tuple[str, str]], concurrency: int = 8) -> None:
        """Open (fence and replay) the logs of ``keys`` now, past the gate: a replica taking a
        slot over. Idle ones beyond the cap of open stores are closed again (fenced all the same)."""
        limit = asyncio.Semaphore(concurrency)

        async def one(named: tuple[str, str]) -> None:
            key = TopicSubscription.of(*named)  # an index lists partitions' names from before
            async with limit:
                self._users[key] = self._users.get(key, 0) + 1
                try:
                    await self._get(key, create=True)
                    if named[0] != key.topic:
                        await self._absorb_old(named, key)
                finally:
                    left = self._users.pop(key) - 1
                    if left:
                        self._users[key] = left
                    self._evict()

        await asyncio.gather(*(one(key) for key in keys))

    async def close_where(self, gone: Callable[[Key], bool]) -> None:
        """Close the stores ``gone`` names (their writes flushed): a slot handed over or lost."""
        for key, task in list(self._opening.items()):
            if gone(key):
                task.cancel()
        for key in [key for key in self._stores if gone(key)]:
            self._closing[key] = asyncio.ensure_future(self._close(key, self._stores.pop(key)))
        await asyncio.gather(*(task for key, task in list(self._closing.items()) if gone(key)),
                             return_exceptions=True)
        for ended in [e for e in self._ended if gone(TopicSubscription(*e[:2]))]:
            del self._ended[ended]

    def opened(self) -> list[PendingAckStore]:
        return list(self._stores.values())

    def set_batch_enabled(self, enabled: bool) -> None:
        """Switch batching of every open log, and of the logs opened later."""
        self.batch_enabled = enabled
        for store in self._stores.values():
            store.set_batch_enabled(enabled)

    async def close(self) -> None:
        for task in self._opening.values():
            task.cancel()
        for closing in list(self._closing.values()):
            with contextlib.suppress(Exception):
                await closing
        for store in self._stores.values():
            await store.close()
        self._stores.clear()
