"""Callbacks of the transaction coordinator and the pending-ack store."""

from __future__ import annotations

import orjson
from fastapi import APIRouter

from streamtx.broker.deps import broker_of
from streamtx.contracts.models import PartitionEnd, PartitionEnded, SubscriptionAcksEnd
from streamtx.contracts.states import Action
from streamtx.service import HotRequest, HotRoutes

router = APIRouter(prefix="/v1/txn", tags=["transactions"])
hot = HotRoutes(router)


@hot.post("/partitions/end", body=PartitionEnd, response_model=PartitionEnded)
async def end_partition(request: HotRequest) -> bytes:
    """Write the transaction's commit or abort marker on one partition (idempotent)."""
    broker = broker_of(request.state)
    body = request.json(PartitionEnd)
    marker = await broker.resolve_partition(body.partition).end_txn(body.txn_id, body.action)
    return orjson.dumps({"txn_id": str(body.txn_id), "partition": body.partition,
                         "action": body.action.value, "marker": marker})


@hot.post("/subscriptions/end", body=SubscriptionAcksEnd)
async def end_subscription(request: HotRequest) -> bytes:
    """Delete (commit) or redeliver (abort) a transaction's acked messages on one subscription."""
    # Bytes in and out: these carry thousands of message ids (hot at load).
    broker = broker_of(request.state)
    body = request.json(SubscriptionAcksEnd)
    txn = body.txn_id
    sub = await broker.subscription(broker.topic(body.topic), body.subscription)
    cumulative = [*body.cumulative_message_ids,
                  *([body.cumulative_message_id] if body.cumulative_message_id else [])]
    await sub.end_txn(body.message_ids, txn, body.action is Action.COMMIT, cumulative)
    # The count, not the ids back: an end carries thousands of them.
    return orjson.dumps({"topic": body.topic, "subscription": body.subscription, "txn_id": str(txn),
                         "action": body.action.value, "ended": len(body.message_ids)})
