"""The partition broker's FastAPI app and lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from streamtx.broker.pendingack_client import PendingAckClient
from streamtx.broker.registry import Broker
from streamtx.broker.replicas import leases as replicas
from streamtx.broker.replicas import spread
from streamtx.broker.replication import routes as replication
from streamtx.broker.replication import subscription_routes as replicated_subs
from streamtx.broker.routes import (
    admin,
    lookup,
    messages,
    subscriptions,
    topics,
    txn,
)
from streamtx.broker.settings import BrokerSettings
from streamtx.ledger import open_ledger_factory
from streamtx.service import ServiceState, create_app, include_hot
from streamtx.transport import ONCE, HttpClient


def build_app(settings: BrokerSettings) -> FastAPI:
    """The broker app; its ledgers, topics and pending-ack client live in the lifespan."""
    state = ServiceState()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ledgers = open_ledger_factory(settings.ledger_url)
        state.checks.append(ledgers.health)  # unready while ledgers cannot be opened
        pendingack = PendingAckClient(settings.pendingack_url, settings.pendingack_timeout_s,
                                      settings.outgoing_token())
        broker = Broker(ledgers, settings, pendingack, replicas=bool(settings.redis_url))
        await broker.start()
        app.state.broker = broker
        app.state.forwarder = spread.Forwarder(settings.outgoing_token(), settings.pendingack_timeout_s)
        # Replication admin calls go on to the controller with the caller's own credential.
        app.state.replication_client = HttpClient(
            settings.replication_url or None, peer="replication controller",
            setting="STREAMTX_REPLICATION_URL", retry=ONCE, timeout_s=30)
        ownership = replicas.ownership(settings, broker) if settings.redis_url else None
        app.state.ownership = ownership
        if ownership is not None:
            app.state.long_polls.when_stopping(ownership.stop_taking)
            state.reason = "taking this replica's share of the topics"
            await replicas.join(ownership, state)
        else:
            state.ready, state.reason = True, "ready"
        try:
            yield
        finally:
            state.ready, state.reason = False, "stopping"
            if ownership is not None:
                await ownership.stop()  # hand every partition over at once, not after the lease runs out
                await ownership.leases.aclose()
            await broker.close()
            await app.state.forwarder.aclose()
            await ledgers.close()
            await app.state.replication_client.aclose()

    app = create_app(title="streamtx partition broker", settings=settings, lifespan=lifespan, state=state)
    app.include_router(topics.router)
    for hot in (messages.hot, subscriptions.hot, txn.hot):
        include_hot(app, hot)
    app.include_router(admin.router)
    app.include_router(lookup.router)
    app.include_router(replication.router)
    app.include_router(replication.admin)
    app.include_router(replicated_subs.router)
    app.include_router(replicated_subs.admin)
    return app
