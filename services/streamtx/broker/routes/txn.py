"""Callbacks of the transaction coordinator and the pending-ack store."""

from __future__ import annotations

import orjson
from fastapi import APIRouter

from streamtx.broker.deps import broker_of
from streamtx.broker.registry import Broker
from streamtx.broker.replicas import spread
from streamtx.broker.replicas.plan import SpreadPlan
from streamtx.broker.subscription import Subscription
from streamtx.contracts.models import PartitionEnd, PartitionEnded, SubscriptionAcksEnd
from streamtx.contracts.states import Action
from streamtx.contracts.txnid import TxnId
from streamtx.service import HotRequest, HotRoutes

router = APIRouter(prefix="/v1/txn", tags=["transactions"])
hot = HotRoutes(router)


@hot.post("/partitions/end", body=PartitionEnd, response_model=PartitionEnded)
async def end_partition(request: HotRequest) -> bytes:
    """Write the transaction's commit or abort marker on one partition (idempotent)."""
    broker = broker_of(request.state)
    body = request.json(PartitionEnd)
    _forget(broker, body.txn_id)
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
    _forget(broker, txn)
    cumulative = [*body.cumulative_message_ids,
                  *([body.cumulative_message_id] if body.cumulative_message_id else [])]
    here = request.header(spread.HERE) is not None
    at = broker.resolve(body.topic, here=here)
    if isinstance(at, SpreadPlan):
        # A spread topic's name (the caller acked on it): every owner ends its partitions' part.
        plan = at

        async def local() -> None:
            assert plan.topic is not None
            await _end(await broker.subscription(plan.topic, body.subscription), body.message_ids, txn,
                       body.action is Action.COMMIT, cumulative, partial=True)

        await spread.everywhere(request.state.forwarder, plan, "POST", "/v1/txn/subscriptions/end",
                                request.body, local)
    else:
        await _end(await broker.subscription(at.topic, body.subscription), body.message_ids, txn,
                   body.action is Action.COMMIT, cumulative, partial=here)
    # The count, not the ids back: an end carries thousands of them.
    return orjson.dumps({"topic": body.topic, "subscription": body.subscription, "txn_id": str(txn),
                         "action": body.action.value, "ended": len(body.message_ids)})


def _forget(broker: Broker, txn: TxnId) -> None:
    """The transaction ends: a write naming it from now on asks the coordinator again."""
    if broker.txn_guard is not None:
        broker.txn_guard.forget(txn)


async def _end(sub: Subscription, ids: list[str], txn: TxnId, commit: bool, cumulative: list[str], *,
               partial: bool) -> None:
    """``partial``: this replica holds some of the topic's partitions; the ids of the others are
    their owners' to end."""
    if partial:
        ids, cumulative = sub.owned_ids(ids), sub.owned_ids(cumulative)
    await sub.end_txn(ids, txn, commit, cumulative)
