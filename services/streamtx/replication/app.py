"""The replication controller's FastAPI app and its lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from streamtx.ledger import open_ledger_factory
from streamtx.replication.controller import Controller
from streamtx.replication.routes import admin
from streamtx.replication.settings import ReplicationSettings
from streamtx.service import ServiceState, create_app


def build_app(settings: ReplicationSettings | None = None) -> FastAPI:
    settings = settings or ReplicationSettings.from_env()
    state = ServiceState()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ledgers = open_ledger_factory(settings.ledger_url)
        state.checks.append(ledgers.health)  # unready while ledgers cannot be opened
        controller = await Controller.open(settings, ledgers)
        controller.start()
        app.state.controller = controller
        state.ready, state.reason = True, "ready"
        try:
            yield
        finally:
            state.ready, state.reason = False, "stopping"
            await controller.close()
            await ledgers.close()

    app = create_app(title="streamtx replication controller", settings=settings, lifespan=lifespan,
                     state=state, redirects=False)  # one controller per cluster: nothing moves
    app.include_router(admin.router)
    return app
