"""The pending-ack store's FastAPI app and its lifespan."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from streamtx.ledger import open_ledger_factory
from streamtx.peers import CoordinatorLookup, TxnGuard
from streamtx.pendingack import txnchecker
from streamtx.pendingack.broker_client import BrokerClient
from streamtx.pendingack.leases import Slots
from streamtx.pendingack.metrics import PendingAckMetrics
from streamtx.pendingack.registry import PendingAckStores
from streamtx.pendingack.routes import acks, admin, lookup, txn
from streamtx.pendingack.settings import PendingAckSettings
from streamtx.pendingack.writer import writer_factory
from streamtx.service import ServiceState, create_app, include_hot


def build_app(settings: PendingAckSettings) -> FastAPI:
    """The pending-ack app; its ledgers, broker client and stores live in the lifespan."""
    state = ServiceState()
    # Domain metrics go to the default registry, which /metrics serves; one
    # app per process, so they are created once.
    metrics = PendingAckMetrics(settings.cluster)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ledgers = open_ledger_factory(settings.ledger_url)
        state.checks.append(ledgers.health)  # unready while ledgers cannot be opened
        notifier = BrokerClient(settings.broker_url, timeout_s=settings.broker_end_timeout_s,
                                token=settings.outgoing_token())
        stores = PendingAckStores(
            ledgers, settings, notifier=notifier,
            writer_factory=writer_factory(settings), metrics=metrics,
        )
        app.state.stores = stores
        # With Redis, this replica serves the subscription slots it leases (replicas.py).
        slots = Slots(settings, ledgers, stores) if settings.redis_url else None
        app.state.slots = slots
        lookup: CoordinatorLookup | None = None
        checker: asyncio.Task[None] | None = None
        # Every transactional ack is checked with the coordinator first (peers/txnguard.py); a
        # store without one (tests of the store alone) cannot ask, and takes them unchecked.
        guard: TxnGuard | None = None
        if settings.coordinator_url:
            token = settings.outgoing_token()
            guard = TxnGuard(settings.coordinator_url, token=token)
            lookup = CoordinatorLookup(settings.coordinator_url, token=token)
            checker = asyncio.create_task(txnchecker.checker(
                lookup, stores.opened, after_s=settings.stuck_txn_after_s,
                interval_s=settings.stuck_txn_interval_s,
            ).run())
        app.state.txn_guard = guard
        starting: asyncio.Task[None] | None = None
        if slots is not None:
            app.state.long_polls.when_stopping(slots.ownership.stop_taking)
            state.reason = "taking its share of the subscription slots"
            # In the background, so /healthz answers during a long replay.
            starting = asyncio.create_task(slots.join(state), name="pendingack-join")
        else:
            state.ready, state.reason = True, "ready"
        try:
            yield
        finally:
            state.ready, state.reason = False, "stopping"
            if starting is not None:
                starting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await starting
            if slots is not None:
                await slots.stop()
            if checker is not None:
                checker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await checker
            if lookup is not None:
                await lookup.aclose()
            if guard is not None:
                await guard.aclose()
            await stores.close()
            await notifier.aclose()
            await ledgers.close()

    app = create_app(title="streamtx pending-ack store", settings=settings, lifespan=lifespan, state=state)
    include_hot(app, acks.hot)
    include_hot(app, txn.hot)
    app.include_router(admin.router)
    app.include_router(lookup.router)
    return app
