"""Every subscription's pending-ack store in this process, opened on first use.

A subscription's store is opened (its log replayed) the first time anything
names it: an ack, ``held`` (the broker asks on its restart), an end from the
coordinator, or the admin API. So after a restart nothing is lost, and - as
in Pulsar - the batch-log stat lists only subscriptions opened since.
"""

from __future__ import annotations

import asyncio
import re

from streamtx.errors import MalformedError
from streamtx.ledger import LedgerStore
from streamtx.pendingack.broker import BrokerNotifier
from streamtx.pendingack.metrics import PendingAckMetrics
from streamtx.pendingack.settings import PendingAckSettings
from streamtx.pendingack.store import PendingAckStore, WriterFactory

_topic_re = re.compile(r"^persistent://[^/\s]+/[^/\s]+/[^/\s]+$")
_subscription_re = re.compile(r"^[^/\s]{1,256}$")


def check_names(topic: str, subscription: str) -> None:
    """400 unless ``topic`` is ``persistent://t/n/x`` and ``subscription`` has no ``/``."""
    if not _topic_re.match(topic):
        raise MalformedError(f"topic {topic[:200]!r} is not persistent://tenant/namespace/topic")
    if not _subscription_re.match(subscription):
        raise MalformedError(f"subscription {subscription[:200]!r} is empty or has '/' or spaces")


class PendingAckStores:
    """The stores of one process, keyed by (topic, subscription)."""

    def __init__(
        self, ledgers: LedgerStore, settings: PendingAckSettings, *, notifier: BrokerNotifier,
        writer_factory: WriterFactory, metrics: PendingAckMetrics | None = None,
    ) -> None:
        self._ledgers = ledgers
        self._settings = settings
        self._notifier = notifier
        self._writer_factory = writer_factory
        self._metrics = metrics
        if metrics is not None:
            metrics.track_open_txns(lambda: sum(len(s.state.txns) for s in self._stores.values()))
        self._stores: dict[tuple[str, str], PendingAckStore] = {}
        self._opening: dict[tuple[str, str], asyncio.Task[PendingAckStore]] = {}
        self.batch_enabled = settings.batching.enabled

    async def get(self, topic: str, subscription: str) -> PendingAckStore:
        """The subscription's store, opening and replaying it on first use."""
        key = (topic, subscription)
        store = self._stores.get(key)
        if store is not None:
            return store
        check_names(topic, subscription)
        # One opening per subscription however many requests wait for it; a
        # failed opening is forgotten so the next request tries again.
        task = self._opening.get(key)
        if task is None:
            task = self._opening[key] = asyncio.ensure_future(self._open(topic, subscription))
        try:
            return await asyncio.shield(task)
        finally:
            if task.done():
                self._opening.pop(key, None)

    async def _open(self, topic: str, subscription: str) -> PendingAckStore:
        s = self._settings
        store = await PendingAckStore.open(
            self._ledgers, topic, subscription,
            writer_factory=self._writer_factory,
            notifier=self._notifier, batch_enabled=self.batch_enabled,
            max_committed_ids=s.pending_ack_max_committed_ids,
            max_ended_txns=s.pending_ack_max_ended_txns, trim_every_ends=s.trim_every_ends,
            metrics=self._metrics,
        )
        self._stores[(topic, subscription)] = store
        return store

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
        for store in self._stores.values():
            await store.close()
        self._stores.clear()
