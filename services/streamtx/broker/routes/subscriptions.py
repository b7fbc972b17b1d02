"""Subscriptions: create, fetch (long-poll), acks, nacks, stats."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter
from pydantic import BaseModel, Field

from streamtx.broker.deps import BrokerDep, broker_of, topic_name
from streamtx.broker.dispatch import render_batch, render_json
from streamtx.broker.settings import BrokerSettings
from streamtx.broker.subscription import SubscriptionType
from streamtx.contracts.txnid import TxnId, TxnIdField
from streamtx.errors import MalformedError
from streamtx.service import HotRequest, HotRoutes
from streamtx.wire import batch as wire

router = APIRouter(prefix="/v1/topics/{tenant}/{namespace}/{topic}/subscriptions/{sub}",
                   tags=["subscriptions"])
hot = HotRoutes(router)


class SubscriptionCreate(BaseModel):
    """Where a new subscription starts and its type (query ``type`` wins over the body)."""

    initial_position: str = Field(default="latest", pattern="^(earliest|latest)$")
    type: SubscriptionType | None = None
    replicated: bool | None = None  # PIP-33 replicated subscription (unchanged when absent)


class SubscriptionPublic(BaseModel):
    """A subscription as created."""

    topic: str
    subscription: str
    type: SubscriptionType
    initial_position: str
    replicated: bool = False


class AckRequest(BaseModel):
    """Acknowledge messages, individually or cumulatively, optionally in a transaction."""

    message_ids: list[str] = Field(min_length=1)
    txn_id: TxnIdField | None = None
    cumulative: bool = False


class NackRequest(BaseModel):
    """Negative acks: redeliver these messages."""

    message_ids: list[str] = Field(min_length=1)


class MessagesPublic(BaseModel):
    """Messages handed to a consumer."""

    messages: list[dict[str, Any]]


@router.put("")
async def create_subscription(tenant: str, namespace: str, topic: str, sub: str, broker: BrokerDep,
                              body: SubscriptionCreate | None = None,
                              type: SubscriptionType | None = None) -> SubscriptionPublic:
    body = body or SubscriptionCreate()
    sub_type = type or body.type or SubscriptionType.SHARED
    name = topic_name(tenant, namespace, topic)
    created = await broker.create_subscription(name, sub, sub_type, body.initial_position, body.replicated)
    if created is None:  # replicas: none of its partitions is here; recorded for their owners
        return SubscriptionPublic(topic=name, subscription=sub, type=sub_type,
                                  initial_position=body.initial_position, replicated=bool(body.replicated))
    return SubscriptionPublic(topic=name, subscription=sub, type=created.type,
                              initial_position=body.initial_position, replicated=created.replicated)


class FetchQuery(BaseModel):
    """Query of a fetch: how many, how long to wait, who asks, which partitions."""

    max: int = Field(100, ge=1)
    wait_ms: int = Field(500, ge=0)
    consumer: str = Field("default", min_length=1)
    partitions: str | None = Field(None, pattern=r"^\d+(,\d+)*$")


@hot.get("/messages", query=FetchQuery, long_poll=True, response_model=MessagesPublic)
async def fetch(request: HotRequest) -> bytes:
    """Messages for this consumer, waiting up to ``wait_ms`` for the first (long poll).

    The wait ends early (an empty answer) when the client disconnects or the broker stops.
    With ``Accept: application/x-streamtx-batch`` the answer is the binary batch
    format: the stored entries as they are (docs/api.md, :mod:`streamtx.wire.batch`)."""
    broker = broker_of(request.state)
    settings: BrokerSettings = request.state.settings
    q = request.query(FetchQuery)
    p = request.params
    topic, index = broker.target(topic_name(p["tenant"], p["namespace"], p["topic"]))
    s = await broker.subscription(topic, p["sub"])
    only = None if q.partitions is None else [int(p) for p in q.partitions.split(",")]
    if index is not None:  # the partition's own name: that partition only
        if only is not None and only != [index]:
            raise MalformedError(f"partitions={q.partitions} asked of partition {index}")
        only = [index]
    got = await s.fetch_raw(q.consumer, min(q.max, settings.max_fetch_messages),
                            min(q.wait_ms, settings.max_wait_ms), only, request.poll)
    if wire.is_batch(request.header("accept")):
        request.response_type = wire.CONTENT_TYPE
        return render_batch(got)
    # Bytes straight from orjson: pydantic serializing list[dict[str, Any]] cost more.
    return orjson.dumps({"messages": render_json(got)})


def _ack_body(request: HotRequest) -> tuple[list[str], TxnId | None, bool]:
    if wire.is_batch(request.header("content-type")):
        got = wire.decode_acks(request.body)
        if not got.ids:
            raise MalformedError("message_ids: at least one id")
        return got.id_strings(), got.txn, got.cumulative
    body = request.json(AckRequest)
    return body.message_ids, body.txn_id, body.cumulative


@hot.post("/acks", body=AckRequest)
async def ack(request: HotRequest) -> bytes:
    """Acknowledge messages; in a transaction they are held until it ends.

    With ``Content-Type: application/x-streamtx-batch`` the ids come as the binary
    batch format's *acks* body (docs/api.md); the answer is JSON either way."""
    broker = broker_of(request.state)
    message_ids, txn, cumulative = _ack_body(request)
    p = request.params
    name = topic_name(p["tenant"], p["namespace"], p["topic"])
    s = await broker.subscription(broker.topic(name), p["sub"])
    if txn is None:
        await s.ack(message_ids, cumulative)
    else:
        await s.until_ready()
        resolved = s.check_txn_ack(message_ids, txn)
        # Held before the call, so no redelivery hands them out meanwhile.
        newly = s.hold(resolved, txn, cumulative)
        try:
            await broker.pendingack.ack(name, p["sub"], txn, message_ids, cumulative)
        except BaseException:
            s.unhold(newly, txn)
            raise
    return b'{"acked":%d}' % len(message_ids)


@router.post("/nacks")
async def nack(tenant: str, namespace: str, topic: str, sub: str, body: NackRequest,
               broker: BrokerDep) -> dict[str, int]:
    s = await broker.subscription(broker.topic(topic_name(tenant, namespace, topic)), sub)
    await s.nack(body.message_ids)
    return {"nacked": len(body.message_ids)}


@router.get("/consumers/{consumer}")
async def consumer_partitions(tenant: str, namespace: str, topic: str, sub: str, consumer: str,
                              broker: BrokerDep) -> dict[str, Any]:
    """The partitions this consumer is active on now (Failover; all of them otherwise)."""
    s = await broker.subscription(broker.topic(topic_name(tenant, namespace, topic)), sub)
    return {"consumer": consumer, "partitions": s.partitions_of(consumer)}


@router.delete("/consumers/{consumer}")
async def close_consumer(tenant: str, namespace: str, topic: str, sub: str, consumer: str,
                         broker: BrokerDep) -> dict[str, Any]:
    """The consumer leaves: on a Failover subscription its partitions move at once."""
    s = await broker.subscription(broker.topic(topic_name(tenant, namespace, topic)), sub)
    return {"consumer": consumer, "closed": s.close_consumer(consumer)}


@router.get("/stats")
async def subscription_stats(tenant: str, namespace: str, topic: str, sub: str,
                             broker: BrokerDep) -> dict[str, Any]:
    return await (await broker.subscription(broker.topic(topic_name(tenant, namespace, topic)), sub)).stats()
