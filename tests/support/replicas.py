"""Brokers, pending-ack stores and coordinators as processes, the leased ones over one Redis.

    with Replicas(kafka_url, redis_url, log_dir, coordinators=3, pendingacks=2) as r:
        ... r.tcs[1].kill9(); r.pendingacks[1].proc.send_signal(signal.SIGSTOP) ...

Coordinators always lease their ids; brokers lease their partitions and pending-ack
stores their subscription slots when there are several (one runs alone, unleased). Every
caller is given the *first* replica's URL (as a Kubernetes Service would give
any): the replicas redirect to the owner, so tests kill or pause the others.
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import httpx

from tests.support.services import ServiceProcess

COORDINATOR_IDS = list(range(6))


class Replicas:
    """``brokers`` brokers, ``pendingacks`` pending-ack stores and ``coordinators`` coordinators."""

    def __init__(self, ledger_url: str, redis_url: str, log_dir: Path, *, coordinators: int = 3,
                 pendingacks: int = 1, brokers: int = 1, ttl_ms: int = 1500,
                 env: dict[str, str] | None = None) -> None:
        self.cluster = f"r{uuid.uuid4().hex[:6]}"
        self.ledger_url = ledger_url
        common = {"STREAMTX_LEDGER_URL": ledger_url, "STREAMTX_TEST_LOG_DIR": str(log_dir),
                  "STREAMTX_CLUSTER": self.cluster, **(env or {})}
        leased = {"STREAMTX_REDIS_URL": redis_url, "STREAMTX_LEASE_TTL_MS": str(ttl_ms)}
        self.brokers = [ServiceProcess("broker", {**common, **(leased if brokers > 1 else {})})
                        for _ in range(brokers)]
        self.broker = self.brokers[0]
        self.pendingacks = [ServiceProcess("pendingack", {**common, **(leased if pendingacks > 1 else {})})
                            for _ in range(pendingacks)]
        self.tcs = [ServiceProcess("coordinator", {
            **common, **leased, "STREAMTX_COORDINATOR_IDS": ",".join(map(str, COORDINATOR_IDS)),
        }) for _ in range(coordinators)]
        for kind, procs in (("broker", self.brokers), ("pa", self.pendingacks), ("tc", self.tcs)):
            for i, p in enumerate(procs):
                p.env.update({"STREAMTX_ADVERTISED_URL": p.url, "STREAMTX_MEMBER": f"{kind}{i}"})
        urls = {"STREAMTX_BROKER_URL": self.broker.url, "STREAMTX_PENDINGACK_URL": self.pendingacks[0].url}
        for p in self.procs:
            p.env.update(urls)
        # The participants' stuck-transaction checkers ask the first coordinator (it redirects).
        for p in [*self.brokers, *self.pendingacks]:
            p.env["STREAMTX_COORDINATOR_URL"] = self.tcs[0].url

    @property
    def procs(self) -> list[ServiceProcess]:
        """Participants first: the coordinators recover into them."""
        return [*self.brokers, *self.pendingacks, *self.tcs]

    def start(self) -> Replicas:
        try:
            for p in self.procs:
                p.start(60)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.proc is not None:
                p.proc.send_signal(signal.SIGCONT)  # a test that failed while one was paused
            p.stop()

    def __enter__(self) -> Replicas:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def lookup(http: httpx.AsyncClient, via: str, path: str) -> str | None:
    """The owner a replica's lookup (``/lookup/v2/<path>``) answers."""
    r = await http.get(f"{via}/lookup/v2/{path}")
    assert r.status_code == 200, r.text
    owner: str | None = r.json()["owner"]
    return owner
