"""The demo's services, one process each or as replicas over one Redis (pure: no I/O).

``streamtx demo reshard`` normally runs one broker, one pending-ack store and one
coordinator. With ``replicas`` > 1 (``bench/recovery.py --replicas``, issue 25) it
runs that many of each, as ``tests/support/replicas.py`` lays them out: brokers
lease their partitions, pending-ack stores their subscription slots and
coordinators their ids over Redis (``STREAMTX_REDIS_URL``), each replica
advertises its own URL, and every caller is given the *first* replica's URL (as a
Kubernetes Service would give any one): the replicas redirect to each log's
owner. A kill of replica 0 therefore cuts the callers off until it is back, like a
single process; the others are the replicas a kill should not stall.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: The coordinator ids the replicas share (leased one replica each): more than replicas, so
#: a dead replica's ids are spread over the others.
COORDINATOR_IDS = tuple(range(6))


@dataclass(frozen=True)
class ServiceSpec:
    """One service process: its name (``broker`` or ``broker-1``), kind, URL and its own env."""

    name: str
    kind: str
    url: str
    env: dict[str, str]


def replica_name(kind: str, index: int, replicas: int) -> str:
    """``broker`` alone, ``broker-<index>`` among replicas."""
    return kind if replicas == 1 else f"{kind}-{index}"


def first_replica(name: str) -> bool:
    """Whether ``name`` is a single service or replica 0: the one every caller is given."""
    return re.search(r"-\d+$", name) is None or name.endswith("-0")


def service_specs(kinds: Sequence[str], replicas: int, port: Callable[[], int], *,
                  redis_url: str | None = None, lease_ttl_ms: int | None = None) -> list[ServiceSpec]:
    """Every service process, ``replicas`` of each kind in ``kinds`` (in that order), on ports
    drawn from ``port``. Replicas need ``redis_url``; ``lease_ttl_ms`` None keeps the services'
    default TTL."""
    if replicas < 1:
        raise ValueError(f"replicas must be at least 1, not {replicas}")
    if replicas > 1 and not redis_url:
        raise ValueError("replicas need a Redis URL (their leases)")
    specs = []
    for kind in kinds:
        for i in range(replicas):
            p = port()
            url = f"http://127.0.0.1:{p}"
            env = {"STREAMTX_HOST": "127.0.0.1", "STREAMTX_PORT": str(p)}
            if replicas > 1:
                assert redis_url is not None
                env.update({"STREAMTX_REDIS_URL": redis_url, "STREAMTX_ADVERTISED_URL": url,
                            "STREAMTX_MEMBER": f"{kind}{i}"})
                if lease_ttl_ms is not None:
                    env["STREAMTX_LEASE_TTL_MS"] = str(lease_ttl_ms)
                if kind == "coordinator":
                    env["STREAMTX_COORDINATOR_IDS"] = ",".join(map(str, COORDINATOR_IDS))
            specs.append(ServiceSpec(replica_name(kind, i, replicas), kind, url, env))
    return specs


def front_urls(specs: Sequence[ServiceSpec]) -> dict[str, str]:
    """Per kind, the URL every caller is given: its first replica's."""
    urls: dict[str, str] = {}
    for s in specs:
        urls.setdefault(s.kind, s.url)
    return urls
