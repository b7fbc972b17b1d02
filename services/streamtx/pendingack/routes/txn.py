"""Coordinator-facing routes: prepare (the optimistic check) and end."""

from __future__ import annotations

from fastapi import APIRouter

from streamtx.contracts import Action
from streamtx.peers import TxnGuard
from streamtx.pendingack.deps import OK, stores_of
from streamtx.pendingack.models import SubscriptionTxn, SubscriptionTxnEnd
from streamtx.service import HotRequest, HotRoutes

router = APIRouter(prefix="/v1/txn/subscriptions", tags=["transactions"])
hot = HotRoutes(router)


@hot.post("/prepare", body=SubscriptionTxn)
async def prepare(request: HotRequest) -> bytes:
    """200 when the transaction may commit here; 409 when it overlaps another's commit."""
    body = request.json(SubscriptionTxn)
    txn = body.txn_id
    async with stores_of(request.state).use(body.topic, body.subscription) as store:
        if store is not None:  # else nothing was ever acked here: nothing to overlap
            await store.prepare(txn)
    return OK


@hot.post("/end", body=SubscriptionTxnEnd)
async def end(request: HotRequest) -> bytes:
    """Commit or abort the transaction's acks; idempotent, 200 for an unknown transaction."""
    body = request.json(SubscriptionTxnEnd)
    txn = body.txn_id
    guard: TxnGuard | None = getattr(request.state, "txn_guard", None)
    if guard is not None:
        guard.forget(txn)  # an ack naming it from now on asks the coordinator again
    stores = stores_of(request.state)
    commit = body.action is Action.COMMIT
    async with stores.use(body.topic, body.subscription) as store:
        if store is None:  # nothing held here: remembered without opening a log
            stores.remember_end(body.topic, body.subscription, txn, commit)
        else:
            await store.end(txn, commit)
    return OK
