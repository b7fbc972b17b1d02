"""Callbacks of the transaction coordinator and the pending-ack store."""

from __future__ import annotations

import orjson
from fastapi import APIRouter
from pydantic import BaseModel, Field

from streamtx.broker.deps import broker_of
from streamtx.broker.routes.messages import parse_txn
from streamtx.broker.txnbuffer import TxnAction
from streamtx.names import SubscriptionName, TopicName
from streamtx.service import HotRequest, HotRoutes

router = APIRouter(prefix="/v1/txn", tags=["transactions"])
hot = HotRoutes(router)


class PartitionEnd(BaseModel):
    """The TC ends a transaction on one partition: write its marker (idempotent)."""

    txn_id: str
    partition: TopicName
    action: TxnAction


class PartitionEndPublic(PartitionEnd):
    """The marker's message id, or null when the txn never produced on that partition."""

    marker: str | None


class SubscriptionEnd(BaseModel):
    """The pending-ack store ends a transaction's acks on one subscription."""

    topic: TopicName
    subscription: SubscriptionName
    txn_id: str
    action: TxnAction
    message_ids: list[str] = Field(default_factory=list)
    cumulative_message_id: str | None = None  # one partition's (kept for older stores)
    cumulative_message_ids: list[str] = Field(default_factory=list)  # at most one per partition


@hot.post("/partitions/end", body=PartitionEnd, response_model=PartitionEndPublic)
async def end_partition(request: HotRequest) -> bytes:
    """Write the transaction's commit or abort marker on one partition (idempotent)."""
    broker = broker_of(request.state)
    body = request.json(PartitionEnd)
    txn = parse_txn(body.txn_id)
    assert txn is not None
    marker = await broker.resolve_partition(body.partition).end_txn(txn, body.action)
    return orjson.dumps({"txn_id": body.txn_id, "partition": body.partition,
                         "action": body.action.value, "marker": marker})


@hot.post("/subscriptions/end", body=SubscriptionEnd)
async def end_subscription(request: HotRequest) -> bytes:
    """Delete (commit) or redeliver (abort) a transaction's acked messages on one subscription."""
    # Bytes in and out: these carry thousands of message ids (hot at load).
    broker = broker_of(request.state)
    body = request.json(SubscriptionEnd)
    txn = parse_txn(body.txn_id)
    sub = broker.topic(body.topic).subscription(body.subscription)
    cumulative = [*body.cumulative_message_ids,
                  *([body.cumulative_message_id] if body.cumulative_message_id else [])]
    await sub.end_txn(body.message_ids, txn, body.action is TxnAction.COMMIT, cumulative)
    # The count, not the ids back: an end carries thousands of them.
    return orjson.dumps({"topic": body.topic, "subscription": body.subscription, "txn_id": body.txn_id,
                         "action": body.action.value, "ended": len(body.message_ids)})
