"""Auth on, the whole suite as real processes (issue 9, items 6-8).

Tokens are JWTs signed with one HS256 secret; the services call each other
with a service token. Checked: the internal end/prepare/ack endpoints refuse
client tokens (6); tenants and transaction owners are enforced, a transaction
runs end to end with client tokens (7); and every route of every service's
OpenAPI answers 401 without a token, 403 with the wrong role or tenant, and
neither (nor a 5xx) with the right one, while open paths stay open (8).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import jwt
import pytest

from streamtx.auth import issue
from streamtx.client import StreamtxClient
from tests.support.suite import ORDER, Suite, receive

SECRET = "e2e-secret-e2e-secret-e2e-secret-0123"
ADMIN = issue(SECRET, subject="ops", roles=["admin"])
SERVICE = issue(SECRET, subject="svc", roles=["service"])
CLIENT_A = issue(SECRET, subject="app-a", roles=["client"], tenants=["a"])
CLIENT_B = issue(SECRET, subject="app-b", roles=["client"], tenants=["b"])
NO_ROLE = jwt.encode({"sub": "nobody", "roles": []}, SECRET, algorithm="HS256")

#: Paths that need no token (the walk also checks /metrics, which OpenAPI does not list).
OPEN = {"/healthz", "/readyz", "/metrics", "/v1/cluster", "/openapi.json", "/docs"}


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    tmp = tmp_path_factory.mktemp("auth")
    env = {"STREAMTX_AUTH_JWT_SECRET": SECRET, "STREAMTX_SERVICE_TOKEN": SERVICE}
    with Suite(f"file://{tmp / 'ledgers'}", tmp, env=env, services=ORDER) as running:
        yield running
    _http.close()


_http = httpx.Client(timeout=30)  # kept alive: a connection per call was most of the walk's time


def call(url: str, method: str, path: str, token: str | None = None, **kw: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return _http.request(method, url + path, headers=headers, **kw)


def test_internal_endpoints_refuse_client_tokens(suite: Suite) -> None:
    assert call(suite.broker.url, "PUT", "/admin/v2/persistent/a/n/x/partitions", ADMIN,
                json={"partitions": 1}).status_code == 200
    end = {"txn_id": "0:999999", "partition": "persistent://a/n/x-partition-0", "action": "abort"}
    sub = {"txn_id": "0:999999", "topic": "persistent://a/n/x-partition-0", "subscription": "s"}
    calls = [
        (suite.broker.url, "/v1/txn/partitions/end", end),
        (suite.broker.url, "/v1/txn/subscriptions/end", {**sub, "action": "abort"}),
        (suite.pendingack.url, "/v1/txn/subscriptions/prepare", sub),
        (suite.pendingack.url, "/v1/txn/subscriptions/end", {**sub, "action": "abort"}),
        (suite.pendingack.url, "/v1/pendingack/acks", {**sub, "message_ids": ["1:1"]}),
    ]
    for url, path, body in calls:
        r = call(url, "POST", path, CLIENT_A, json=body)
        assert r.status_code == 403 and r.json()["error"] == "forbidden", (path, r.text)
    for url, path, body in calls:  # the service credential passes (the call may still be a 4xx)
        r = call(url, "POST", path, SERVICE, json=body)
        assert r.status_code < 500 and r.status_code not in (401, 403), (path, r.text)
    r = call(suite.broker.url, "POST", "/v1/txn/partitions/end", SERVICE, json=end)
    assert r.status_code == 200 and r.json()["marker"] is not None, r.text


async def test_a_transaction_runs_with_client_tokens_and_tenants_are_kept_apart(suite: Suite) -> None:
    src, out = f"persistent://a/n/in-{uuid.uuid4().hex[:6]}", f"persistent://a/n/out-{uuid.uuid4().hex[:6]}"
    async with StreamtxClient(suite.url, token=ADMIN) as admin:
        await admin.create_topic(src, 1)
        await admin.create_topic(out, 1)
        await admin.create_topic("persistent://b/n/x", 1)
    async with StreamtxClient(suite.url, token=CLIENT_A) as client:
        producer = await client.producer(src, name="feed")
        await producer.send(b"hello")
        consumer = await client.consumer(src, "work", "earliest", "Shared")
        sink = await client.producer(out, name="sink")
        got = await receive(consumer, 1)
        async with client.transaction(timeout_ms=30_000) as txn:
            await sink.send(got[0].value.upper(), txn=txn)
            await consumer.ack(got, txn=txn)
        assert (await client.transaction_metadata(txn.txn_id))["state"] == "COMMITTED"
        reader = await client.consumer(out, "read", "earliest", "Shared")
        assert [m.value for m in await receive(reader, 1)] == [b"HELLO"]

    # Tenant b's topic, subscriptions and transactions are out of a's reach.
    tc, broker = suite.coordinator.url, suite.broker.url
    msg = {"messages": [{"value": "aGk="}]}
    assert call(broker, "POST", "/v1/topics/b/n/x/messages", CLIENT_A, json=msg).status_code == 403
    assert call(broker, "POST", "/v1/topics/b/n/x/messages", CLIENT_B, json=msg).status_code == 200
    assert call(broker, "PUT", "/v1/topics/b/n/x/subscriptions/s", CLIENT_A,
                json={"initial_position": "earliest"}).status_code == 403
    assert call(broker, "GET", "/v1/topics/b/n/x/subscriptions/s/messages", CLIENT_A,
                params={"wait_ms": 0}).status_code == 403
    txn_b = call(tc, "POST", "/v1/transactions", CLIENT_B).json()["txn_id"]
    for method, path in (("GET", ""), ("POST", "/commit"), ("POST", "/abort")):
        r = call(tc, method, f"/v1/transactions/{txn_b}{path}", CLIENT_A)
        assert r.status_code == 403 and r.json()["error"] == "forbidden", (path, r.text)
    txn_a = call(tc, "POST", "/v1/transactions", CLIENT_A).json()["txn_id"]
    r = call(tc, "POST", f"/v1/transactions/{txn_a}/partitions", CLIENT_A,
             json={"partitions": ["persistent://b/n/x-partition-0"]})
    assert r.status_code == 403, r.text
    assert call(tc, "GET", f"/v1/transactions/{txn_b}", CLIENT_B).json()["state"] == "OPEN"
    assert call(tc, "POST", f"/v1/transactions/{txn_b}/abort", CLIENT_B).json()["state"] == "ABORTED"


# --- item 8: every route of every service ----------------------------------------


def categorize(method: str, path: str) -> str:
    """What a route should need, as this test reads the brief (independently of the code's rule)."""
    if path in OPEN:
        return "open"
    if method == "get" and path == "/admin/v2/persistent/{tenant}/{namespace}/{topic}/partitions":
        return "tenant"  # the lookup every producer makes
    if path.startswith("/admin/"):
        return "admin"
    if path.startswith(("/v1/txn/", "/v1/pendingack/", "/v1/replication/")):
        return "service"
    if path.startswith("/v1/topics/{tenant}/"):
        return "tenant"
    if path.startswith("/v1/transactions"):
        return "owner" if "{txn}" in path else "client"
    if path.startswith("/lookup/"):
        return "client"  # where an owner is, as Pulsar's lookup: any authenticated caller
    assert path.startswith("/v1/"), f"route {path} is in no category: decide who may call it"
    return "client"  # the policy's default for the data API


def fill(path: str, txn: str) -> str:
    values = {"tenant": "a", "namespace": "n", "topic": "walk", "sub": "s", "txn": txn,
              "coordinator_id": "0", "most": txn.split(":")[0], "least": txn.split(":")[1],
              "timeout_ms": "1000", "name": "other-cluster", "consumer": "c1"}
    for name, value in values.items():
        path = path.replace("{" + name + "}", value)
    assert "{" not in path, f"no value for a parameter of {path}"
    return path


def query_of(operation: dict[str, Any]) -> dict[str, str]:
    values = {"max": "1", "wait_ms": "0", "consumer": "c1", "topic": "persistent://a/n/walk",
              "subscription": "s"}
    return {p["name"]: values.get(p["name"], "1") for p in operation.get("parameters", [])
            if p["in"] == "query" and p.get("required")}


def check_route(url: str, method: str, template: str, operation: dict[str, Any], txn: str) -> bool:
    """One route's answers to no token, bad tokens, wrong roles or tenants, the right token.
    False for an open route."""
    kind = categorize(method, template)
    path, params = fill(template, txn), query_of(operation)
    body = {} if method in ("post", "put") else None
    where = f"{url} {method.upper()} {template}"

    def status(token: str | None) -> int:
        return call(url, method.upper(), path, token, json=body, params=params).status_code

    if kind == "open":
        assert status(None) == 200, where
        return False
    assert status(None) == 401, where
    assert status("not-a-token") == 401, where
    assert status(NO_ROLE) == 403, where
    wrong = {"admin": [CLIENT_A, SERVICE], "service": [CLIENT_A], "tenant": [CLIENT_B],
             "owner": [CLIENT_B], "client": []}[kind]
    for token in wrong:
        assert status(token) == 403, (where, token == CLIENT_B)
    right = {"admin": ADMIN, "service": SERVICE, "tenant": CLIENT_A, "owner": CLIENT_A, "client": CLIENT_A}
    got = status(right[kind])
    assert got < 500 and got not in (401, 403), (where, got)
    return True


def test_every_route_of_every_service_checks_its_token(suite: Suite) -> None:
    assert call(suite.broker.url, "PUT", "/admin/v2/persistent/a/n/walk/partitions", ADMIN,
                json={"partitions": 1}).status_code == 200
    walked = 0
    for name, proc in suite.procs.items():
        doc = call(proc.url, "GET", "/openapi.json").json()
        for template, item in doc["paths"].items():
            for method, operation in item.items():
                # A transaction of client a's, fresh for each route (some routes end it).
                txn = call(suite.url, "POST", "/v1/transactions", CLIENT_A).json()["txn_id"]
                walked += check_route(proc.url, method, template, operation, txn)
        for path in OPEN:
            assert call(proc.url, "GET", path).status_code in (200, 503), (name, path)
    assert walked >= 30, walked  # every service's routes, not an empty walk
