"""Request bodies over the service's limit get 413 before they are read whole, in both lanes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import APIRouter, FastAPI, Request
from pydantic import BaseModel

from streamtx.service import HotRequest, HotRoutes, ServiceSettings, ServiceState, create_app, include_hot

LIMIT = 4096


class Blob(BaseModel):
    """Body of the test routes."""

    data: str


def build(lane: bool) -> tuple[FastAPI, list[int]]:
    """An app with a hot route and an ordinary FastAPI route; the list records bodies handled."""
    handled: list[int] = []
    hot_router = APIRouter(prefix="/v1/hot")
    hot = HotRoutes(hot_router)

    @hot.post("/blob", body=Blob)
    async def hot_blob(request: HotRequest) -> bytes:
        handled.append(len(request.json(Blob).data))
        return b"{}"

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield

    settings = ServiceSettings(fast_lane=lane, max_body_bytes=LIMIT)  # type: ignore[call-arg]
    app = create_app(title="t", settings=settings, lifespan=lifespan, state=ServiceState())
    include_hot(app, hot)

    @app.post("/v1/plain/blob")
    async def plain_blob(body: Blob) -> dict[str, int]:
        handled.append(len(body.data))
        return {}

    @app.post("/v1/plain/raw")
    async def plain_raw(request: Request) -> dict[str, int]:
        handled.append(len(await request.body()))
        return {}

    return app, handled


def client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
                             base_url="http://t")


PATHS = ["/v1/hot/blob", "/v1/plain/blob", "/v1/plain/raw"]


@pytest.mark.parametrize("lane", [True, False])
@pytest.mark.parametrize("path", PATHS)
async def test_a_declared_length_over_the_limit_is_413_unread(lane: bool, path: str) -> None:
    app, handled = build(lane)
    async with client(app) as c:
        small = await c.post(path, json={"data": "x" * 100})
        big = await c.post(path, json={"data": "x" * (LIMIT + 1)})
    assert small.status_code == 200, small.text
    assert big.status_code == 413
    message = f"request body exceeds the limit of {LIMIT} bytes (STREAMTX_MAX_BODY_BYTES)"
    assert big.json() == {"error": "too_large", "message": message}
    assert len(handled) == 1  # only the small body reached a handler


@pytest.mark.parametrize("lane", [True, False])
@pytest.mark.parametrize("path", PATHS)
async def test_a_chunked_body_is_cut_off_at_the_limit(lane: bool, path: str) -> None:
    """No Content-Length: the read stops at the chunk that crosses the limit."""
    app, handled = build(lane)
    sent = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b'{"data": "'
        for _ in range(10_000):  # 10 MB if it were all read
            sent += 1000
            yield b"x" * 1000
        yield b'"}'

    async with client(app) as c:
        r = await c.post(path, content=endless())
    assert r.status_code == 413, r.text
    assert str(LIMIT) in r.json()["message"]
    assert handled == []
    assert sent <= LIMIT + 2000  # the rest of the stream was never pulled
