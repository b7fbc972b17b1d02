"""A thin async client of the streamtx REST API (docs/api.md), just what the demo needs.

Each call is one HTTP request, no retries: the workload decides what a failure
means (a worker aborts and redoes its transaction; the generator resends the
same records). Errors come back as streamtx errors: ``ConflictError`` (409) is
final, ``UnavailableError`` (503, connection refused, timeout) is retriable.
Against replicas (``streamtx demo reshard --url``) a call follows the 307 to its
log's owner, remembers it, and waits out a log that moves (503 ``not_owner``, an
owner that died), as the SDK does: a handover is latency, not a failed call.

The SDK (``streamtx.client``) will replace this once it lands; the interface
is kept to the handful of calls below so the swap is local.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx

from streamtx import names
from streamtx.client.http import MOVING_WAIT_S
from streamtx.contracts import MessageId, TxnId
from streamtx.contracts.msgid import parse_many
from streamtx.transport import ONCE, HttpClient, RetryPolicy
from streamtx.transport.redirect import OwnerCache
from streamtx.wire import batch as wire

tenant, namespace = "public", "demo"


def partition_name(topic: str, partition: int) -> str:
    return names.partition_name(topic, partition)


def full_name(topic: str) -> str:
    return f"persistent://{tenant}/{namespace}/{topic}"


#: One delivered message: ``message_id``, ``partition``, ``key``, ``value``, ``properties``
#: (and, from the binary path, publish time, redeliveries, replication source). The wire
#: format's own named tuple: a fetch hands the decoded messages on without copying each.
Fetched = wire.Received


def last_per_partition(messages: list[Fetched]) -> list[str]:
    """The highest message id of each partition: what a cumulative ack of all of them names."""
    # Each id parsed once, by the contract's fast path (an entry's head once): per message, two
    # strict parses were a sixth of the probe's CPU.
    last: dict[int, tuple[tuple[int, int], str]] = {}
    for m, mid in zip(messages, parse_many(m.message_id for m in messages), strict=True):
        at = (mid.entry_id, mid.batch_index)
        prev = last.get(m.partition)
        if prev is None or at > prev[0]:
            last[m.partition] = (at, m.message_id)
    return [text for _, text in last.values()]


def as_values(messages: list[Fetched]) -> wire.Values:
    """Decoded messages as :func:`wire.decode_values` reads them, ids included (the JSON path)."""
    last = set(last_per_partition(messages))
    return wire.Values([m.value for m in messages],
                       {m.partition: m.message_id for m in messages if m.message_id in last},
                       [m.message_id for m in messages], [m.partition for m in messages])


def _fetch_request(topic: str, sub: str, consumer: str, max_messages: int, wait_ms: int,
                   partitions: list[int] | None) -> tuple[str, dict[str, Any]]:
    """A fetch's path and query."""
    params: dict[str, Any] = {"max": max_messages, "wait_ms": wait_ms, "consumer": consumer}
    if partitions is not None:
        params["partitions"] = ",".join(map(str, partitions))
    return f"/v1/topics/{tenant}/{namespace}/{topic}/subscriptions/{sub}/messages", params


def position_of(message_id: str) -> tuple[int, int]:
    """``ledger:entry[:batch]`` → ``(entry, batch)``, the order within one partition."""
    mid = MessageId.parse(message_id)
    return mid.entry_id, mid.batch_index


