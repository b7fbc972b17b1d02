"""The SDK's entry point: :class:`StreamtxClient`, built from any one service's URL."""

from __future__ import annotations

import uuid
from types import TracebackType
from typing import Any

import httpx

from streamtx.client.consumer import Consumer
from streamtx.client.http import Endpoint
from streamtx.client.names import full_name, partition_name, path_of
from streamtx.client.producer import Producer
from streamtx.client.transaction import Transaction, TransactionScope
from streamtx.errors import NotFoundError, UnavailableError
from streamtx.transport.redirect import OwnerCache


class StreamtxClient:
    """An async client of a streamtx cluster.

    ``url`` is any service's base URL: the client asks it for ``/v1/cluster``
    and talks to each service at the URL advertised there (a service not
    advertised is assumed to answer at ``url`` itself). Use it as ``async with
    StreamtxClient(url) as client`` or call :meth:`connect` and :meth:`close`.

    ``binary`` (the default): produce, fetch and acks in the binary batch format
    (``application/x-streamtx-batch``, docs/api.md); False keeps them JSON.
    """

    def __init__(
        self, url: str, *, token: str | None = None, timeout_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None, binary: bool = True,
    ) -> None:
        self.binary = binary
        self.url = url.rstrip("/")
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(
            timeout=timeout_s, headers=headers, transport=transport,
            limits=httpx.Limits(max_connections=200, max_keepalive_connections=100),
        )
        self.cluster: str | None = None
        self.services: dict[str, str] = {}
        # Broker replicas own topics: where each topic path was redirected, so the next call
        # goes straight to its owner (streamtx.transport.redirect).
        self._broker_owners = OwnerCache()

    async def __aenter__(self) -> StreamtxClient:
        await self.connect()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def connect(self) -> None:
        """Discover the services through ``GET /v1/cluster``."""
        body = await Endpoint(self._http, self.url).call("GET", "/v1/cluster")
        self.cluster = body.get("cluster")
        self.services = {str(k): str(v).rstrip("/") for k, v in (body.get("services") or {}).items()}

    async def close(self) -> None:
        await self._http.aclose()

    def endpoint(self, service: str) -> Endpoint:
        """Calls to ``service`` ("coordinator", "broker", "pendingack", "replication")."""
        owners = self._broker_owners if service == "broker" else None
        return Endpoint(self._http, self.services.get(service, self.url), owners=owners)

    @property
    def coordinator(self) -> Endpoint:
        return self.endpoint("coordinator")

    @property
    def broker(self) -> Endpoint:
        return self.endpoint("broker")

    # --- data ------------------------------------------------------------------

    async def partitions(self, topic: str) -> int:
        """How many partitions ``topic`` has (admin v2)."""
        body = await self.broker.call("GET", f"/admin/v2/persistent/{path_of(topic)}/partitions")
        return int(body["partitions"])

    async def create_topic(self, topic: str, partitions: int) -> None:
        """Create a partitioned topic with ``partitions`` partitions."""
        await self.broker.call("PUT", f"/admin/v2/persistent/{path_of(topic)}/partitions",
                               json={"partitions": partitions})

    async def producer(self, topic: str, name: str | None = None, *, epoch: int | None = None) -> Producer:
        """A producer of ``topic``; named, it sends with an epoch and sequences (dedup, fencing)."""
        try:
            partitions = await self.partitions(topic)
        except NotFoundError:
            raise NotFoundError(f"topic {full_name(topic)} does not exist") from None
        if partitions < 1:
            raise UnavailableError(f"topic {full_name(topic)} reports {partitions} partitions")
        return Producer(self.broker, topic, partitions, name=name, epoch=epoch, binary=self.binary)

    async def consumer(
        self, topic: str, subscription: str, initial_position: str = "latest", type: str = "Shared",
        *, name: str | None = None,
    ) -> Consumer:
        """A consumer of ``subscription`` (created if new: ``earliest``/``latest``,
        Shared/Exclusive/Failover)."""
        path = f"/v1/topics/{path_of(topic)}/subscriptions/{subscription}"
        await self.broker.call("PUT", path, json={"initial_position": initial_position, "type": type})
        partitions = await self.partitions(topic)

        async def is_spread() -> bool:
            return len(await self._owners(topic, partitions)) > 1

        return Consumer(self.broker, topic, subscription, name or f"c-{uuid.uuid4().hex[:12]}",
                        binary=self.binary, partitions=partitions,
                        spread=partitions > 1 and await is_spread(), is_spread=is_spread)

    async def _owners(self, topic: str, partitions: int) -> set[str]:
        """The brokers owning ``topic``'s partitions (Pulsar's lookup of each); more than one:
        broker replicas spread it, and a consumer polls each partition at its owner."""
        out: set[str] = set()
        for i in range(partitions):
            try:
                body = await self.broker.call(
                    "GET", f"/lookup/v2/topic/persistent/{path_of(partition_name(topic, i))}")
            except NotFoundError:  # a broker without lookup: no replicas
                return {"?"}
            except UnavailableError:  # moving: counted apart (polling each partition works anyway)
                out.add(f"?{i}")
                continue
            out.add(str(body.get("httpUrl")))
        return out

    # --- transactions ----------------------------------------------------------

    def transaction(self, timeout_ms: int = 60_000) -> TransactionScope:
        """``async with client.transaction() as txn``: commit on exit, abort on an exception."""
        return TransactionScope(self.coordinator, timeout_ms)

    async def new_transaction(self, timeout_ms: int = 60_000) -> Transaction:
        """An open transaction to commit or abort by hand."""
        return await Transaction.open(self.coordinator, timeout_ms)

    async def transaction_metadata(self, txn_id: str) -> Any:
        return await self.coordinator.call("GET", f"/v1/transactions/{txn_id}")
