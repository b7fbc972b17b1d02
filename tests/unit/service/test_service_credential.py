"""Auth on from one setting (issue 37 item 1): the services' own credential, and the secrets refused."""

from __future__ import annotations

import asyncio

import pytest

from streamtx.auth import TokenVerifier, issue
from streamtx.client.admin_cli import run as admin
from streamtx.service.settings import ServiceSettings

SECRET = "credential-secret-credential-secret-0"


def settings(**kw: object) -> ServiceSettings:
    return ServiceSettings(**kw)  # type: ignore[arg-type]


def test_the_secret_alone_gives_a_service_credential_its_peers_accept() -> None:
    token = settings(auth_jwt_secret=SECRET).outgoing_token()
    assert token is not None
    principal, expires = TokenVerifier(SECRET, "HS256").verify(token)
    assert principal.roles == {"service"} and principal.tenants is None and expires is None
    assert settings(auth_jwt_secret=SECRET).peer_credential_problem() is None


def test_an_explicit_credential_wins_over_the_derived_one() -> None:
    assert settings(auth_jwt_secret=SECRET, service_token="mine").outgoing_token() == "mine"
    assert settings(auth_jwt_secret=SECRET, admin_token="adm").outgoing_token() == "adm"
    assert settings().outgoing_token() is None  # auth off: nothing sent


@pytest.mark.parametrize("kw", [{"auth_jwt_public_key": "pem"}, {"client_token": "c" * 40}])
def test_auth_on_with_no_credential_for_the_peers_is_named(kw: dict[str, str]) -> None:
    problem = settings(**kw).peer_credential_problem()
    assert problem is not None and "set STREAMTX_SERVICE_TOKEN" in problem


def test_a_short_secret_is_refused_everywhere(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="5 bytes; an HS256 secret needs at least 32"):
        settings(auth_jwt_secret="12345")
    with pytest.raises(ValueError, match="at least 32"):
        issue("12345", subject="a", roles=["admin"])
    monkeypatch.setenv("STREAMTX_AUTH_JWT_SECRET", "12345")  # PyJWT only warned; tokens were issued
    assert asyncio.run(admin(["token", "create", "--subject", "a", "--role", "admin"])) != 0
    assert "STREAMTX_AUTH_JWT_SECRET is 5 bytes" in capsys.readouterr().err
