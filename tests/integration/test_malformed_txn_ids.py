"""One malformed transaction id, one answer: 400 ``malformed`` from every service and route.

The id is parsed by one strict parser (``streamtx.contracts.txnid``), so what the
coordinator refuses in a path the broker refuses in a produce or an end and the
pending-ack store in an ack, a prepare or an end - never a 500, never accepted.
Runs once with the fast lane on and once with it off (both code paths of the
hot routes).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.support.suite import Suite
from tests.unit.test_contracts_txnid import MALFORMED

TOPIC = "persistent://t/n/bad-ids"


@pytest.fixture(scope="module", params=["lane", "no-lane"])
def suite(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    log_dir: Path = tmp_path_factory.mktemp("logs")
    env = {"STREAMTX_FAST_LANE": "true" if request.param == "lane" else "false"}
    with Suite("memory://", log_dir, env=env) as s:
        with httpx.Client(base_url=s.broker.url, timeout=10) as c:
            c.put("/admin/v2/persistent/t/n/bad-ids/partitions", json={"partitions": 1}).raise_for_status()
            c.put("/v1/topics/t/n/bad-ids/subscriptions/s",
                  json={"initial_position": "earliest"}).raise_for_status()
        yield s


def _calls(suite: Suite, bad: str) -> list[tuple[str, str, str, dict[str, Any] | None]]:
    tc, br, pa = suite.coordinator.url, suite.broker.url, suite.pendingack.url
    calls: list[tuple[str, str, str, dict[str, Any] | None]] = [
        ("POST", br, "/v1/topics/t/n/bad-ids/messages", {"messages": [{"value": ""}], "txn_id": bad}),
        ("POST", br, "/v1/topics/t/n/bad-ids/subscriptions/s/acks", {"message_ids": ["1:1"], "txn_id": bad}),
        ("POST", br, "/v1/txn/partitions/end",
         {"txn_id": bad, "partition": f"{TOPIC}-partition-0", "action": "abort"}),
        ("POST", br, "/v1/txn/subscriptions/end",
         {"txn_id": bad, "topic": f"{TOPIC}-partition-0", "subscription": "s", "action": "abort"}),
        ("POST", pa, "/v1/pendingack/acks",
         {"txn_id": bad, "topic": f"{TOPIC}-partition-0", "subscription": "s", "message_ids": ["1:1"]}),
        ("POST", pa, "/v1/txn/subscriptions/prepare",
         {"txn_id": bad, "topic": f"{TOPIC}-partition-0", "subscription": "s"}),
        ("POST", pa, "/v1/txn/subscriptions/end",
         {"txn_id": bad, "topic": f"{TOPIC}-partition-0", "subscription": "s", "action": "commit"}),
    ]
    if bad and len(bad) < 100:  # in a path: an empty id is another route, a huge one a too-long URL
        path = quote(bad, safe="")
        calls += [("GET", tc, f"/v1/transactions/{path}", None),
                  ("POST", tc, f"/v1/transactions/{path}/partitions", {"partitions": [TOPIC]}),
                  ("POST", tc, f"/v1/transactions/{path}/commit", None)]
    return calls


def test_every_service_answers_400_to_every_malformed_id(suite: Suite) -> None:
    wrong: list[str] = []
    with httpx.Client(timeout=10) as c:
        for bad in MALFORMED:
            for method, base, path, body in _calls(suite, bad):
                r = c.request(method, base + path, json=body)
                code = r.json().get("error") if r.headers.get("content-type") == "application/json" else None
                if r.status_code != 400 or code != "malformed":
                    wrong.append(f"{method} {path} txn_id={bad[:20]!r}: {r.status_code} {r.text[:120]}")
    assert not wrong, "\n".join(wrong)
    # Nothing of it was accepted: the topic holds no message.
    with httpx.Client(base_url=suite.broker.url, timeout=10) as c:
        r = c.get("/v1/topics/t/n/bad-ids/subscriptions/s/messages", params={"max": 10, "wait_ms": 0,
                                                                             "consumer": "c"})
        assert r.status_code == 200 and r.json()["messages"] == []
