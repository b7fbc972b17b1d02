"""What every leased service needs to run as replicas: its settings and its ownership loop.

A service whose logs are leased (the coordinator's ids, the pending-ack store's
subscription slots, the broker's topics) subclasses :class:`ReplicaSettings` and builds its loop with
:func:`replica_ownership`; the callbacks say what taking and giving up an item
means for it (open its ledgers as writer and replay; flush and close).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable

from pydantic import Field

from streamtx.ownership.lease import LeaseStore
from streamtx.ownership.manager import Items, OnAcquire, OnRelease, Ownership
from streamtx.service import ServiceSettings

__all__ = ["ReplicaSettings", "replica_ownership"]


class ReplicaSettings(ServiceSettings):
    """Settings of a service whose logs are leased over its live replicas (``STREAMTX_REDIS_URL``)."""

    redis_url: str = Field("", description="Redis for the ownership leases; empty: no replicas")
    lease_ttl_ms: int = Field(5000, ge=300, description="a dead replica's logs move after this long")
    advertised_url: str = Field("", description="this replica's URL for redirects (http://host:port)")
    member: str = Field("", description="this replica's name in the membership (hostname-pid)")

    def own_url(self) -> str:
        """The URL other replicas redirect this replica's callers to."""
        return self.advertised_url or f"http://{self.host}:{self.port}"

    def member_name(self) -> str:
        return self.member or f"{socket.gethostname()}-{os.getpid()}"


def replica_ownership(settings: ReplicaSettings, service: str, items: Items, *,
                      on_acquire: OnAcquire, on_release: OnRelease,
                      after_balance: Callable[[], Awaitable[None]] | None = None) -> Ownership:
    """The (not started) ownership loop of this replica of ``service`` over ``items``."""
    leases = LeaseStore.from_url(settings.redis_url, cluster=settings.cluster, service=service)
    return Ownership(leases, member=settings.member_name(), url=settings.own_url(), items=items,
                     ttl_ms=settings.lease_ttl_ms, on_acquire=on_acquire, on_release=on_release,
                     after_balance=after_balance)
