"""Limits: open transactions per client (429), partitions and subscriptions per transaction (409).

Before: one client could open transactions and register participants without
end (each is memory, log records replayed at start, and a call at its end).
"""

from __future__ import annotations

from typing import Any

import httpx

from streamtx.auth.tokens import issue
from tests.integration.coordinator.conftest import TOPIC, TcFactory

SECRET = "s" * 32


def client(url: str, subject: str) -> httpx.AsyncClient:
    token = issue(SECRET, subject=subject, roles=["client"], tenants=["t"])
    return httpx.AsyncClient(base_url=url, timeout=60, headers={"authorization": f"Bearer {token}"})


async def create(c: httpx.AsyncClient, expect: int = 200) -> Any:
    r = await c.post("/v1/transactions", json={"timeout_ms": 600_000})
    assert r.status_code == expect, r.text
    return r.json()["txn_id"] if expect == 200 else r.json()


async def test_open_transactions_per_client_are_limited(file_url: str, tc_factory: TcFactory) -> None:
    proc = tc_factory(file_url, auth_jwt_secret=SECRET, admin_token="admin-secret",
                      max_open_txns_per_client=3)
    async with client(proc.url, "alice") as alice, client(proc.url, "bob") as bob:
        mine = [await create(alice) for _ in range(3)]
        refused = await create(alice, expect=429)
        assert refused["error"] == "too_many_requests" and "3 open transactions" in refused["message"]
        await create(bob)  # another client has its own allowance
        r = await alice.post(f"/v1/transactions/{mine[0]}/abort")
        assert r.status_code == 200, r.text
        mine[0] = await create(alice)  # an ended transaction frees its slot
        await create(alice, expect=429)

        proc.restart()  # the open ones are counted again from the log
        await create(alice, expect=429)
        await create(bob)


async def test_participants_per_transaction_are_limited(file_url: str, tc_factory: TcFactory) -> None:
    proc = tc_factory(file_url, max_partitions_per_txn=2, max_subscriptions_per_txn=2)
    async with httpx.AsyncClient(base_url=proc.url, timeout=60) as c:
        txn = await create(c)
        parts = [f"{TOPIC}-partition-{i}" for i in range(3)]
        add = f"/v1/transactions/{txn}/partitions"
        assert (await c.post(add, json={"partitions": parts[:2]})).status_code == 200
        r = await c.post(add, json={"partitions": parts})
        assert r.status_code == 409 and r.json()["error"] == "conflict", r.text
        assert "limit of 2" in r.json()["message"]
        # Registering what it has is still fine, and the transaction still commits.
        assert (await c.post(add, json={"partitions": parts[:2]})).status_code == 200
        subs = [{"topic": TOPIC, "subscription": f"s{i}"} for i in range(3)]
        r = await c.post(f"/v1/transactions/{txn}/subscriptions", json={"subscriptions": subs})
        assert r.status_code == 409, r.text
        state = (await c.get(f"/v1/transactions/{txn}")).json()
        assert state["partitions"] == parts[:2] and state["subscriptions"] == []
        r = await c.post(f"/v1/transactions/{txn}/commit")
        assert r.status_code == 200 and r.json()["state"] == "COMMITTED", r.text
