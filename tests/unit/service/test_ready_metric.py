"""``streamtx_service_ready`` follows readiness (the "coordinator not ready" alert reads it)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
from fastapi import FastAPI

from streamtx.service import ServiceSettings, ServiceState, create_app


async def test_ready_gauge_follows_readyz() -> None:
    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield

    state = ServiceState()
    app = create_app(title="t", settings=ServiceSettings(cluster="c9"), lifespan=lifespan, state=state)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        assert (await http.get("/readyz")).status_code == 503
        assert 'streamtx_service_ready{cluster="c9"} 0.0' in (await http.get("/metrics")).text
        state.ready = True
        assert (await http.get("/readyz")).status_code == 200
        assert 'streamtx_service_ready{cluster="c9"} 1.0' in (await http.get("/metrics")).text
