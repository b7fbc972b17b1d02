"""Broker-facing routes: transactional acks and what they hold."""

from __future__ import annotations

from fastapi import APIRouter, Query

from streamtx.pendingack.deps import Stores
from streamtx.pendingack.models import AckCreate, HeldPublic
from streamtx.pendingack.records import MessageId, TxnId

router = APIRouter(prefix="/v1/pendingack", tags=["pending acks"])


@router.post("/acks")
async def ack(body: AckCreate, stores: Stores) -> dict[str, str]:
    """Hold the messages for the transaction; 200 once durable, 409 on a conflict."""
    txn = TxnId.parse(body.txn_id)
    ids = [MessageId.parse(m) for m in body.message_ids]
    store = await stores.get(body.topic, body.subscription)
    await store.ack(txn, ids, body.cumulative)
    return {"status": "ok"}


@router.get("/held")
async def held(stores: Stores, topic: str = Query(...), subscription: str = Query(...)) -> HeldPublic:
    """Ids held by open transactions (the broker asks on restart)."""
    store = await stores.get(topic, subscription)
    return HeldPublic(message_ids=store.held())
