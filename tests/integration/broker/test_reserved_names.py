"""Producer and subscription names of the services' own (``pulsar.repl.<cluster>``) are refused
to clients (issue 21 item 3): a real broker, auth on and off.

Before, a client producer ``pulsar.repl.east`` with a huge sequence made every later write
replicated from ``east`` a duplicate (dropped), and a client subscription of that name shared
the replicator's cursor; each answered 200.
"""

from __future__ import annotations

import base64

import httpx

from streamtx.auth import issue
from streamtx.wire import batch as wire
from tests.integration.broker.conftest import BrokerClient, BrokerFactory

SECRET = "names-secret-names-secret-names-secret"
CLIENT = issue(SECRET, subject="app", roles=["client"], tenants=["t"])
SERVICE = issue(SECRET, subject="svc", roles=["service"])
ADMIN = issue(SECRET, subject="ops", roles=["admin"])
REPL = "pulsar.repl.east"


def _call(b: BrokerClient, method: str, path: str, token: str | None, **kw: object) -> httpx.Response:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return b.http.request(method, path, headers={**headers, **kw.pop("headers", {})}, **kw)  # type: ignore[arg-type]


def _produce(b: BrokerClient, name: str, token: str | None) -> httpx.Response:
    msg = {"value": base64.b64encode(b"v").decode(), "partition": 0}
    return _call(b, "POST", "/v1/topics/t/n/r/messages", token,
                 json={"messages": [msg], "producer": {"name": name, "epoch": 0, "sequence": 1 << 62}})


def _produce_binary(b: BrokerClient, name: str, token: str | None) -> httpx.Response:
    body = wire.encode_produce([(0, [wire.Msg(b"v")])], producer=(name, 0, 1 << 62))
    return _call(b, "POST", "/v1/topics/t/n/r/messages", token, content=body,
                 headers={"content-type": wire.CONTENT_TYPE})


def _subscription_calls(b: BrokerClient, sub: str, token: str | None) -> list[httpx.Response]:
    base = f"/v1/topics/t/n/r/subscriptions/{sub}"
    return [
        _call(b, "PUT", base, token, json={"initial_position": "earliest"}),
        _call(b, "GET", f"{base}/messages", token, params={"wait_ms": 0}),
        _call(b, "POST", f"{base}/acks", token, json={"message_ids": ["1:1"]}),
        _call(b, "POST", f"{base}/acks", token, content=wire.encode_acks(["1:1"]),
              headers={"content-type": wire.CONTENT_TYPE}),
        _call(b, "POST", f"{base}/nacks", token, json={"message_ids": ["1:1"]}),
        _call(b, "GET", f"{base}/stats", token),
        _call(b, "DELETE", f"{base}/consumers/c1", token),
        _call(b, "DELETE", base, token, params={"force": "true"}),
    ]


def _forbidden(r: httpx.Response) -> None:
    assert r.status_code == 403, f"{r.request.method} {r.request.url.path}: {r.status_code} {r.text}"
    assert r.json()["error"] == "forbidden" and "reserved" in r.json()["message"]


def test_a_client_token_may_not_use_internal_names_a_service_token_may(broker_factory: BrokerFactory) -> None:
    b = broker_factory(auth_jwt_secret=SECRET, service_token=SERVICE)
    assert _call(b, "PUT", "/admin/v2/persistent/t/n/r/partitions", ADMIN, json={"partitions": 1}).is_success
    for r in [_produce(b, REPL, CLIENT), _produce_binary(b, REPL, CLIENT),
              _produce(b, "pulsar.dedup", CLIENT), *_subscription_calls(b, REPL, CLIENT)]:
        _forbidden(r)
    assert _produce(b, "app-producer", CLIENT).status_code == 200  # other names as before
    assert _call(b, "PUT", "/v1/topics/t/n/r/subscriptions/s", CLIENT, json={}).status_code == 200
    assert _produce(b, REPL, SERVICE).status_code == 200  # the services' own names: theirs
    assert _call(b, "PUT", f"/v1/topics/t/n/r/subscriptions/{REPL}", SERVICE, json={}).status_code == 200


def test_with_auth_off_the_public_paths_refuse_internal_names(broker: BrokerClient) -> None:
    broker.create_topic("r", 1)
    for r in [_produce(broker, REPL, None), _produce_binary(broker, REPL, None),
              *_subscription_calls(broker, REPL, None)]:
        _forbidden(r)
    assert _produce(broker, "pulsar-like-but-not-reserved", None).status_code == 200
