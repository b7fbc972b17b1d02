"""Clients of the other clusters' brokers, found through each peer's ``/v1/cluster``."""

from __future__ import annotations

import logging

import httpx

from streamtx.errors import ConflictError, MalformedError, UnavailableError
from streamtx.transport import HttpClient, RetryPolicy

log = logging.getLogger(__name__)


async def discover(service_url: str, *, timeout_s: float) -> tuple[str, str]:
    """``(cluster name, broker URL)`` a service of a cluster advertises.

    Asked with no credential (``/v1/cluster`` is open to anyone): the URL is whatever an admin
    registered, and the service token goes only to a broker of the cluster the name says."""
    client = HttpClient(service_url, timeout_s=timeout_s, retry=RetryPolicy(attempts=2))
    try:
        body = await client.request("GET", "/v1/cluster")
    except httpx.InvalidURL as exc:  # not an httpx.HTTPError: it was a 500 (fuzzer)
        raise MalformedError(f"service_url {service_url!r}: {exc}") from None
    finally:
        await client.aclose()
    broker = (body.get("services") or {}).get("broker") or service_url
    return str(body.get("cluster")), str(broker).rstrip("/")


class Peers:
    """One broker client per remote cluster, made on first use (a peer may be down at start)."""

    def __init__(self, *, timeout_s: float, token: str | None) -> None:
        self.timeout_s = timeout_s
        self.token = token
        self._clients: dict[str, tuple[str, HttpClient]] = {}  # name -> (service_url, client)

    async def check(self, name: str, service_url: str) -> str | None:
        """The broker URL of ``service_url`` if it answers; 409 if it is another cluster."""
        try:
            cluster, broker = await discover(service_url, timeout_s=self.timeout_s)
        except UnavailableError as exc:
            log.warning("cluster %s at %s does not answer yet: %s", name, service_url, exc)
            return None
        if cluster != name:
            raise ConflictError(f"{service_url} is cluster {cluster!r}, not {name!r}")
        return broker

    async def broker(self, name: str, service_url: str) -> HttpClient:
        """The remote cluster's broker client (503 while it cannot be discovered)."""
        got = self._clients.get(name)
        if got is not None and got[0] == service_url:
            return got[1]
        cluster, broker = await discover(service_url, timeout_s=self.timeout_s)
        if cluster != name:
            raise UnavailableError(f"{service_url} answers as cluster {cluster!r}, not {name!r}")
        client = HttpClient(broker, timeout_s=self.timeout_s, retry=RetryPolicy(attempts=2), token=self.token)
        if got is not None:
            await got[1].aclose()
        self._clients[name] = (service_url, client)
        return client

    async def aclose(self) -> None:
        for _, client in self._clients.values():
            await client.aclose()
        self._clients.clear()
