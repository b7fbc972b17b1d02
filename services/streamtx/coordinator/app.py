"""The coordinator's FastAPI app: resources made in the lifespan, routes, readiness."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI

from streamtx.coordinator import replicas
from streamtx.coordinator.participants_client import Participants
from streamtx.coordinator.registry import Coordinators
from streamtx.coordinator.routes import admin, lookup, transactions
from streamtx.coordinator.settings import CoordinatorSettings
from streamtx.ledger import open_ledger_factory
from streamtx.ownership import Ownership
from streamtx.service import ServiceState, create_app, include_hot

log = logging.getLogger(__name__)


def create_coordinator_app(settings: CoordinatorSettings) -> FastAPI:
    """The TC app; ready (``/readyz``) once every coordinator has replayed its log."""
    state = ServiceState()
    # httpx logs every participant call at INFO: thousands a second under load.
    logging.getLogger("httpx").setLevel(logging.WARNING)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = open_ledger_factory(settings.ledger_url)
        participants = Participants(
            settings.broker_url, settings.pendingack_url,
            backoff_s=settings.fanout_backoff_ms / 1000,
            max_backoff_s=settings.fanout_max_backoff_ms / 1000,
            timeout_s=settings.fanout_request_timeout_ms / 1000,
            prepare_attempts=settings.prepare_attempts,
            token=settings.outgoing_token(),
        )
        def fenced(cid: int) -> None:
            # Another process writes this coordinator's log now: stop taking traffic.
            state.ready, state.reason = False, f"coordinator {cid} was fenced by another process"
            log.error(state.reason)

        ownership: Ownership | None = None
        if settings.redis_url:
            coordinators = Coordinators(settings, store, participants,
                                        on_fenced=lambda cid: replicas.lost(app.state.ownership, cid))
            ownership = replicas.ownership(settings, coordinators)
        else:
            coordinators = Coordinators(settings, store, participants, on_fenced=fenced)
        app.state.coordinators = coordinators
        app.state.ownership = ownership
        state.reason = "replaying the transaction logs"

        async def start() -> None:
            if ownership is not None:
                await replicas.join(ownership, state)
                return
            await coordinators.start()
            state.ready = True
            log.info("coordinators %s ready", coordinators.ids)

        # Recovery runs in the background so /healthz answers during a long replay.
        starting = asyncio.create_task(start(), name="tc-start")
        try:
            yield
        finally:
            state.ready, state.reason = False, "shutting down"
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
            if ownership is not None:
                await ownership.stop()  # hand every id over at once, not after the lease runs out
                await ownership.leases.aclose()
            await coordinators.close()
            await participants.aclose()
            await store.close()

    app = create_app(
        title="streamtx transaction coordinator", settings=settings, lifespan=lifespan, state=state
    )
    include_hot(app, transactions.hot)
    app.include_router(admin.router)
    app.include_router(lookup.router)
    return app
