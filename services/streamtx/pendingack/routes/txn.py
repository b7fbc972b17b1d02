"""Coordinator-facing routes: prepare (the optimistic check) and end."""

from __future__ import annotations

from fastapi import APIRouter

from streamtx.pendingack.deps import Stores
from streamtx.pendingack.models import SubscriptionTxn, SubscriptionTxnEnd
from streamtx.pendingack.records import TxnId

router = APIRouter(prefix="/v1/txn/subscriptions", tags=["transactions"])


@router.post("/prepare")
async def prepare(body: SubscriptionTxn, stores: Stores) -> dict[str, str]:
    """200 when the transaction may commit here; 409 when it overlaps another's commit."""
    txn = TxnId.parse(body.txn_id)
    store = await stores.get(body.topic, body.subscription)
    await store.prepare(txn)
    return {"status": "ok"}


@router.post("/end")
async def end(body: SubscriptionTxnEnd, stores: Stores) -> dict[str, str]:
    """Commit or abort the transaction's acks; idempotent, 200 for an unknown transaction."""
    txn = TxnId.parse(body.txn_id)
    store = await stores.get(body.topic, body.subscription)
    await store.end(txn, body.action == "commit")
    return {"status": "ok"}
