"""Concurrent transactions while the coordinator is killed -9 again and again.

Afterwards: every transaction a client saw COMMITTED is still COMMITTED with all
its partitions and subscriptions, and every participant committed it; what a
client saw aborted stayed aborted; no id was handed out twice; nothing is left
COMMITTING or ABORTING; abandoned OPEN transactions timed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.integration.coordinator.conftest import TOPIC, ClientFactory, TcClient, TcFactory
from tests.integration.coordinator.participant import Participant

_transport = (httpx.TransportError, httpx.RemoteProtocolError)


@dataclass
class Seen:
    """What the clients were told."""

    created: list[str] = field(default_factory=list)
    partitions: dict[str, set[str]] = field(default_factory=dict)
    subscriptions: dict[str, set[str]] = field(default_factory=dict)
    committed: set[str] = field(default_factory=set)
    aborted: set[str] = field(default_factory=set)  # ABORTED or TIMEOUT answers
    refused: set[str] = field(default_factory=set)  # commit answered 409
    abandoned: set[str] = field(default_factory=set)


async def _retrying(http: httpx.AsyncClient, path: str, body: Any, stop_at: float) -> httpx.Response:
    """POST one idempotent call until the coordinator answers other than 503; the response."""
    while True:
        try:
            r = await http.post(path, json=body)
            if r.status_code != 503:
                return r
        except _transport:
            pass
        if time.monotonic() > stop_at:
            raise AssertionError("the coordinator did not come back")
        await asyncio.sleep(0.05)


async def _worker(tc: TcClient, seen: Seen, rng: random.Random, until: float) -> None:
    http = tc.http
    while time.monotonic() < until:
        abandon = rng.random() < 0.15
        try:
            r = await http.post("/v1/transactions", json={"timeout_ms": 1500 if abandon else 6000})
        except _transport:
            await asyncio.sleep(0.05)
            continue
        if r.status_code != 200:
            continue
        txn = r.json()["txn_id"]
        seen.created.append(txn)
        parts = {f"{TOPIC}-partition-{i}" for i in rng.sample(range(8), 2)}
        subs = {f"sub-{i}" for i in rng.sample(range(4), 1)}
        stop_at = time.monotonic() + 30
        path = f"/v1/transactions/{txn}"
        r = await _retrying(http, f"{path}/partitions", {"partitions": sorted(parts)}, stop_at)
        if r.status_code != 200:
            continue  # timed out while the coordinator was down
        seen.partitions[txn] = parts
        body = {"subscriptions": [{"topic": TOPIC, "subscription": s} for s in subs]}
        r = await _retrying(http, f"/v1/transactions/{txn}/subscriptions", body, stop_at)
        if r.status_code != 200:
            continue
        seen.subscriptions[txn] = subs
        if abandon:
            seen.abandoned.add(txn)
            continue
        action = "commit" if rng.random() < 0.7 else "abort"
        r = await _retrying(http, f"/v1/transactions/{txn}/{action}", None, stop_at)
        if r.status_code == 200:
            state = r.json()["state"]
            (seen.committed if state == "COMMITTED" else seen.aborted).add(txn)
        else:
            assert r.status_code == 409, r.text
            seen.refused.add(txn)


async def test_kill9_during_concurrent_transactions(
    backend_url: str, tc_factory: TcFactory, client_factory: ClientFactory, participant: Participant
) -> None:
    proc = tc_factory(backend_url, batching__max_records=64)
    tc = client_factory(proc)
    participant.delay_s = 0.01  # fan-outs take a while: kills land mid-end too
    seen = Seen()
    rng = random.Random(7)
    until = time.monotonic() + 6
    workers = [asyncio.create_task(_worker(tc, seen, random.Random(rng.random()), until)) for _ in range(24)]
    kills = 0
    for _ in range(3):
        await asyncio.sleep(1.0 + rng.random())
        proc.kill9()
        kills += 1
        await asyncio.sleep(0.2)
        proc.start()
    await asyncio.gather(*workers)
    assert kills == 3

    # No id handed out twice, across every restart.
    assert len(seen.created) == len(set(seen.created))
    assert len(seen.committed) > 20 and len(seen.abandoned) > 3, (len(seen.committed), len(seen.abandoned))

    # Everything reaches a final state: COMMITTING/ABORTING finish, OPEN ones time out.
    deadline = time.monotonic() + 20
    while True:
        stats = (await tc.admin("coordinatorStats"))["0"]
        if stats["ongoingTxnSize"] == 0:
            break
        assert time.monotonic() < deadline, stats
        await asyncio.sleep(0.2)

    states: dict[str, str] = {}
    for txn in seen.created:
        body = await tc.get(txn, expect=None)  # type: ignore[arg-type]
        states[txn] = body.get("state", body.get("error"))
    for txn in seen.committed:
        body = await tc.get(txn)
        assert body["state"] == "COMMITTED", body
        assert set(body["partitions"]) >= seen.partitions[txn]
        assert {s["subscription"] for s in body["subscriptions"]} >= seen.subscriptions[txn]
        actions = participant.actions(txn)
        for part in seen.partitions[txn]:
            assert actions[("partition", part)] == "commit", (txn, part)
        for sub in seen.subscriptions[txn]:
            assert actions[("subscription", f"{TOPIC}|{sub}")] == "commit", (txn, sub)
    for txn in seen.aborted | seen.refused | seen.abandoned:
        assert states[txn] in {"ABORTED", "TIMEOUT"}, (txn, states[txn])
        assert "commit" not in participant.actions(txn).values()
    for txn in seen.abandoned:
        assert states[txn] == "TIMEOUT", (txn, states[txn])
    assert all(s in {"COMMITTED", "ABORTED", "TIMEOUT"} for s in states.values()), states
    assert participant.violations == []

    # A new transaction after all that still gets a fresh id.
    fresh = await tc.create()
    assert fresh not in set(seen.created)
    counters = [int(t.split(":")[1]) for t in seen.created]
    assert int(fresh.split(":")[1]) > max(counters)
    with contextlib.suppress(Exception):
        proc.stop()
