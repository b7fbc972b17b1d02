"""A transactional produce or ack is accepted only in an open transaction of the caller's, on a
partition or subscription registered in it (issue 21 item 2): the whole suite, auth on.

Before, each of these answered 200: a never-opened or committed transaction's messages were
stored (aborted ~70 s later by the stuck-transaction checker, every reader of the partition
blocked meanwhile), an unserved coordinator id's blocked the partition for good, and another
client of the same tenant wrote into someone else's open transaction (its owner's commit then
published it).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from streamtx.auth import issue
from streamtx.contracts.txnid import TxnId
from streamtx.wire import batch as wire
from tests.support.suite import Suite

SECRET = "door-secret-door-secret-door-secret-01"
ADMIN = issue(SECRET, subject="ops", roles=["admin"])
SERVICE = issue(SECRET, subject="svc", roles=["service"])
OWNER = issue(SECRET, subject="app-a", roles=["client"], tenants=["a"])
OTHER = issue(SECRET, subject="app-a2", roles=["client"], tenants=["a"])  # same tenant, another subject


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    tmp = tmp_path_factory.mktemp("door")
    env = {"STREAMTX_AUTH_JWT_SECRET": SECRET, "STREAMTX_SERVICE_TOKEN": SERVICE}
    with Suite(f"file://{tmp / 'ledgers'}", tmp, env=env) as running:
        yield running


class Api:
    def __init__(self, suite: Suite) -> None:
        self.suite = suite
        self.http = httpx.Client(timeout=30)
        self.topic = f"x{uuid.uuid4().hex[:6]}"
        self.name = f"persistent://a/n/{self.topic}"
        self.p0 = f"{self.name}-partition-0"

    def call(self, url: str, method: str, path: str, token: str, expect: int = 200, **kw: Any) -> Any:
        r = self.http.request(method, url + path, headers={"authorization": f"Bearer {token}"}, **kw)
        assert r.status_code == expect, f"{method} {path}: {r.status_code} {r.text}"
        body = r.json()
        if expect >= 400:
            assert set(body) == {"error", "message"}, body  # the API's error shape
        return body

    def tc(self, method: str, path: str, token: str = OWNER, expect: int = 200, **kw: Any) -> Any:
        return self.call(self.suite.coordinator.url, method, path, token, expect, **kw)

    def broker(self, method: str, path: str, token: str = OWNER, expect: int = 200, **kw: Any) -> Any:
        path = f"/v1/topics/a/n/{self.topic}{path}"
        return self.call(self.suite.broker.url, method, path, token, expect, **kw)

    def produce(self, value: str, txn: str | None = None, token: str = OWNER, expect: int = 200) -> Any:
        body: dict[str, Any] = {"messages": [{"value": base64.b64encode(value.encode()).decode()}]}
        if txn is not None:
            body["txn_id"] = txn
        return self.broker("POST", "/messages", token, expect, json=body)

    def produce_binary(self, value: str, txn: str, token: str = OWNER, expect: int = 200) -> int:
        """The binary produce (what the SDK and the demo send); its status."""
        body = wire.encode_produce([(0, [wire.Msg(value.encode())])], txn=TxnId.parse(txn))
        r = self.http.post(f"{self.suite.broker.url}/v1/topics/a/n/{self.topic}/messages", content=body,
                           headers={"authorization": f"Bearer {token}", "content-type": wire.CONTENT_TYPE})
        assert r.status_code == expect, f"binary produce: {r.status_code} {r.text}"
        return r.status_code

    def begin(self, token: str = OWNER, *, partitions: bool = True, subscription: bool = False) -> str:
        txn = str(self.tc("POST", "/v1/transactions", token, json={"timeout_ms": 60_000})["txn_id"])
        if partitions:
            self.tc("POST", f"/v1/transactions/{txn}/partitions", token, json={"partitions": [self.p0]})
        if subscription:
            self.tc("POST", f"/v1/transactions/{txn}/subscriptions", token,
                    json={"subscriptions": [{"topic": self.name, "subscription": "s"}]})
        return txn

    def fetch(self) -> list[str]:
        got = self.broker("GET", "/subscriptions/s/messages", params={"max": 100, "wait_ms": 300})["messages"]
        return [base64.b64decode(m["value"]).decode() for m in got]


@pytest.fixture
def api(suite: Suite) -> Iterator[Api]:
    a = Api(suite)
    a.call(suite.broker.url, "PUT", f"/admin/v2/persistent/a/n/{a.topic}/partitions", ADMIN,
           json={"partitions": 1})
    a.broker("PUT", "/subscriptions/s", json={"initial_position": "earliest"})
    yield a
    a.http.close()


def test_produce_needs_an_open_registered_transaction_and_nothing_refused_blocks_the_partition(
        api: Api) -> None:
    assert api.produce("never-opened", "0:424242", expect=404)["error"] == "not_found"
    # A coordinator id no replica serves: refused at once, never held pending.
    assert api.produce("unserved", "281474976710656:5", expect=404)["error"] == "not_found"
    committed = api.begin()
    api.produce("committed-1", committed)
    api.tc("POST", f"/v1/transactions/{committed}/commit")
    assert api.produce("late", committed, expect=409)["error"] == "conflict"
    unregistered = api.begin(partitions=False)
    answer = api.produce("unregistered", unregistered, expect=409)
    assert "not registered" in answer["message"], answer
    api.produce("plain")
    # Nothing refused was stored: the plain message is delivered now, not after a checker's abort.
    assert api.fetch() == ["committed-1", "plain"]


def test_the_binary_produce_is_checked_at_the_door_as_the_json_one(api: Api) -> None:
    """Issue 38 mutation 2: the binary path's check went untested (only the JSON path's was)."""
    api.produce_binary("never-opened", "0:424242", expect=404)
    unregistered = api.begin(partitions=False)
    api.produce_binary("unregistered", unregistered, expect=409)
    mine = api.begin()
    api.produce_binary("intruder", mine, token=OTHER, expect=403)
    api.produce_binary("owner's", mine)
    committed = api.begin()
    api.tc("POST", f"/v1/transactions/{committed}/commit")
    api.produce_binary("late", committed, expect=409)
    api.tc("POST", f"/v1/transactions/{mine}/commit")
    # Nothing refused was stored (and none blocks the partition behind it).
    assert api.fetch() == ["owner's"]


def test_another_client_of_the_tenant_cannot_write_into_someone_elses_transaction(api: Api) -> None:
    api.produce("m0")
    first = api.broker("GET", "/subscriptions/s/messages", params={"max": 1, "wait_ms": 300})["messages"]
    txn = api.begin(subscription=True)
    assert api.produce("intruder", txn, token=OTHER, expect=403)["error"] == "forbidden"
    acks = {"message_ids": [first[0]["message_id"]], "txn_id": txn}
    assert api.broker("POST", "/subscriptions/s/acks", OTHER, 403, json=acks)["error"] == "forbidden"
    api.produce("owner's", txn)
    api.tc("POST", f"/v1/transactions/{txn}/commit")
    assert api.fetch() == ["owner's"]  # and not the intruder's (m0 waits for its ack timeout)


def test_acks_need_an_open_transaction_with_the_subscription_registered(api: Api, suite: Suite) -> None:
    api.produce("m0")
    got = api.broker("GET", "/subscriptions/s/messages", params={"max": 1, "wait_ms": 300})["messages"]
    ids = [got[0]["message_id"]]
    assert api.broker("POST", "/subscriptions/s/acks", expect=404,
                      json={"message_ids": ids, "txn_id": "0:424242"})["error"] == "not_found"
    txn = api.begin(partitions=False)
    answer = api.broker("POST", "/subscriptions/s/acks", expect=409, json={"message_ids": ids, "txn_id": txn})
    assert "not registered" in answer["message"], answer
    # The pending-ack store checks too (its caller is a broker, trusted with the owner check).
    direct = {"topic": api.name, "subscription": "s", "txn_id": txn, "message_ids": ids}
    assert api.call(suite.pendingack.url, "POST", "/v1/pendingack/acks", SERVICE, 409, json=direct)
    assert api.call(suite.pendingack.url, "POST", "/v1/pendingack/acks", SERVICE, 404,
                    json={**direct, "txn_id": "0:424242"})
    # Registered, the same ack goes in; committed, the message is gone for good.
    api.tc("POST", f"/v1/transactions/{txn}/subscriptions",
           json={"subscriptions": [{"topic": api.name, "subscription": "s"}]})
    api.broker("POST", "/subscriptions/s/acks", json={"message_ids": ids, "txn_id": txn})
    api.tc("POST", f"/v1/transactions/{txn}/commit")
    answer = api.broker("POST", "/subscriptions/s/acks", expect=409, json={"message_ids": ids, "txn_id": txn})
    assert "COMMITTED" in answer["message"], answer
