"""Broker-facing routes: transactional acks and what they hold."""

from __future__ import annotations

from fastapi import APIRouter, Query

from streamtx.pendingack.deps import OK, Stores, stores_of
from streamtx.pendingack.models import AckCreate, HeldPublic
from streamtx.pendingack.records import MessageId, TxnId
from streamtx.service import HotRequest, HotRoutes

router = APIRouter(prefix="/v1/pendingack", tags=["pending acks"])
hot = HotRoutes(router)


@hot.post("/acks", body=AckCreate)
async def ack(request: HotRequest) -> bytes:
    """Hold the messages for the transaction; 200 once durable, 409 on a conflict."""
    body = request.json(AckCreate)
    txn = TxnId.parse(body.txn_id)
    ids = [MessageId.parse(m) for m in body.message_ids]
    async with stores_of(request.state).use(body.topic, body.subscription, create=True) as store:
        assert store is not None  # created on demand
        await store.ack(txn, ids, body.cumulative)
    return OK


@router.get("/held")
async def held(stores: Stores, topic: str = Query(...), subscription: str = Query(...)) -> HeldPublic:
    """Ids held by open transactions (the broker asks on restart); 404 where nothing was ever acked."""
    store = await stores.require(topic, subscription)
    return HeldPublic(message_ids=store.held())
