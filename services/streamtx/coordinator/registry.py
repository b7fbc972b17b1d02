"""The coordinators one process owns, and which of them serves a request."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterator

from prometheus_client import REGISTRY, CollectorRegistry

from streamtx.batching.metrics import tc_metrics
from streamtx.coordinator.coordinator import CoordinatorConfig, TransactionCoordinator
from streamtx.coordinator.log import TransactionLog
from streamtx.coordinator.metrics import CoordinatorMetrics
from streamtx.coordinator.participants_client import Participants
from streamtx.coordinator.quota import OpenTxnQuota
from streamtx.coordinator.settings import CoordinatorSettings
from streamtx.coordinator.txnid import TxnId
from streamtx.errors import NotFoundError, UnavailableError
from streamtx.ledger import LedgerFactory
from streamtx.service.txnlookup import NOT_SERVED

log = logging.getLogger(__name__)

_open_backoff_s = 0.5
_open_max_backoff_s = 10.0


def config_of(settings: CoordinatorSettings) -> CoordinatorConfig:
    return CoordinatorConfig(
        timeout_check_interval_ms=settings.timeout_check_interval_ms,
        housekeeping_interval_ms=settings.housekeeping_interval_ms,
        finished_retention_ms=settings.finished_retention_ms,
        id_block_size=settings.id_block_size,
        max_concurrent_timeouts=settings.max_concurrent_timeouts,
        retry_backoff_ms=settings.fanout_backoff_ms,
        retry_max_backoff_ms=settings.fanout_max_backoff_ms,
        max_partitions_per_txn=settings.max_partitions_per_txn,
        max_subscriptions_per_txn=settings.max_subscriptions_per_txn,
    )


class Coordinators:
    """Coordinator ids of this process; new transactions go round-robin over the ready ones.

    A transaction id of a coordinator this process does not own is answered
    404: ids are never moved between processes, so no other answer can help.
    """

    def __init__(
        self,
        settings: CoordinatorSettings,
        store: LedgerFactory,
        participants: Participants,
        *,
        registry: CollectorRegistry = REGISTRY,
        on_fenced: Callable[[int], None] = lambda _: None,
    ) -> None:
        self.settings = settings
        self._on_fenced = on_fenced
        self._store = store
        self._participants = participants
        self._registry = registry
        self.ids = list(settings.coordinator_ids)
        self._by_id: dict[int, TransactionCoordinator] = {}
        self._round_robin = itertools.cycle(self.ids)
        self.quota = OpenTxnQuota(settings.max_open_txns_per_client)

    async def start(self) -> None:
        """Open and recover every coordinator (concurrently), retrying until each is up."""
        await asyncio.gather(*(self._start_one(cid) for cid in self.ids))

    async def _start_one(self, cid: int) -> None:
        s = self.settings
        delay = _open_backoff_s
        while True:
            txn_log: TransactionLog | None = None
            try:
                txn_log = await TransactionLog.open(
                    self._store, cluster=s.cluster, coordinator_id=cid, batching=s.batching,
                    metrics=tc_metrics(s.cluster, cid, registry=self._registry),
                )
                tc = TransactionCoordinator(
                    cid, txn_log, self._participants,
                    CoordinatorMetrics(s.cluster, cid, registry=self._registry), config_of(s),
                    on_fenced=self._on_fenced, quota=self.quota,
                )
                await tc.recover()
                self._by_id[cid] = tc
                return
            except Exception as exc:  # the ledger may not be up yet: keep trying, loudly
                log.exception("coordinator %d: recovery failed, retrying in %.1fs: %r", cid, delay, exc)
                if txn_log is not None:
                    await _quietly_close(txn_log)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _open_max_backoff_s)

    @property
    def ready(self) -> bool:
        return len(self._by_id) == len(self.ids)

    def __iter__(self) -> Iterator[TransactionCoordinator]:
        return iter([self._by_id[cid] for cid in self.ids if cid in self._by_id])

    def pick(self) -> TransactionCoordinator:
        """The coordinator for a new transaction."""
        for _ in range(len(self.ids)):
            tc = self._by_id.get(next(self._round_robin))
            if tc is not None and tc.status == "Ready":
                return tc
        raise UnavailableError("no coordinator is ready")

    def by_id(self, cid: int) -> TransactionCoordinator:
        tc = self._by_id.get(cid)
        if tc is None:
            if cid in self.ids:
                raise UnavailableError(f"coordinator {cid} is still recovering")
            raise NotFoundError(f"coordinator {cid} is {NOT_SERVED} (this process owns {self.ids})")
        return tc

    def owner(self, txn: TxnId) -> TransactionCoordinator:
        """The coordinator of a transaction: 404 when not ours, 503 while it recovers."""
        try:
            return self.by_id(txn.coordinator_id)
        except NotFoundError:
            raise NotFoundError(
                f"transaction {txn} belongs to coordinator {txn.coordinator_id}, {NOT_SERVED}"
            ) from None

    async def close(self) -> None:
        await asyncio.gather(*(_quietly_close(tc) for tc in self._by_id.values()))
        self._by_id.clear()


async def _quietly_close(thing: TransactionCoordinator | TransactionLog) -> None:
    try:
        await thing.close()
    except Exception as exc:  # closing must go on for the others
        log.warning("closing %r failed: %r", thing, exc)
