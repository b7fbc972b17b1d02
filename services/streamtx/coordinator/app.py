"""The coordinator's FastAPI app: resources made in the lifespan, routes, readiness."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI
from starlette.middleware import Middleware

from streamtx.coordinator import forwarding
from streamtx.coordinator import leases as replicas
from streamtx.coordinator.forwarding import SiblingForwarder
from streamtx.coordinator.participants_client import Participants
from streamtx.coordinator.registry import Coordinators
from streamtx.coordinator.routes import admin, lookup, transactions
from streamtx.coordinator.settings import CoordinatorSettings
from streamtx.ledger import open_ledger_factory
from streamtx.ownership import Ownership
from streamtx.ownership.mailbox import Mailbox
from streamtx.service import ServiceState, create_app, include_hot
from streamtx.service.auth import authorizer
from streamtx.service.bodylimit import BodyLimit

log = logging.getLogger(__name__)


def build_app(settings: CoordinatorSettings) -> FastAPI:
    """The TC app; ready (``/readyz``) once every coordinator has replayed its log."""
    state = ServiceState()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ledgers = open_ledger_factory(settings.ledger_url)
        state.checks.append(ledgers.health)  # unready while ledgers cannot be opened
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
        mailbox: Mailbox | None = None
        if settings.redis_url:
            coordinators = Coordinators(settings, ledgers, participants,
                                        on_fenced=lambda cid: replicas.lost(app.state.ownership, cid))
            if settings.workers > 1:
                mailbox = Mailbox.from_url(
                    settings.redis_url, cluster=settings.cluster, service=replicas.service_name,
                    consumer=replicas.member_name(settings), timeout_s=settings.mailbox_timeout_ms / 1000,
                    max_batch=settings.batching.max_records, max_queued=settings.mailbox_max_queued)
            ownership = replicas.ownership(settings, coordinators, mailbox=mailbox,
                                           serve=functools.partial(forwarding.serve, app))
        else:
            coordinators = Coordinators(settings, ledgers, participants, on_fenced=fenced)
        app.state.coordinators = coordinators
        app.state.ownership = ownership
        app.state.mailbox = mailbox
        if ownership is not None:
            app.state.long_polls.when_stopping(ownership.stop_taking)
        state.reason = "replaying the transaction logs"

        async def start() -> None:
            if ownership is not None:
                await replicas.join(ownership, state, coordinators if mailbox is not None else None)
                return
            await coordinators.start()
            state.ready = True
            log.info("coordinators %s ready", coordinators.ids)

        # Recovery runs in the background so /healthz answers during a long replay.
        starting = asyncio.create_task(start(), name="tc-start")
        try:
            if mailbox is not None:
                # A worker of a shared port listens only once ready (uvicorn listens after
                # the lifespan starts): the kernel hands connections to ready workers only.
                await starting
            yield
        finally:
            state.ready, state.reason = False, "shutting down"
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await starting
            if ownership is not None:
                await ownership.stop()  # hand every id over at once, not after the lease runs out
                await ownership.leases.aclose()
            if mailbox is not None:
                await mailbox.aclose()
            await coordinators.close()
            await participants.aclose()
            await ledgers.close()

    app = create_app(
        title="streamtx transaction coordinator", settings=settings, lifespan=lifespan, state=state
    )
    include_hot(app, transactions.hot)
    app.include_router(admin.router)
    app.include_router(lookup.router)
    if settings.workers > 1:
        # Just inside the body limit (outermost, index 0): a forwarded body is bounded too,
        # and the owner checks the caller's credentials when it plays the request.
        assert app.user_middleware[0].cls is BodyLimit  # type: ignore[comparison-overlap]
        app.user_middleware.insert(1, Middleware(SiblingForwarder, state=app.state,
                                                 own_url=replicas.advertised_url(settings),
                                                 authorize=authorizer(settings)))
    return app
