"""The fast lane answers hot routes exactly as FastAPI would: bodies, errors, metrics, auth, docs."""

from __future__ import annotations

import contextlib
import enum
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
from fastapi import APIRouter, Depends, FastAPI
from pydantic import BaseModel, Field

from streamtx.errors import ConflictError
from streamtx.service import HotRequest, HotRoutes, ServiceSettings, ServiceState, create_app, include_hot
from streamtx.service.fastlane import compile_template


class Item(BaseModel):
    """Body of the test's hot POST."""

    size: int = Field(ge=0)


class Listing(BaseModel):
    """Query of the test's hot GET."""

    limit: int = Field(10, ge=1)
    name: str | None = None


def build(lane: bool, **tokens: str) -> tuple[FastAPI, list[str]]:
    """A service app with two hot routes; the list records each call: the shelf, and
    ``"fastapi"`` first when FastAPI's routing (a router dependency) served it."""
    served: list[str] = []

    def through_fastapi() -> None:
        served.append("fastapi")

    router = APIRouter(prefix="/v1/shelves/{shelf}", dependencies=[Depends(through_fastapi)])
    hot = HotRoutes(router)

    @hot.post("/items", body=Item)
    async def put_item(request: HotRequest) -> bytes:
        """Store an item."""
        served.append(request.params["shelf"])
        item = request.json(Item)
        if item.size == 13:
            raise ConflictError("unlucky size")
        if item.size == 666:
            raise RuntimeError("boom")
        return orjson.dumps({"shelf": request.params["shelf"], "size": item.size,
                             "cluster": request.state.settings.cluster})

    @hot.get("/items", query=Listing)
    async def list_items(request: HotRequest) -> bytes:
        q = request.query(Listing)
        return orjson.dumps({"limit": q.limit, "name": q.name})

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield

    settings = ServiceSettings(fast_lane=lane, cluster="c1", **tokens)  # type: ignore[arg-type]
    app = create_app(title="t", settings=settings, lifespan=lifespan, state=ServiceState())
    include_hot(app, hot)
    return app, served


def client(app: FastAPI, token: str | None = None) -> httpx.AsyncClient:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
                             base_url="http://t", headers=headers)


def test_templates_match_one_segment_per_parameter() -> None:
    pattern = compile_template("/v1/topics/{tenant}/{ns}/x.y")
    m = pattern.match("/v1/topics/a/b/x.y")
    assert m is not None and m.groupdict() == {"tenant": "a", "ns": "b"}
    assert pattern.match("/v1/topics/a/b/c/x.y") is None
    assert pattern.match("/v1/topics/a/b/xzy") is None  # the dot is literal
    assert pattern.match("/v1/topics/a/b/x.y/more") is None


CASES = [
    ("POST", "/v1/shelves/s1/items", {"size": 3}, 200, {"shelf": "s1", "size": 3, "cluster": "c1"}),
    ("POST", "/v1/shelves/s1/items", {"size": -1}, 400, None),
    ("POST", "/v1/shelves/s1/items", {"size": 13}, 409, {"error": "conflict", "message": "unlucky size"}),
    ("POST", "/v1/shelves/s1/items", {"size": 666}, 500,
     {"error": "internal", "message": "internal error: RuntimeError"}),
    ("GET", "/v1/shelves/s1/items?limit=5&name=a%20b", None, 200, {"limit": 5, "name": "a b"}),
    ("GET", "/v1/shelves/s1/items", None, 200, {"limit": 10, "name": None}),
    ("GET", "/v1/shelves/s1/items?limit=0", None, 400, None),
    ("DELETE", "/v1/shelves/s1/items", None, 405, None),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "expected"), CASES)
async def test_lane_and_fastapi_answer_alike(method: str, path: str, body: dict[str, int] | None,
                                             status: int, expected: dict[str, object] | None) -> None:
    answers = []
    for lane in (True, False):
        app, _ = build(lane)
        async with client(app) as c:
            r = await c.request(method, path, json=body)
        answers.append((r.status_code, r.headers["content-type"], r.json()))
    assert answers[0] == answers[1]
    code, content_type, got = answers[0]
    assert (code, content_type) == (status, "application/json")
    if expected is not None:
        assert got == expected
    elif status == 400:
        assert got["error"] == "malformed" and ("size" in got["message"] or "limit" in got["message"])


