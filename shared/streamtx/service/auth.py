"""Bearer tokens: admin paths need the admin token, the others the client token."""

from __future__ import annotations

from collections.abc import Callable

from streamtx.service.settings import ServiceSettings

#: Paths anyone may call: probes, metrics, docs, discovery.
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/v1/cluster"})

#: ``(path, Authorization header) -> None`` when allowed, else ``(status, code, message)``.
Authorize = Callable[[str, str], tuple[int, str, str] | None]


def authorizer(settings: ServiceSettings) -> Authorize | None:
    """The service's token rule, or None when no token is configured (everything allowed)."""
    if not settings.admin_token and not settings.client_token:
        return None

    def authorize(path: str, header: str) -> tuple[int, str, str] | None:
        if path in OPEN_PATHS:
            return None
        token = header[7:] if header.lower().startswith("bearer ") else None
        needed = settings.admin_token if path.startswith("/admin/") else settings.client_token
        allowed = {t for t in (needed, settings.admin_token) if t}
        if not allowed:
            return None
        if token is None:
            return 401, "unauthorized", "missing bearer token"
        if token not in allowed:
            return 403, "forbidden", "token not allowed here"
        return None

    return authorize
