"""The replication admin refuses what it must never store (issue 21 item 12): odd cluster URLs, bad names."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from streamtx.replication.policies import Policies
from streamtx.replication.routes.admin import router
from streamtx.service.errors import install_error_handlers


class Store:
    def __init__(self) -> None:
        self.policies = Policies("a")
        self.records: list[dict[str, Any]] = []

    async def record(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        self.policies.apply(record)


class Peers:
    async def check(self, name: str, url: str) -> str:
        return url


class Controller:
    def __init__(self) -> None:
        self.policy_store = Store()
        self.policies = self.policy_store.policies
        self.peers = Peers()


Client = tuple[httpx.AsyncClient, Controller]


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(router)
    app.state.controller = Controller()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        yield http, app.state.controller


@pytest.mark.parametrize("url", [
    "http://peer:99999", "http://peer:0", "http://peer:-1", "http://peer:8x",
    "http://user:pass@peer:8080", "https://token@peer", "http://peer:80?x=1", "http://:80",
])
async def test_a_cluster_url_out_of_range_or_with_credentials_is_a_400(client: Client,
                                                                 url: str) -> None:
    c, controller = client
    r = await c.put("/admin/v2/clusters/b", json={"service_url": url})
    assert r.status_code == 400 and r.json()["error"] == "malformed", (url, r.text)
    assert controller.policy_store.records == []


@pytest.mark.parametrize("url", ["http://peer:8080", "https://peer", "http://[::1]:65535/base", "http://10.0.0.1"])
async def test_a_plain_cluster_url_is_stored(client: Client, url: str) -> None:
    c, controller = client
    r = await c.put("/admin/v2/clusters/b", json={"service_url": url})
    assert r.status_code == 200, r.text
    assert controller.policies.clusters == {"b": url.rstrip("/")}


@pytest.mark.parametrize("path", ["/admin/v2/persistent/t/n/x%01y/replication",
                                  "/admin/v2/persistent/t/n%7F/x/replication",
                                  "/admin/v2/namespaces/t%01/n/replication"])
async def test_a_policy_for_a_name_with_a_control_character_is_a_400(client: Client,
                                                               path: str) -> None:
    c, controller = client
    r = await c.post(path, json=["a"])
    assert r.status_code == 400 and r.json()["error"] == "malformed", r.text
    assert controller.policy_store.records == []
    assert (await c.post("/admin/v2/persistent/t/n/x/replication", json=["a"])).status_code == 200
