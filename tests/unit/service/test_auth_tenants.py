"""The tenant and owner checks of ``streamtx.service.auth`` (issue 21 item 17): before, removing any
of them was caught only by e2e and integration tests; these fail in milliseconds."""

from __future__ import annotations

import pytest

from streamtx.auth import Denial, Principal, issue
from streamtx.auth.policy import check_owner
from streamtx.errors import ForbiddenError
from streamtx.service.auth import authorizer, check_tenants
from streamtx.service.settings import ServiceSettings

SECRET = "tenants-secret-tenants-secret-012345"
A = Principal("app-a", frozenset({"client"}), frozenset({"a"}))
A2 = Principal("app-a2", frozenset({"client"}), frozenset({"a"}))
NONE = Principal("app-0", frozenset({"client"}), frozenset())  # a token naming no tenant
EVERY = Principal("ops", frozenset({"client"}), None)  # tenants ["*"]
SERVICE = Principal("svc", frozenset({"service"}), frozenset())
ADMIN = Principal("root", frozenset({"admin"}), frozenset())


def test_a_body_may_name_only_the_callers_tenants() -> None:
    check_tenants(A, ["a"])
    check_tenants(A, [])
    for tenants in (["b"], ["a", "b"], {"b", "a"}):
        with pytest.raises(ForbiddenError, match="may not touch tenant 'b'"):
            check_tenants(A, tenants)
    with pytest.raises(ForbiddenError):
        check_tenants(NONE, ["a"])
    for anyone in (EVERY, SERVICE, ADMIN, None):  # None: auth is off
        check_tenants(anyone, ["a", "b"])


def test_a_transaction_is_its_owners_services_and_admins() -> None:
    check_owner(A, "app-a", "transaction 0:1")
    for other, owner in ((A2, "app-a"), (A, "app-a2"), (A, "")):  # "": opened with auth off
        with pytest.raises(ForbiddenError, match="transaction 0:1 belongs to another client"):
            check_owner(other, owner, "transaction 0:1")
    for anyone in (SERVICE, ADMIN, None):
        check_owner(anyone, "app-a", "transaction 0:1")


def test_a_path_naming_a_tenant_needs_a_token_of_that_tenant() -> None:
    authorize = authorizer(ServiceSettings(auth_jwt_secret=SECRET))  # type: ignore[call-arg]
    assert authorize is not None
    a = f"Bearer {issue(SECRET, subject='app-a', roles=['client'], tenants=['a'])}"
    every = f"Bearer {issue(SECRET, subject='ops', roles=['client'], tenants=['*'])}"
    service = f"Bearer {issue(SECRET, subject='svc', roles=['service'])}"
    paths = [("POST", "/v1/topics/{}/n/x/messages"), ("GET", "/v1/topics/{}/n/x/subscriptions/s/messages"),
             ("POST", "/v1/topics/{}/n/x-partition-0/subscriptions/s/acks"),
             ("PUT", "/v1/topics/{}/n/x/subscriptions/s"), ("GET", "/admin/v2/persistent/{}/n/x/partitions")]
    refused = Denial(403, "forbidden", "token may not touch tenant 'b'")
    for method, path in paths:
        assert authorize(method, path.format("b"), a) == refused
        assert authorize(method, path.format("a"), a) == A
        for token in (every, service):
            assert isinstance(authorize(method, path.format("b"), token), Principal), (method, path, token)
    # The coordinator's paths name no tenant: its routes check the bodies (check_tenants above).
    assert authorize("POST", "/v1/transactions/0:1/subscriptions", a) == A


def test_a_lookup_naming_a_tenant_needs_a_token_of_that_tenant() -> None:
    """Issue 32 defect 12: the topic lookup answered any client which broker serves tenant b's
    partitions (and, by its 404s, which topics b has and how many partitions each), while the admin
    path answered 403 for the same. The lookups name a tenant as the topic paths do."""
    authorize = authorizer(ServiceSettings(auth_jwt_secret=SECRET))  # type: ignore[call-arg]
    assert authorize is not None
    a = f"Bearer {issue(SECRET, subject='app-a', roles=['client'], tenants=['a'])}"
    service = f"Bearer {issue(SECRET, subject='svc', roles=['service'])}"
    refused = Denial(403, "forbidden", "token may not touch tenant 'b'")
    for path in ("/lookup/v2/topic/persistent/{}/n/x", "/lookup/v2/topic/persistent/{}/n/x-partition-3",
                 "/lookup/v2/topic/non-persistent/{}/n/x", "/lookup/v2/subscription/persistent/{}/n/x/s"):
        assert authorize("GET", path.format("b"), a) == refused, path
        assert authorize("GET", path.format("a"), a) == A, path
        assert isinstance(authorize("GET", path.format("b"), service), Principal), path
    # The coordinator lookup names no tenant: any client may ask it (the transaction id says where).
    assert authorize("GET", "/lookup/v2/coordinator/3", a) == A
