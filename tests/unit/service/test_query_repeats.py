"""A query parameter that takes one value, named twice, is a 400 ``malformed`` on every route,
FastAPI's and the fast lane's (the OpenAPI fuzz test's ST201: ``?partition=2.4e-292&...&partition=0.0``
was answered 200 for one of the values), while a list parameter still takes several."""

from __future__ import annotations

from typing import Annotated

import orjson
import pytest
from fastapi import APIRouter, Query

from tests.unit.service.test_fastlane import build, client


@pytest.mark.parametrize("lane", [True, False])
async def test_a_repeated_one_value_query_parameter_is_refused(lane: bool) -> None:
    app, _ = build(lane)
    router = APIRouter()

    @router.get("/v1/plain")
    async def plain(partition: Annotated[int | None, Query(ge=0)] = None,
                    ids: Annotated[list[int] | None, Query()] = None) -> dict[str, object]:
        return {"partition": partition, "ids": ids}

    app.include_router(router)
    async with client(app) as c:
        for path in ("/v1/shelves/a/items?limit=2&limit=3", "/v1/plain?partition=1&partition=0"):
            r = await c.get(path)
            assert r.status_code == 400, (path, r.text)
            body = orjson.loads(r.content)
            assert body["error"] == "malformed" and "more than once" in body["message"], body
        # One of each, a list parameter repeated, a parameter nobody takes repeated: as before.
        r = await c.get("/v1/shelves/a/items?limit=2&name=x&other=1&other=2")
        assert r.status_code == 200 and r.json() == {"limit": 2, "name": "x"}, r.text
        r = await c.get("/v1/plain?partition=1&ids=1&ids=2&other=1&other=2")
        assert r.status_code == 200 and r.json() == {"partition": 1, "ids": [1, 2]}, r.text
