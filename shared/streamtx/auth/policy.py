"""The one rule of who may call which path (every service, both HTTP stacks). Pure.

==========================================  ==========================================
path                                        who may call it
==========================================  ==========================================
``/healthz /readyz /metrics /v1/cluster``   anyone, no token (probes, scrapers, discovery)
``/openapi.json /docs /redoc``
``GET /admin/v2/persistent/{tenant}/...``    client of that tenant (the partition-count lookup
``/partitions``                             every producer makes, as in Pulsar); service; admin
``/admin/...``                              admin
``/v1/txn/...``, ``/v1/pendingack/...``,    service or admin: the calls between services
``/v1/replication/...``                     (end, prepare, transactional acks, geo-replication)
``/v1/topics/{tenant}/...``                 client of that tenant; service; admin
``/lookup/v2/topic/{domain}/{tenant}/...``  client of that tenant (which broker serves a
``/lookup/v2/subscription/{domain}/...``    partition, and by its 404s which topics exist); service; admin
any other path (``/v1/transactions...``,    client, service, admin
``/lookup/v2/coordinator/...``)
==========================================  ==========================================

Which *transaction* a client may touch is the coordinator's check (it knows
the owner): see :func:`streamtx.service.auth.check_txn_owner`.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from streamtx.auth.tokens import Principal
from streamtx.errors import ForbiddenError

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/v1/cluster",
                        "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
_internal = ("/v1/txn/", "/v1/pendingack/", "/v1/replication/")
_topics = "/v1/topics/"
_lookup = "/admin/v2/persistent/"
# The lookups that name a topic: ``{prefix}{domain}/{tenant}/...``. They tell which topics a tenant
# has and how many partitions each (a 404 past the last), so they need what the topic paths need.
_topic_lookups = ("/lookup/v2/topic/", "/lookup/v2/subscription/")


class Need(enum.Enum):
    """What a path needs."""

    NOTHING = "nothing"
    CLIENT = "client"
    SERVICE = "service"
    ADMIN = "admin"


class Denial(NamedTuple):
    """Why a request is refused: HTTP status, API error code, message."""

    status: int
    code: str
    message: str


MISSING = Denial(401, "unauthorized", "missing bearer token")


def rule_of(method: str, path: str) -> tuple[Need, str | None]:
    """What ``method path`` needs, and the tenant it touches (None when it names none)."""
    if path in OPEN_PATHS:
        return Need.NOTHING, None
    if path.startswith("/admin/"):
        if method == "GET" and path.startswith(_lookup) and path.endswith("/partitions"):
            return Need.CLIENT, path[len(_lookup):].split("/", 1)[0]
        return Need.ADMIN, None
    if path.startswith(_internal):
        return Need.SERVICE, None
    if path.startswith(_topics):
        tenant = path[len(_topics):].split("/", 1)[0]
        return Need.CLIENT, tenant
    for prefix in _topic_lookups:
        if path.startswith(prefix):
            # "" when the path stops short of a tenant: no token may touch tenant "" (the
            # route then answers 404), rather than a path that names no tenant passing as one.
            parts = path[len(prefix):].split("/", 2)
            return Need.CLIENT, parts[1] if len(parts) > 1 else ""
    return Need.CLIENT, None


def check(principal: Principal, need: Need, tenant: str | None) -> Denial | None:
    """None when ``principal`` may do what ``need`` asks on ``tenant``; else the 403."""
    roles = principal.roles
    if "admin" in roles or need is Need.NOTHING:
        return None
    if need is Need.ADMIN:
        return Denial(403, "forbidden", "needs an admin token")
    if "service" in roles:
        return None
    if need is Need.SERVICE:
        return Denial(403, "forbidden", "needs a service token (internal endpoint)")
    if "client" not in roles:
        return Denial(403, "forbidden", "needs a client token")
    if tenant is not None and not principal.may_touch(tenant):
        return Denial(403, "forbidden", f"token may not touch tenant {tenant!r}")
    return None


def check_owner(principal: Principal | None, owner: str, what: str) -> None:
    """403 unless the caller owns ``what`` (its owner's subject) or is a service or an admin."""
    if principal is None or principal.trusted or (owner and owner == principal.subject):
        return
    raise ForbiddenError(f"{what} belongs to another client")