class Rest:
    """Calls to one suite: the coordinator and the broker.

    ``binary`` (the default): produce, fetch and acks in the binary batch format
    (``application/x-streamtx-batch``); a produce whose messages do not all name
    their partition goes as JSON (the broker routes those).
    """

    def __init__(self, coordinator_url: str, broker_url: str, *, timeout_s: float = 10.0,
                 binary: bool = True) -> None:
        self.binary = binary
        self._timeout_s = timeout_s
        # Nothing was served on a 307, a 503 not_owner or a refused owner: waiting them out
        # repeats no call (streamtx.transport.http). One service alone never answers them.
        self._tc = HttpClient(coordinator_url, retry=ONCE, timeout_s=timeout_s, max_connections=32,
                              owners=OwnerCache(), moving_wait_s=MOVING_WAIT_S)
        self._br = HttpClient(broker_url, retry=ONCE, timeout_s=timeout_s, max_connections=32,
                              owners=OwnerCache(), moving_wait_s=MOVING_WAIT_S)

    @classmethod
    async def discover(cls, url: str, *, timeout_s: float = 10.0) -> Rest:
        """Find the coordinator and broker through any service's ``/v1/cluster``."""
        any_service = HttpClient(url, retry=ONCE, timeout_s=timeout_s)
        try:
            services = (await any_service.request("GET", "/v1/cluster"))["services"]
        finally:
            await any_service.aclose()
        return cls(services["coordinator"], services["broker"], timeout_s=timeout_s)

    async def aclose(self) -> None:
        await self._tc.aclose()
        await self._br.aclose()

    @staticmethod
    async def _call(client: HttpClient, method: str, path: str, *, json: Any = None, params: Any = None,
                    timeout: float | None = None) -> Any:
        return await client.request(method, path, json=json, params=params, timeout_s=timeout)

    @staticmethod
    async def _call_bytes(client: HttpClient, method: str, path: str, *, content: bytes | None = None,
                          params: Any = None, headers: dict[str, str] | None = None,
                          timeout: float | None = None) -> httpx.Response:
        return await client.send(method, path, content=content, params=params, headers=headers,
                                 timeout_s=timeout)

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
        if self.binary and all(m.get("partition") is not None for m in messages):
            return await self.produce_routed(
                topic, [(m["partition"], wire.Msg(m["value"], m.get("key"), m.get("properties") or {}))
                        for m in messages], txn_id, producer)
        return await self._produce_json(topic, messages, txn_id, producer)

    async def produce_routed(
        self, topic: str, rows: list[tuple[int, wire.Msg]], txn_id: str | None = None,
        producer: dict[str, Any] | None = None,
    ) -> list[str]:
        """:meth:`produce` of ``(partition, message)`` rows, the message ids in row order."""
        if not self.binary:
            messages = [{"key": m.key, "value": m.value, "properties": dict(m.properties), "partition": p}
                        for p, m in rows]
            return await self._produce_json(topic, messages, txn_id, producer)
        content, order = wire.encode_produce_routed(
            rows, txn=None if txn_id is None else TxnId.parse(txn_id),
            producer=None if producer is None else (
                producer["name"], producer["epoch"], producer["sequence"]),
        )
        response = await self._send_produce(topic, content)
        return wire.ids_in_request_order(order, response.content)

    def prepare_keyed(
        self, topic: str, sections: list[tuple[int, list[bytes], list[bytes]]],
        properties: dict[str, str], txn_id: str,
    ) -> Callable[[], Awaitable[object]]:
        """Encode now a produce of ``(partition, values, utf-8 keys)`` sections whose messages
        all carry ``properties``; send it when the result is called. A worker encodes its
        outputs while the transaction before commits, one message object per record fewer
        than :meth:`produce_routed`; the answer's ids are not read out (nobody uses them)."""
        if not self.binary:
            messages = [{"key": k.decode(), "value": v, "properties": properties, "partition": p}
                        for p, values, keys in sections for v, k in zip(values, keys, strict=True)]
            return lambda: self._produce_json(topic, messages, txn_id, None)
        content = wire.encode_produce_keyed(sections, properties, txn=TxnId.parse(txn_id))
        return lambda: self._send_produce(topic, content)

    async def _send_produce(self, topic: str, content: bytes) -> httpx.Response:
        path = f"/v1/topics/{tenant}/{namespace}/{topic}/messages"
        return await self._call_bytes(self._br, "POST", path, content=content,
                                      headers={"content-type": wire.CONTENT_TYPE})

    async def _produce_json(self, topic: str, messages: list[dict[str, Any]], txn_id: str | None,
                            producer: dict[str, Any] | None) -> list[str]:
        path = f"/v1/topics/{tenant}/{namespace}/{topic}/messages"
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
        if self.binary:
            return wire.decode_messages_answer(
                await self._fetch_batch(topic, sub, consumer, max_messages, wait_ms, partitions))
        path, params = _fetch_request(topic, sub, consumer, max_messages, wait_ms, partitions)
        out = await self._call(self._br, "GET", path, params=params, timeout=self._timeout_s + wait_ms / 1000)
        return [
            Fetched(m["message_id"], int(m.get("partition") or 0), m.get("key"),
                    base64.b64decode(m["value"]), dict(m.get("properties") or {}))
            for m in out["messages"]
        ]

    async def fetch_values(self, topic: str, sub: str, consumer: str, max_messages: int = 500,
                           wait_ms: int = 200, ids: bool = False) -> wire.Values:
        """A fetch read for its values (with ``ids``: and each one's id and partition) and the
        last message id of each partition: no decoded message object per record."""
        if not self.binary:
            return as_values(await self.fetch(topic, sub, consumer, max_messages, wait_ms))
        return wire.decode_values(await self._fetch_batch(topic, sub, consumer, max_messages, wait_ms), ids)

    async def _fetch_batch(self, topic: str, sub: str, consumer: str, max_messages: int, wait_ms: int,
                           partitions: list[int] | None = None) -> bytes:
        """A fetch's answer in the binary batch format, undecoded."""
        path, params = _fetch_request(topic, sub, consumer, max_messages, wait_ms, partitions)
        response = await self._call_bytes(self._br, "GET", path, params=params,
                                          timeout=self._timeout_s + wait_ms / 1000,
                                          headers={"accept": wire.CONTENT_TYPE})
        return response.content

    async def assigned(self, topic: str, sub: str, consumer: str) -> list[int]:
        """The partitions ``consumer`` is active on (a Failover subscription)."""
        path = f"/v1/topics/{tenant}/{namespace}/{topic}/subscriptions/{sub}/consumers/{consumer}"
        out = await self._call(self._br, "GET", path)
        return [int(p) for p in out["partitions"]]

    async def close_consumer(self, topic: str, sub: str, consumer: str) -> None:
        """The consumer leaves (a Failover subscription moves its partitions, with what it had out)."""
        path = f"/v1/topics/{tenant}/{namespace}/{topic}/subscriptions/{sub}/consumers/{consumer}"
        await self._call(self._br, "DELETE", path)

    async def ack(self, topic: str, sub: str, message_ids: list[str], txn_id: str | None = None,
                  cumulative: bool = False) -> None:
        path = f"/v1/topics/{tenant}/{namespace}/{topic}/subscriptions/{sub}/acks"
        if self.binary:
            content = wire.encode_acks(message_ids, txn=None if txn_id is None else TxnId.parse(txn_id),
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

#: The longest wait between tries while a service is away (issue 25): a restarted service is
#: back within a second or two, and a wait of a second after it was back is half the budget.
retry_max_backoff_s = 0.25


async def retry_retriable(call: Callable[[], Awaitable[T]], *, give_up_s: float = 120.0) -> T:
    """Retry ``call`` while the service is away (retriable errors only), with jittered backoff."""
    return await RetryPolicy(attempts=None, backoff_s=0.05, max_backoff_s=retry_max_backoff_s,
                             deadline_s=give_up_s).run(call)
