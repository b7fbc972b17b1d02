"""Auth: the path rule, JWT verification (HS256, RS256), the token cache, `streamtx-admin token create`."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from streamtx.auth import Denial, Principal, TokenError, TokenVerifier, issue
from streamtx.auth.policy import Need, check, rule_of
from streamtx.auth.tokens import EXPIRY_LEEWAY_S
from streamtx.client import admin_cli
from streamtx.service.auth import Authenticator, authorizer
from streamtx.service.settings import ServiceSettings

SECRET = "0123456789abcdef0123456789abcdef-test"


def settings(**kw: object) -> ServiceSettings:
    return ServiceSettings(**kw)  # type: ignore[arg-type]


def bearer(token: str) -> str:
    return f"Bearer {token}"


def test_internal_paths_need_the_service_credential() -> None:
    authorize = authorizer(settings(client_token="c" * 8, admin_token="a" * 8, service_token="s" * 8))
    assert authorize is not None
    for path in ("/v1/txn/partitions/end", "/v1/txn/subscriptions/end", "/v1/txn/subscriptions/prepare",
                 "/v1/pendingack/acks", "/v1/pendingack/held"):
        assert authorize("POST", path, bearer("c" * 8)) == Denial(403, "forbidden",
                                                           "needs a service token (internal endpoint)")
        assert isinstance(authorize("POST", path, bearer("s" * 8)), Principal)
        assert isinstance(authorize("POST", path, bearer("a" * 8)), Principal)
        assert authorize("POST", path, "")[0] == 401  # type: ignore[index]
    # A client still produces; only admins administer.
    assert isinstance(authorize("POST", "/v1/topics/t/n/x/messages", bearer("c" * 8)), Principal)
    assert authorize("POST", "/admin/v2/persistent/t/n/x/partitions", bearer("s" * 8))[0] == 403  # type: ignore[index]


def test_the_path_rule() -> None:
    assert rule_of("POST", "/healthz") == (Need.NOTHING, None)
    assert rule_of("POST", "/v1/topics/acme/ns/x/subscriptions/s/acks") == (Need.CLIENT, "acme")
    assert rule_of("POST", "/v1/transactions/1:2/commit") == (Need.CLIENT, None)
    assert rule_of("POST", "/admin/v3/transactions/coordinatorStats") == (Need.ADMIN, None)
    assert rule_of("PUT", "/admin/v2/persistent/acme/n/x/partitions") == (Need.ADMIN, None)
    assert rule_of("GET", "/admin/v2/persistent/acme/n/x/partitions") == (Need.CLIENT, "acme")
    assert rule_of("GET", "/admin/v2/persistent/acme/n/x/stats") == (Need.ADMIN, None)
    client_a = Principal("app", frozenset({"client"}), frozenset({"a"}))
    assert check(client_a, Need.CLIENT, "a") is None
    assert check(client_a, Need.CLIENT, "b") == Denial(403, "forbidden", "token may not touch tenant 'b'")
    nobody = Principal("x", frozenset(), None)
    assert check(nobody, Need.CLIENT, None)[0] == 403  # type: ignore[index]
    assert check(nobody, Need.NOTHING, None) is None


def test_hs256_tokens_carry_subject_roles_and_tenants() -> None:
    token = issue(SECRET, subject="app1", roles=["client"], tenants=["a", "b"], expires_in_s=60)
    principal, exp = TokenVerifier(SECRET, "HS256").verify(token)
    assert principal == Principal("app1", frozenset({"client"}), frozenset({"a", "b"}))
    assert exp is not None and exp > time.time()
    every = issue(SECRET, subject="ops", roles=["client"], tenants=["*"])
    assert TokenVerifier(SECRET, "HS256").verify(every)[0].tenants is None


@pytest.mark.parametrize("forged", ["wrong-secret", "expired", "alg-none", "bad-roles", "garbage"])
def test_bad_tokens_are_refused(forged: str) -> None:
    now = time.time()
    token = {
        "wrong-secret": lambda: issue("x" * 40, subject="a", roles=["admin"]),
        "expired": lambda: issue(SECRET, subject="a", roles=["admin"], expires_in_s=10, now=now - 100),
        "alg-none": lambda: jwt.encode({"sub": "a", "roles": ["admin"]}, None, algorithm="none"),
        "bad-roles": lambda: jwt.encode({"sub": "a", "roles": ["root"]}, SECRET, algorithm="HS256"),
        "garbage": lambda: "not.a.token",
    }[forged]()
    with pytest.raises(TokenError):
        TokenVerifier(SECRET, "HS256").verify(token)
    authorize = authorizer(settings(auth_jwt_secret=SECRET))
    assert authorize is not None
    assert authorize("POST", "/v1/transactions", bearer(token)) == Denial(401, "unauthorized",
                                                                  "invalid or expired token")


def test_rs256_verifies_with_the_public_key_only(tmp_path: object) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    token = issue(private, subject="svc", roles=["service"], algorithm="RS256")
    authorize = authorizer(settings(auth_jwt_public_key=public))
    assert authorize is not None
    assert authorize("POST", "/v1/txn/partitions/end", bearer(token)) == Principal(
        "svc", frozenset({"service"}), frozenset())
    # An HS256 token signed with the public key's text must not pass (algorithm confusion).
    confused = hs256_by_hand({"sub": "x", "roles": ["admin"]}, public.encode())
    assert authorize("POST", "/admin/v3/transactions/coordinatorStats", bearer(confused))[0] == 401  # type: ignore[index]


def hs256_by_hand(claims: dict[str, object], key: bytes) -> str:
    """An HS256 JWT signed with any bytes (PyJWT itself refuses a PEM key as an HMAC secret)."""
    def b64(raw: bytes) -> bytes:
        return base64.urlsafe_b64encode(raw).rstrip(b"=")
    signing = b64(b'{"alg":"HS256","typ":"JWT"}') + b"." + b64(json.dumps(claims).encode())
    return (signing + b"." + b64(hmac.new(key, signing, hashlib.sha256).digest())).decode()


class CountingVerifier(TokenVerifier):
    calls = 0

    def verify(self, token: str) -> tuple[Principal, float | None]:
        self.calls += 1
        return super().verify(token)


def test_verified_tokens_are_cached_until_they_expire() -> None:
    verifier = CountingVerifier(SECRET, "HS256")
    auth = Authenticator([], verifier, cache_size=2, ttl_s=300)
    short = issue(SECRET, subject="a", roles=["client"], expires_in_s=2)
    for _ in range(100):
        assert auth.principal(short) is not None
    assert verifier.calls == 1
    others = [issue(SECRET, subject=f"s{i}", roles=["client"]) for i in range(3)]
    for t in others:
        auth.principal(t)
    assert verifier.calls == 4
    auth.principal(short)  # evicted (LRU of 2): verified again
    assert verifier.calls == 5
    # Once it expires the cache no longer vouches for it (the verifier refuses it, with its leeway).
    auth._cache[short] = (auth._cache[short][0], time.time() - 1)
    assert auth.principal(short) is not None and verifier.calls == 6


def test_static_tokens_and_settings_checks() -> None:
    auth = authorizer(settings(admin_token="adm-token", client_token="cli-token"))
    assert auth is not None
    assert auth("POST", "/admin/v3/transactions/coordinatorStats", bearer("adm-token")) == Principal(
        "admin", frozenset({"admin"}), None)
    assert auth("POST", "/v1/txn/partitions/end", bearer("cli-token"))[0] == 403  # type: ignore[index]
    assert auth("POST", "/healthz", "") is None
    assert authorizer(settings()) is None  # make run: auth off
    with pytest.raises(ValueError, match="32 bytes"):
        settings(auth_jwt_secret="short")
    with pytest.raises(ValueError, match="one of"):
        settings(auth_jwt_secret=SECRET, auth_jwt_public_key="pem")


async def test_admin_cli_issues_tokens(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STREAMTX_AUTH_JWT_SECRET", SECRET)
    code = await admin_cli.run(["token", "create", "--subject", "app1", "--role", "client",
                                "--tenant", "a", "--expires-in-s", "3600"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    principal, exp = TokenVerifier(SECRET, "HS256").verify(out["token"])
    assert principal == Principal("app1", frozenset({"client"}), frozenset({"a"}))
    assert exp is not None and 3500 < exp - time.time() <= 3600
    monkeypatch.delenv("STREAMTX_AUTH_JWT_SECRET")
    assert await admin_cli.run(["token", "create", "--subject", "x", "--role", "admin"]) == 1


async def test_a_client_token_without_a_tenant_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was made, and reached no tenant: every call of its holder a 403."""
    monkeypatch.setenv("STREAMTX_AUTH_JWT_SECRET", SECRET)
    assert await admin_cli.run(["token", "create", "--subject", "app1", "--role", "client"]) == 1
    out = capsys.readouterr()
    assert out.out == "" and "needs --tenant" in json.loads(out.err)["message"]
    assert await admin_cli.run(["token", "create", "--subject", "ops", "--role", "admin"]) == 0  # no tenant


def test_an_expired_token_is_accepted_for_the_documented_leeway_only() -> None:
    now = time.time()
    verifier = TokenVerifier(SECRET, "HS256")
    assert EXPIRY_LEEWAY_S == 5.0  # docs/security.md
    verifier.verify(issue(SECRET, subject="a", roles=["client"], expires_in_s=-3, now=now))
    with pytest.raises(TokenError, match="expired"):
        verifier.verify(issue(SECRET, subject="a", roles=["client"], expires_in_s=-8, now=now))
