"""Signed bearer tokens (JWT, PyJWT) and the principal they stand for.

A token's claims::

    sub       the caller's name (a transaction's owner is the subject that opened it)
    roles     ["client"] | ["service"] | ["admin"] (any combination)
    tenants   the tenants a client may touch, ["*"] for all (absent: none)
    exp, iat  expiry and issue time, seconds since the epoch (exp optional)

HS256 with a shared secret, or RS256: signed with a private key, verified with
the public key (services then hold nothing that can issue tokens).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

ROLES = ("client", "service", "admin")
ALL_TENANTS = "*"


class TokenError(ValueError):
    """The token is not one this service accepts (bad signature, expired, bad claims)."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request comes from: subject, roles, and the tenants it may touch (None: every tenant)."""

    subject: str
    roles: frozenset[str]
    tenants: frozenset[str] | None

    @property
    def trusted(self) -> bool:
        """A service or an admin: acts on behalf of any client, on any tenant."""
        return "admin" in self.roles or "service" in self.roles

    def may_touch(self, tenant: str) -> bool:
        return self.trusted or self.tenants is None or tenant in self.tenants


def principal_from_claims(claims: dict[str, Any]) -> Principal:
    """The principal of verified claims (TokenError when they are not what we issue)."""
    sub, roles, tenants = claims.get("sub"), claims.get("roles"), claims.get("tenants", [])
    if not isinstance(sub, str) or not sub:
        raise TokenError("token has no subject")
    if not isinstance(roles, list) or not all(isinstance(r, str) and r in ROLES for r in roles):
        raise TokenError(f"token roles must be a list of {', '.join(ROLES)}")
    if not isinstance(tenants, list) or not all(isinstance(t, str) for t in tenants):
        raise TokenError("token tenants must be a list of names")
    return Principal(sub, frozenset(roles), None if ALL_TENANTS in tenants else frozenset(tenants))


#: How long past its ``exp`` a token is still accepted: the issuer's clock and a service's
#: may differ by this much (docs/security.md).
EXPIRY_LEEWAY_S = 5.0


class TokenVerifier:
    """Checks a token's signature and expiry with one key: an HS256 secret or an RS256 public key."""

    def __init__(self, key: str, algorithm: str, *, leeway_s: float = EXPIRY_LEEWAY_S) -> None:
        if algorithm not in ("HS256", "RS256"):
            raise ValueError(f"unsupported algorithm {algorithm}")
        # PyJWT (and the cryptography package under it) is imported when a verifier is made, not
        # with the services: with auth off it is never needed, and it was a tenth of a second of
        # every restart's imports under load (issue 25).
        import jwt

        self._jwt = jwt
        self._key = key
        # One algorithm, never the token's own choice: that is what "alg confusion" attacks abuse.
        self._algorithms = [algorithm]
        self._leeway_s = leeway_s

    def verify(self, token: str) -> tuple[Principal, float | None]:
        """The token's principal and expiry (wall-clock seconds, None when it never expires)."""
        try:
            claims = self._jwt.decode(token, self._key, algorithms=self._algorithms, leeway=self._leeway_s,
                                      options={"require": ["sub"]})
        except self._jwt.PyJWTError as exc:
            raise TokenError(str(exc) or type(exc).__name__) from None
        exp = claims.get("exp")
        return principal_from_claims(claims), float(exp) if isinstance(exp, int | float) else None


def issue(
    key: str, *, subject: str, roles: Iterable[str], tenants: Iterable[str] = (),
    expires_in_s: float | None = None, algorithm: str = "HS256", now: float | None = None,
) -> str:
    """A signed token (``key``: the HS256 secret, or the RS256 private key in PEM)."""
    import jwt
    roles = list(dict.fromkeys(roles))
    if not roles or any(r not in ROLES for r in roles):
        raise ValueError(f"roles must be some of {', '.join(ROLES)}")
    if not subject:
        raise ValueError("a token needs a subject")
    issued = int(now if now is not None else time.time())
    claims: dict[str, Any] = {"sub": subject, "roles": roles, "tenants": list(dict.fromkeys(tenants)),
                              "iat": issued}
    if expires_in_s is not None:
        claims["exp"] = issued + int(expires_in_s)
    return jwt.encode(claims, key, algorithm=algorithm)
