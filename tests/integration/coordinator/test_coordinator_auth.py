"""The coordinator's own checks with auth on: tenants named in a registration's body, and owners.

The path rule cannot see the tenants a body names, so the routes check them (issue 21 item 17:
removing the check on subscriptions left every test green). The answer names its owner, which
the participants compare with the caller of a transactional produce or ack (item 2).
"""

from __future__ import annotations

from typing import Any

import httpx

from streamtx.auth import issue
from tests.integration.coordinator.conftest import TcFactory

SECRET = "tc-auth-secret-tc-auth-secret-0123456"
A = issue(SECRET, subject="app-a", roles=["client"], tenants=["a"])
A2 = issue(SECRET, subject="app-a2", roles=["client"], tenants=["a"])
SERVICE = issue(SECRET, subject="svc", roles=["service"])


def call(http: httpx.Client, method: str, path: str, token: str, expect: int, **kw: Any) -> Any:
    r = http.request(method, path, headers={"authorization": f"Bearer {token}"}, **kw)
    assert r.status_code == expect, f"{method} {path}: {r.status_code} {r.text}"
    return r.json()


def test_registrations_name_only_the_callers_tenants_and_only_the_owner_registers(
        file_url: str, tc_factory: TcFactory) -> None:
    tc = tc_factory(file_url, auth_jwt_secret=SECRET, service_token=SERVICE)
    with httpx.Client(base_url=tc.url, timeout=30) as http:
        txn = call(http, "POST", "/v1/transactions", A, 200)["txn_id"]
        base = f"/v1/transactions/{txn}"
        theirs = {"subscriptions": [{"topic": "persistent://b/n/x", "subscription": "s"}]}
        mixed = {"subscriptions": [{"topic": "persistent://a/n/x", "subscription": "s"},
                                   {"topic": "persistent://b/n/x-partition-0", "subscription": "s"}]}
        for body in (theirs, mixed):
            answer = call(http, "POST", f"{base}/subscriptions", A, 403, json=body)
            assert answer["error"] == "forbidden" and "'b'" in answer["message"], answer
        answer = call(http, "POST", f"{base}/partitions", A, 403,
                      json={"partitions": ["persistent://b/n/x-partition-0"]})
        assert answer["error"] == "forbidden", answer
        meta = call(http, "GET", base, A, 200)
        assert meta["partitions"] == [] and meta["subscriptions"] == []  # nothing of it registered

        ours = {"subscriptions": [{"topic": "persistent://a/n/x", "subscription": "s"}]}
        call(http, "POST", f"{base}/subscriptions", A, 200, json=ours)
        partitions = {"partitions": ["persistent://a/n/x-partition-0"]}
        call(http, "POST", f"{base}/partitions", A, 200, json=partitions)
        # Another subject of the same tenant: not its transaction.
        for path, body in (("/subscriptions", ours), ("/partitions", partitions)):
            assert call(http, "POST", base + path, A2, 403, json=body)["error"] == "forbidden"
        # The owner, as the participants read it (they ask with the service token).
        meta = call(http, "GET", base, SERVICE, 200)
        assert meta["owner"] == "app-a" and meta["state"] == "OPEN"
        assert meta["subscriptions"] == ours["subscriptions"]
        assert meta["partitions"] == partitions["partitions"]
