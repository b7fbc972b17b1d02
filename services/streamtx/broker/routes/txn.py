"""Callbacks of the transaction coordinator and the pending-ack store."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field

from streamtx.broker.deps import BrokerDep, body_schema, get_broker, json_response, parse_body
from streamtx.broker.routes.messages import parse_txn
from streamtx.broker.txnbuffer import TxnAction

router = APIRouter(prefix="/v1/txn", tags=["transactions"])


class PartitionEnd(BaseModel):
    """The TC ends a transaction on one partition: write its marker (idempotent)."""

    txn_id: str
    partition: str
    action: TxnAction


class PartitionEndPublic(PartitionEnd):
    """The marker's message id, or null when the txn never produced on that partition."""

    marker: str | None


class SubscriptionEnd(BaseModel):
    """The pending-ack store ends a transaction's acks on one subscription."""

    topic: str
    subscription: str
    txn_id: str
    action: TxnAction
    message_ids: list[str] = Field(default_factory=list)
    cumulative_message_id: str | None = None


@router.post("/partitions/end")
async def end_partition(body: PartitionEnd, broker: BrokerDep) -> PartitionEndPublic:
    txn = parse_txn(body.txn_id)
    assert txn is not None
    marker = await broker.resolve_partition(body.partition).end_txn(txn, body.action)
    return PartitionEndPublic(txn_id=body.txn_id, partition=body.partition, action=body.action,
                              marker=marker)


@router.post("/subscriptions/end", openapi_extra=body_schema(SubscriptionEnd))
async def end_subscription(request: Request) -> Response:
    # Body from bytes and bytes out: these carry thousands of message ids (hot at load).
    broker = await get_broker(request)
    body = await parse_body(request, SubscriptionEnd)
    txn = parse_txn(body.txn_id)
    sub = broker.topic(body.topic).subscription(body.subscription)
    await sub.end_txn(body.message_ids, txn, body.action is TxnAction.COMMIT, body.cumulative_message_id)
    return json_response({"topic": body.topic, "subscription": body.subscription, "txn_id": body.txn_id,
                          "action": body.action.value, "message_ids": body.message_ids})
