"""Subscriptions: create, fetch (long-poll), acks, nacks, stats."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, Field

from streamtx.broker import codec
from streamtx.broker.deps import (
    BrokerDep,
    SettingsDep,
    body_schema,
    get_broker,
    json_response,
    parse_body,
    topic_name,
)
from streamtx.broker.routes.messages import parse_txn
from streamtx.broker.subscription import SubscriptionType

router = APIRouter(prefix="/v1/topics/{tenant}/{namespace}/{topic}/subscriptions/{sub}",
                   tags=["subscriptions"])


class SubscriptionCreate(BaseModel):
    """Where a new subscription starts and its type (query ``type`` wins over the body)."""

    initial_position: str = Field(default="latest", pattern="^(earliest|latest)$")
    type: SubscriptionType | None = None


class SubscriptionPublic(BaseModel):
    """A subscription as created."""

    topic: str
    subscription: str
    type: SubscriptionType
    initial_position: str


class AckRequest(BaseModel):
    """Acknowledge messages, individually or cumulatively, optionally in a transaction."""

    message_ids: list[str] = Field(min_length=1)
    txn_id: str | None = None
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
    created = await broker.create_subscription(name, sub, sub_type, body.initial_position)
    return SubscriptionPublic(topic=name, subscription=sub, type=created.type,
                              initial_position=body.initial_position)


@router.get("/messages", response_model=MessagesPublic)
async def fetch(tenant: str, namespace: str, topic: str, sub: str, broker: BrokerDep,
                settings: SettingsDep, max: int = Query(100, ge=1),
                wait_ms: int = Query(500, ge=0), consumer: str = Query("default", min_length=1),
                partitions: str | None = Query(None, pattern=r"^\d+(,\d+)*$")) -> Response:
    s = broker.topic(topic_name(tenant, namespace, topic)).subscription(sub)
    only = None if partitions is None else [int(p) for p in partitions.split(",")]
    got = await s.fetch(consumer, min(max, settings.max_fetch_messages), min(wait_ms, settings.max_wait_ms),
                        only)
    # Bytes straight from orjson: pydantic serializing list[dict[str, Any]] cost more.
    return Response(orjson.dumps({"messages": got}), media_type="application/json")


@router.post("/acks", openapi_extra=body_schema(AckRequest))
async def ack(tenant: str, namespace: str, topic: str, sub: str, request: Request) -> Response:
    # Body from bytes (pydantic's JSON parser) and bytes out: acks carry thousands of ids.
    broker = await get_broker(request)
    body = await parse_body(request, AckRequest)
    name = topic_name(tenant, namespace, topic)
    s = broker.topic(name).subscription(sub)
    txn = parse_txn(body.txn_id)
    if txn is None:
        await s.ack(body.message_ids, body.cumulative)
    else:
        resolved = s.check_txn_ack(body.message_ids, txn)
        # Held before the call, so no redelivery hands them out meanwhile.
        newly = s.hold(resolved, txn, body.cumulative)
        try:
            await broker.pendingack.ack(name, sub, codec.txn_str(txn), body.message_ids,
                                        body.cumulative)
        except BaseException:
            s.unhold(newly, txn)
            raise
    return json_response({"acked": len(body.message_ids)})


@router.post("/nacks")
async def nack(tenant: str, namespace: str, topic: str, sub: str, body: NackRequest,
               broker: BrokerDep) -> dict[str, int]:
    s = broker.topic(topic_name(tenant, namespace, topic)).subscription(sub)
    await s.nack(body.message_ids)
    return {"nacked": len(body.message_ids)}


@router.get("/stats")
async def subscription_stats(tenant: str, namespace: str, topic: str, sub: str,
                             broker: BrokerDep) -> dict[str, Any]:
    return await broker.topic(topic_name(tenant, namespace, topic)).subscription(sub).stats()
