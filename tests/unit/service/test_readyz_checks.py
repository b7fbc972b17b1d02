"""``/readyz`` asks the service's checks each time: unready while one fails, ready once it passes
(issue 21 item 8: a broker out of file descriptors failed every open and still said 200)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI

from streamtx.service.app import ServiceState, create_app
from streamtx.service.settings import ServiceSettings


async def test_readyz_follows_the_checks() -> None:
    state = ServiceState()
    failing: list[str] = ["ledgers cannot be opened: Too many open files"]

    async def check() -> str | None:
        return failing[0] if failing else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.ready, state.reason = True, "ready"
        state.checks.append(check)
        yield

    settings = ServiceSettings()  # type: ignore[call-arg]
    app = create_app(title="t", settings=settings, lifespan=lifespan, state=state)
    transport = httpx.ASGITransport(app=app)
    async with lifespan(app), httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        r = await c.get("/readyz")
        assert r.status_code == 503 and "Too many open files" in r.json()["message"]
        failing.clear()
        assert (await c.get("/readyz")).status_code == 200
