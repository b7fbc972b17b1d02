"""The OpenAPI documents tell the truth (issue 21 item 13): the errors each operation answers with,
in the API's shape, never FastAPI's 422; path parameters with the pattern their routes enforce;
a 405 names the methods the path has (``Allow``).

The whole contract is checked against running services by schemathesis with every check
(tests/e2e/test_fuzz_openapi.py); these are the document's shape, in milliseconds.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from streamtx.broker.app import build_app as broker_app
from streamtx.broker.settings import BrokerSettings
from streamtx.contracts.txnid import TXN_ID_PATTERN
from streamtx.coordinator.app import build_app as coordinator_app
from streamtx.coordinator.settings import CoordinatorSettings


@pytest.fixture(scope="module")
def apps() -> dict[str, FastAPI]:
    return {"coordinator": coordinator_app(CoordinatorSettings()),  # type: ignore[call-arg]
            "broker": broker_app(BrokerSettings())}  # type: ignore[call-arg]


def operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, op) for path, ops in doc["paths"].items() for method, op in ops.items()]


def test_no_operation_documents_a_422_and_every_error_has_the_api_shape(apps: dict[str, FastAPI]) -> None:
    for app in apps.values():
        doc = app.openapi()
        assert doc["components"]["schemas"]["Error"]["required"] == ["error", "message"]
        for path, method, op in operations(doc):
            answers = op["responses"]
            assert "422" not in answers, (path, method)
            if path in ("/healthz", "/readyz", "/v1/cluster"):  # open to anyone; /readyz: 200 or 503
                continue
            assert {"401", "403", "404", "503"} <= set(answers), (path, method, sorted(answers))
            if op.get("parameters") or "requestBody" in op:
                assert "400" in answers, (path, method)
            for status, answer in answers.items():
                if status >= "400":
                    schema = answer["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/Error"}, (path, method, status)


def test_a_transaction_id_in_a_path_has_its_pattern(apps: dict[str, FastAPI]) -> None:
    doc = apps["coordinator"].openapi()
    txn_params = [p for path, _, op in operations(doc) if "{txn}" in path for p in op["parameters"]
                  if p["name"] == "txn"]
    assert len(txn_params) >= 5
    for p in txn_params:
        assert p["schema"]["pattern"] == TXN_ID_PATTERN
    pattern = re.compile(TXN_ID_PATTERN)
    assert pattern.fullmatch(f"{2**64 - 1}:0") and not pattern.fullmatch(f"{2**64}:0")
    assert not pattern.fullmatch("1:-2") and not pattern.fullmatch(" 1:2")


def test_the_statuses_a_route_adds_are_listed(apps: dict[str, FastAPI]) -> None:
    doc = apps["coordinator"].openapi()
    assert "429" in doc["paths"]["/v1/transactions"]["post"]["responses"]
    fetch = "/v1/topics/{tenant}/{namespace}/{topic}/subscriptions/{sub}/messages"
    assert {"409", "429"} <= set(apps["broker"].openapi()["paths"][fetch]["get"]["responses"])


async def test_a_405_names_the_methods_the_path_has(apps: dict[str, FastAPI]) -> None:
    transport = httpx.ASGITransport(app=apps["coordinator"])
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        r = await c.delete("/v1/transactions/1:2/commit")
    assert r.status_code == 405 and r.json()["error"] == "method_not_allowed"
    assert r.headers["allow"] == "POST"


@pytest.mark.parametrize("service", ["coordinator", "broker", "pendingack", "replication"])
async def test_every_405_names_every_method_of_its_path(apps: dict[str, FastAPI], service: str) -> None:
    """Issue 38: Starlette's 405 named the methods of the first route matching the path (one per
    method in FastAPI): ``OPTIONS .../partitions`` answered ``allow: GET`` though PUT is there too."""
    from streamtx.pendingack.app import build_app as pendingack_app
    from streamtx.pendingack.settings import PendingAckSettings
    from streamtx.replication.app import build_app as replication_app
    from streamtx.replication.settings import ReplicationSettings

    more = {"pendingack": lambda: pendingack_app(PendingAckSettings()),  # type: ignore[call-arg]
            "replication": lambda: replication_app(ReplicationSettings())}
    app = more[service]() if service in more else apps[service]
    several = 0
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        for template, ops in app.openapi()["paths"].items():
            documented = {m.upper() for m in ops}
            several += len(documented) > 1
            path = re.sub(r"\{[^}]+\}", lambda m: "1:2" if m[0] == "{txn_id}" else "x", template)
            for method in sorted({"OPTIONS", "PATCH", "PUT", "DELETE", "POST", "GET"} - documented):
                r = await c.request(method, path)
                assert r.status_code == 405 and r.json()["error"] == "method_not_allowed", (method, path)
                assert set(r.headers["allow"].split(", ")) - {"HEAD"} == documented, (method, path, r.headers)
    # The case this is about: paths with more than one method (the 8 and 3).
    assert several >= {"broker": 8, "replication": 3}.get(service, 0), several


def test_a_parameter_is_listed_once(apps: dict[str, FastAPI]) -> None:
    # A router's dependency (the reserved-name check) and a hot route's own list both named {sub}:
    # the broker's document was invalid OpenAPI (duplicate parameter).
    for app in apps.values():
        for path, method, op in operations(app.openapi()):
            names = [(p["name"], p["in"]) for p in op.get("parameters", [])]
            assert len(names) == len(set(names)), (path, method, names)
