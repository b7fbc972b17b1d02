"""Bearer-token auth of a service: who the caller is (static tokens, JWTs) and the path rule.

The rule itself is :mod:`streamtx.auth.policy`; this module reads the
settings, verifies tokens and caches them. One check serves both HTTP stacks:
the fast lane (:mod:`streamtx.service.fastlane`) calls it for every request and
leaves the caller's :class:`~streamtx.auth.Principal` in the ASGI scope, where
routes find it with :func:`principal_of` for the checks only they can make
(a transaction's owner, the tenants named in a body).
"""

from __future__ import annotations

import hmac
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Annotated, Any

from fastapi import Depends, Request

from streamtx.auth.policy import MISSING, Denial, Need, check, rule_of
from streamtx.auth.tokens import Principal, TokenError, TokenVerifier
from streamtx.errors import ForbiddenError
from streamtx.service.settings import ServiceSettings

#: The ASGI scope key holding the caller's principal (absent when auth is off or the path is open).
PRINCIPAL = "streamtx.principal"

#: ``(method, path, Authorization header) -> principal`` (None for an open path), or why not.
Authorize = Callable[[str, str, str], Principal | Denial | None]

_ALL = None  # Principal.tenants for "every tenant"


class Authenticator:
    """Who a bearer token stands for: a static token (constant-time compare) or a verified JWT.

    Verified JWTs are cached (LRU keyed by the token string, each entry until
    the token expires or ``ttl_s`` passes), so the hot path pays a signature
    check once per token, not once per request.
    """

    def __init__(self, static: Iterable[tuple[str, Principal]], verifier: TokenVerifier | None, *,
                 cache_size: int = 10_000, ttl_s: float = 300.0) -> None:
        self._static = [(token.encode(), p) for token, p in static]
        self._verifier = verifier
        self._cache: OrderedDict[str, tuple[Principal, float]] = OrderedDict()
        self._cache_size = cache_size
        self._ttl_s = ttl_s

    def principal(self, token: str) -> Principal | None:
        """The token's principal, or None when it is not valid here."""
        raw = token.encode()
        found: Principal | None = None
        for known, p in self._static:  # every one compared, each in constant time
            if hmac.compare_digest(raw, known):
                found = p
        if found is not None or self._verifier is None:
            return found
        now = time.time()
        cached = self._cache.get(token)
        if cached is not None:
            if cached[1] > now:
                self._cache.move_to_end(token)
                return cached[0]
            del self._cache[token]
        try:
            principal, exp = self._verifier.verify(token)
        except TokenError:
            return None
        if self._cache_size:
            until = now + self._ttl_s if exp is None else min(exp, now + self._ttl_s)
            self._cache[token] = (principal, until)
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return principal


def authenticator(settings: ServiceSettings) -> Authenticator | None:
    """The service's authenticator, or None when no credential is configured (auth off)."""
    static = [
        (settings.admin_token, Principal("admin", frozenset({"admin"}), _ALL)),
        (settings.service_token, Principal("service", frozenset({"service"}), _ALL)),
        (settings.client_token, Principal("client", frozenset({"client"}), _ALL)),
    ]
    verifier = None
    if settings.auth_jwt_secret:
        verifier = TokenVerifier(settings.auth_jwt_secret, "HS256")
    elif settings.auth_jwt_public_key or settings.auth_jwt_public_key_file:
        key = settings.auth_jwt_public_key or settings.auth_jwt_public_key_file.read_text()  # type: ignore[union-attr]
        verifier = TokenVerifier(key, "RS256")
    tokens = [(t, p) for t, p in static if t]
    if not tokens and verifier is None:
        return None
    return Authenticator(tokens, verifier, cache_size=settings.auth_token_cache_size,
                         ttl_s=settings.auth_token_cache_ttl_s)


def authorizer(settings: ServiceSettings) -> Authorize | None:
    """The service's auth check, or None when auth is off (everything allowed)."""
    auth = authenticator(settings)
    if auth is None:
        return None

    def authorize(method: str, path: str, header: str) -> Principal | Denial | None:
        need, tenant = rule_of(method, path)
        if need is Need.NOTHING:
            return None
        if header[:7].lower() != "bearer ":
            return MISSING
        principal = auth.principal(header[7:].strip())
        if principal is None:
            return Denial(401, "unauthorized", "invalid or expired token")
        return check(principal, need, tenant) or principal

    return authorize


def principal_in(scope: Any) -> Principal | None:
    """The caller of a request (None when auth is off)."""
    p: Principal | None = scope.get(PRINCIPAL)
    return p


async def principal_of(request: Request) -> Principal | None:
    return principal_in(request.scope)


PrincipalDep = Annotated[Principal | None, Depends(principal_of)]


def check_tenants(principal: Principal | None, tenants: Iterable[str]) -> None:
    """403 unless the caller may touch every tenant named (in a body: the path rule cannot see it)."""
    if principal is None:
        return
    for tenant in tenants:
        if not principal.may_touch(tenant):
            raise ForbiddenError(f"token may not touch tenant {tenant!r}")