async def test_lane_serves_hot_routes_and_counts_them_in_http_metrics() -> None:
    app, served = build(lane=True)
    async with client(app) as c:
        assert (await c.post("/v1/shelves/x/items", json={"size": 1})).status_code == 200
        assert (await c.post("/v1/shelves/x/items", json={"size": 13})).status_code == 409
        metrics = (await c.get("/metrics")).text
    assert served == ["x", "x"]  # never through FastAPI's routing
    labels = 'handler="/v1/shelves/{shelf}/items",method="POST"'
    assert f'http_requests_total{{{labels},status="2xx"}} 1.0' in metrics
    assert f'http_requests_total{{{labels},status="4xx"}} 1.0' in metrics
    assert f"http_request_duration_seconds_count{{{labels}" in metrics


@pytest.mark.parametrize("lane", [True, False])
async def test_each_path_serves_when_it_should(lane: bool) -> None:
    """The lane on: hot routes never reach FastAPI's routing, other routes do; off: all do."""
    app, served = build(lane)
    async with client(app) as c:
        assert (await c.post("/v1/shelves/a/items", json={"size": 1})).status_code == 200
        assert (await c.get("/v1/shelves/b/items")).status_code == 200
        assert (await c.get("/healthz")).status_code == 200
    assert served == (["a"] if lane else ["fastapi", "a", "fastapi"])


@pytest.mark.parametrize("lane", [True, False])
async def test_tokens_are_checked_on_hot_routes(lane: bool) -> None:
    app, served = build(lane, client_token="c-secret", admin_token="a-secret")
    for token, status in ((None, 401), ("wrong", 401), ("c-secret", 200), ("a-secret", 200)):
        async with client(app, token) as c:
            r = await c.post("/v1/shelves/x/items", json={"size": 1})
        assert r.status_code == status, (token, r.text)
    # Refused calls never reach the handler; admitted ones took the path the setting names.
    assert served == (["x", "x"] if lane else ["fastapi", "x", "fastapi", "x"])


async def test_hot_routes_are_documented() -> None:
    app, _ = build(lane=True)
    async with client(app) as c:
        doc = (await c.get("/openapi.json")).json()
    post = doc["paths"]["/v1/shelves/{shelf}/items"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"]["properties"]["size"]["minimum"] == 0
    assert post["description"] == "Store an item."
    params = {p["name"]: p for p in doc["paths"]["/v1/shelves/{shelf}/items"]["get"]["parameters"]}
    assert params["limit"]["in"] == "query" and params["limit"]["required"] is False
    assert params["shelf"]["in"] == "path" and params["shelf"]["required"] is True
    assert [p["name"] for p in post["parameters"]] == ["shelf"]


async def test_hot_route_bodies_with_nested_models_resolve_in_the_document() -> None:
    """A body model with an enum or a nested model: its refs resolve in the OpenAPI document."""
    class Colour(enum.Enum):
        RED = "red"

    class Inner(BaseModel):
        colour: Colour

    class Outer(BaseModel):
        inner: Inner
        colours: list[Colour] = []

    router = APIRouter(prefix="/v1/paint")
    hot = HotRoutes(router)

    @hot.post("", body=Outer, query=Inner)
    async def paint(request: HotRequest) -> bytes:
        return b"{}"

    app, _ = build(lane=True)
    include_hot(app, hot)
    async with client(app) as c:
        doc = (await c.get("/openapi.json")).json()
    text = orjson.dumps(doc).decode()
    assert "#/$defs/" not in text
    body = doc["paths"]["/v1/paint"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["inner"]["properties"]["colour"]["enum"] == ["red"]
    assert doc["paths"]["/v1/paint"]["post"]["parameters"][0]["schema"]["enum"] == ["red"]
