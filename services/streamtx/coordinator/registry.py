"""The coordinators one process owns, and which of them serves a request."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterator

from prometheus_client import REGISTRY, CollectorRegistry

from streamtx.batching.metrics import tc_metrics
from streamtx.contracts.txnid import TxnId
from streamtx.coordinator.coordinator import CoordinatorConfig, TransactionCoordinator
from streamtx.coordinator.log import TransactionLog
from streamtx.coordinator.metrics import CoordinatorMetrics
from streamtx.coordinator.metrics import register as register_metrics
from streamtx.coordinator.participants_client import Participants
from streamtx.coordinator.quota import OpenTxnQuota
from streamtx.coordinator.settings import CoordinatorSettings
from streamtx.errors import NotOwnerError, NotServedError, UnavailableError
from streamtx.ledger import LedgerFactory

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

    Alone (no ``redis_url``) the process owns every configured id for its life.
    With replicas the ids it owns change as :class:`~streamtx.ownership.Ownership`
    hands them in (:meth:`acquire`) and out (:meth:`release`); a transaction of an
    id another replica owns is answered :class:`NotOwnerError` with that replica's
    URL (a redirect). An id nobody configured is 404.
    """

    def __init__(
        self,
        settings: CoordinatorSettings,
        ledgers: LedgerFactory,
        participants: Participants,
        *,
        registry: CollectorRegistry = REGISTRY,
        on_fenced: Callable[[int], None] = lambda _: None,
    ) -> None:
        self.settings = settings
        self._on_fenced = on_fenced
        self._ledgers = ledgers
        self._participants = participants
        self._registry = registry
        register_metrics(registry)
        self.all_ids = list(settings.coordinator_ids)
        self.ids: list[int] = []  # owned now, recovered or not
        self._by_id: dict[int, TransactionCoordinator] = {}
        self._turn = itertools.count()
        self.owners: dict[int, str | None] = {}  # other replicas' ids -> their URL (replicas only)
        self.quota = OpenTxnQuota(settings.max_open_txns_per_client)

    async def start(self) -> None:
        """Own every configured id: open and recover each (concurrently), retrying until it is up."""
        self.ids = list(self.all_ids)
        await asyncio.gather(*(self._start_one(cid) for cid in self.ids))

    async def acquire(self, cid: int) -> None:
        """Take ``cid`` over (its lease is ours): opening its log fences the previous owner."""
        self.ids.append(cid)
        self.owners.pop(cid, None)
        try:
            await self._start_one(cid, attempts=3)
        except BaseException:
            self.ids.remove(cid)
            raise

    async def release(self, cid: int) -> None:
        """Stop serving ``cid``: its pending log writes are flushed and the log closed."""
        if cid in self.ids:
            self.ids.remove(cid)
        # Moving (owner unknown until the next owner-map refresh): 503 retry, not 404.
        self.owners[cid] = None
        tc = self._by_id.pop(cid, None)
        if tc is not None:
            await _quietly_close(tc)

    async def _start_one(self, cid: int, attempts: int | None = None) -> None:
        s = self.settings
        delay = _open_backoff_s
        for attempt in itertools.count(1):
            txn_log: TransactionLog | None = None
            try:
                txn_log = await TransactionLog.open(
                    self._ledgers, cluster=s.cluster, coordinator_id=cid, batching=s.batching,
                    metrics=tc_metrics(s.cluster, cid, registry=self._registry),
                )
                tc = TransactionCoordinator(
                    cid, txn_log, self._participants,
                    CoordinatorMetrics(s.cluster, cid, registry=self._registry), config_of(s),
                    on_fenced=self._on_fenced, quota=self.quota,
                )
                await tc.recover()
                if cid not in self.ids:  # released while it recovered
                    await _quietly_close(tc)
                    return
                self._by_id[cid] = tc
                return
            except Exception as exc:  # the ledger may not be up yet: keep trying, loudly
                log.exception("coordinator %d: recovery failed, retrying in %.1fs: %r", cid, delay, exc)
                if txn_log is not None:
                    await _quietly_close(txn_log)
                if attempts is not None and attempt >= attempts:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, _open_max_backoff_s)

    @property
    def ready(self) -> bool:
        return len(self._by_id) == len(self.ids)

    def __iter__(self) -> Iterator[TransactionCoordinator]:
        return iter([self._by_id[cid] for cid in self.ids if cid in self._by_id])

    def pick(self) -> TransactionCoordinator:
        """The coordinator for a new transaction."""
        ids = list(self.ids)
        for _ in range(len(ids)):
            tc = self._by_id.get(ids[next(self._turn) % len(ids)])
            if tc is not None and tc.status == "Ready":
                return tc
        raise UnavailableError("no coordinator is ready")

    def serving(self, cid: int) -> TransactionCoordinator | None:
        """The coordinator of ``cid`` if this process serves it now (recovered)."""
        return self._by_id.get(cid)

    def by_id(self, cid: int) -> TransactionCoordinator:
        tc = self._by_id.get(cid)
        if tc is None:
            if cid in self.ids:
                # Moving here: 503 not_owner (owner unknown yet), which clients wait out as any
                # handover, where a plain 503 would fail their call while the log replays.
                raise NotOwnerError(f"coordinator {cid} is moving here: its log still replays", owner=None)
            if cid in self.owners or cid in self.all_ids:
                # A configured id this process does not hold is somebody's, or moving, even when
                # our owner map has no word of it yet (a replica just started, an acquire that
                # failed): 503, which callers wait out. A 404 here was read as "no such
                # transaction", and a demo worker rolled back a commit that then went through.
                owner = self.owners.get(cid)
                raise NotOwnerError(f"coordinator {cid} is owned by {owner or 'nobody yet (moving)'}",
                                    owner=owner)
            raise NotServedError(f"coordinator {cid} is not served here (this process owns {self.ids})")
        return tc

    def owner(self, txn: TxnId) -> TransactionCoordinator:
        """The coordinator of a transaction: 404 when not ours, 503 while it recovers."""
        try:
            return self.by_id(txn.coordinator_id)
        except NotServedError:
            raise NotServedError(
                f"transaction {txn} belongs to coordinator {txn.coordinator_id}, not served here"
            ) from None

    async def close(self) -> None:
        await asyncio.gather(*(_quietly_close(tc) for tc in self._by_id.values()))
        self._by_id.clear()


async def _quietly_close(thing: TransactionCoordinator | TransactionLog) -> None:
    try:
        await thing.close()
    except Exception as exc:  # closing must go on for the others
        log.warning("closing %r failed: %r", thing, exc)
