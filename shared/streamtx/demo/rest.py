"""A thin async client of the streamtx REST API (docs/api.md), just what the demo needs.

Each call is one HTTP request, no retries: the workload decides what a failure
means (a worker aborts and redoes its transaction; the generator resends the
same records). Errors come back as streamtx errors: ``ConflictError`` (409) is
final, ``UnavailableError`` (503, connection refused, timeout) is retriable.

The SDK (``streamtx.client``) will replace this once it lands; the interface
is kept to the handful of calls below so the swap is local.
"""

from __future__ import annotations

import asyncio
import base64
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from streamtx.errors import StreamtxError, UnavailableError
from streamtx.service.http import error_from_response
from streamtx.wire import batch as wire

tenant, namespace = "public", "demo"


def partition_name(topic: str, partition: int) -> str:
    return f"{topic}-partition-{partition}"


def full_name(topic: str) -> str:
    return f"persistent://{tenant}/{namespace}/{topic}"


@dataclass(frozen=True, slots=True)
class Fetched:
    """One delivered message."""

    message_id: str
    partition: int
    key: str | None
    value: bytes
    properties: dict[str, str]


def last_per_partition(messages: list[Fetched]) -> list[str]:
    """The highest message id of each partition: what a cumulative ack of all of them names."""
    last: dict[int, str] = {}
    for m in messages:
        prev = last.get(m.partition)
        if prev is None or position_of(m.message_id) > position_of(prev):
            last[m.partition] = m.message_id
    return list(last.values())


def position_of(message_id: str) -> tuple[int, int]:
    """``ledger:entry[:batch]`` → ``(entry, batch)``, the order within one partition."""
    parts = message_id.split(":")
    return int(parts[1]), int(parts[2]) if len(parts) > 2 else -1


class Rest:
    """Calls to one suite: the coordinator and the broker.

    ``binary`` (the default): produce, fetch and acks in the binary batch format
    (``application/x-streamtx-batch``); a produce whose messages do not all name
    their partition goes as JSON (the broker routes those).
    """

    def __init__(self, coordinator_url: str, broker_url: str, *, timeout_s: float = 10.0,
                 binary: bool = True) -> None:
        self.binary = binary
        limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
        self._timeout_s = timeout_s
        self._tc = httpx.AsyncClient(base_url=coordinator_url.rstrip("/"), timeout=timeout_s, limits=limits)
        self._br = httpx.AsyncClient(base_url=broker_url.rstrip("/"), timeout=timeout_s, limits=limits)

    @classmethod
    async def discover(cls, url: str, *, timeout_s: float = 10.0) -> Rest:
        """Find the coordinator and broker through any service's ``/v1/cluster``."""
        async with httpx.AsyncClient(timeout=timeout_s) as c:
            services = (await c.get(f"{url.rstrip('/')}/v1/cluster")).json()["services"]
        return cls(services["coordinator"], services["broker"], timeout_s=timeout_s)

    async def aclose(self) -> None:
        await self._tc.aclose()
        await self._br.aclose()

    @staticmethod
    async def _call(client: httpx.AsyncClient, method: str, path: str, **kw: Any) -> Any:
        try:
            response = await client.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise UnavailableError(f"{method} {path}: {exc!r}") from exc
        if response.status_code >= 400:
            raise error_from_response(response)
        return response.json() if response.content else None

    @staticmethod
    async def _call_bytes(client: httpx.AsyncClient, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            response = await client.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise UnavailableError(f"{method} {path}: {exc!r}") from exc
        if response.status_code >= 400:
            raise error_from_response(response)
        return response

    # -- broker ------------------------------------------------------------------
    async def create_topic(self, topic: str, partitions: int) -> None:
        path = f"/admin/v2/persistent/{tenant}/{namespace}/{topic}/partitions"
        await self._call(self._br, "PUT", path, json={"partitions": partitions})

    async def produce(
        self, topic: str, messages: list[dict[str, Any]], txn_id: str | None = None,
        producer: dict[str, Any] | None = None,
    ) -> list[str]:
        """``messages``: ``{"key", "value": bytes, "properties", "partition"}``; ``producer``:
        ``{"name", "epoch", "sequence"}`` for dedup of resent requests."""
        path = f"/v1/topics/{tenant}/{namespace}/{topic}/messages"
        if self.binary and all(m.get("partition") is not None for m in messages):
            content, order = wire.encode_produce_routed(
                [(m["partition"], wire.Msg(m["value"], m.get("key"), m.get("properties") or {}))
                 for m in messages],
                txn=None if txn_id is None else wire.parse_txn(txn_id),
                producer=None if producer is None else (producer["name"], producer["epoch"],
                                                        producer["sequence"]),
            )
            response = await self._call_bytes(self._br, "POST", path, content=content,
                                              headers={"content-type": wire.CONTENT_TYPE})
            return wire.ids_in_request_order(order, response.content)
        body: dict[str, Any] = {"messages": [
            {**m, "value": base64.b64encode(m["value"]).decode()} for m in messages
        ]}
        if txn_id is not None:
            body["txn_id"] = txn_id
        if producer is not None:
            body["producer"] = producer
        out = await self._call(self._br, "POST", path, json=body)
        return list(out["message_ids"])

    async def subscribe(self, topic: str, sub: str, initial_position: str = "earliest",
                        sub_type: str = "Shared") -> None:
        path = f"/v1/topics/{tenant}/{namespace}/{topic}/subscriptions/{sub}"
        await self._call(self._br, "PUT", path, json={"initial_position": initial_position, "type": sub_type})

    async def fetch(self, topic: str, sub: str, consumer: str, max_messages: int = 500,
                    wait_ms: int = 200, partitions: list[int] | None = None) -> list[Fetched]:
        path = f"/v1/topics/{tenant}/{namespace}/{topic}/subscriptions/{sub}/messages"
        params: dict[str, Any] = {"max": max_messages, "wait_ms": wait_ms, "consumer": consumer}
        if partitions is not None:
            params["partitions"] = ",".join(map(str, partitions))
        timeout = self._timeout_s + wait_ms / 1000
        if self.binary:
            response = await self._call_bytes(self._br, "GET", path, params=params, timeout=timeout,
                                              headers={"accept": wire.CONTENT_TYPE})
            return [Fetched(m.message_id, m.partition, m.key, m.value, m.properties)
                    for m in wire.decode_messages_answer(response.content)]
        out = await self._call(self._br, "GET", path, params=params, timeout=timeout)
        return [
            Fetched(m["message_id"], int(m.get("partition") or 0), m.get("key"),
                    base64.b64decode(m["value"]), dict(m.get("properties") or {}))
            for m in out["messages"]
        ]

    async def ack(self, topic: str, sub: str, message_ids: list[str], txn_id: str | None = None,
                  cumulative: bool = False) -> None:
        path = f"/v1/topics/{tenant}/{namespace}/{topic}/subscriptions/{sub}/acks"
        if self.binary:
            content = wire.encode_acks(message_ids, txn=None if txn_id is None else wire.parse_txn(txn_id),
                                       cumulative=cumulative)
            await self._call_bytes(self._br, "POST", path, content=content,
                                   headers={"content-type": wire.CONTENT_TYPE})
            return
        body: dict[str, Any] = {"message_ids": message_ids}
        if cumulative:
            body["cumulative"] = True
        if txn_id is not None:
            body["txn_id"] = txn_id
        await self._call(self._br, "POST", path, json=body)

    # -- coordinator -------------------------------------------------------------
    async def begin(self, timeout_ms: int) -> str:
        out = await self._call(self._tc, "POST", "/v1/transactions", json={"timeout_ms": timeout_ms})
        return str(out["txn_id"])

    async def add_partitions(self, txn_id: str, partitions: list[str]) -> None:
        path = f"/v1/transactions/{txn_id}/partitions"
        await self._call(self._tc, "POST", path, json={"partitions": partitions})

    async def add_subscriptions(self, txn_id: str, subs: list[tuple[str, str]]) -> None:
        body = {"subscriptions": [{"topic": t, "subscription": s} for t, s in subs]}
        await self._call(self._tc, "POST", f"/v1/transactions/{txn_id}/subscriptions", json=body)

    async def commit(self, txn_id: str) -> None:
        await self._call(self._tc, "POST", f"/v1/transactions/{txn_id}/commit")

    async def abort(self, txn_id: str) -> None:
        await self._call(self._tc, "POST", f"/v1/transactions/{txn_id}/abort")

    async def txn_state(self, txn_id: str) -> str:
        return str((await self._call(self._tc, "GET", f"/v1/transactions/{txn_id}"))["state"])


T = TypeVar("T")


async def retry_retriable(call: Callable[[], Awaitable[T]], *, give_up_s: float = 120.0) -> T:
    """Retry ``call`` while the service is away (retriable errors only), with jittered backoff."""
    deadline = time.monotonic() + give_up_s
    delay = 0.05
    while True:
        try:
            return await call()
        except StreamtxError as exc:
            if not exc.retriable or time.monotonic() > deadline:
                raise
        await asyncio.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 1.0)
