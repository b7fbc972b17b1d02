"""Broker-facing routes: transactional acks and what they hold."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from streamtx.contracts.msgid import parse_many
from streamtx.names import MAX_PARTITIONS, NAME_PATTERN, TOPIC_PATTERN
from streamtx.peers import TxnGuard
from streamtx.pendingack.deps import OK, Stores, stores_of
from streamtx.pendingack.models import Held, PendingAckCreate
from streamtx.service import HotRequest, HotRoutes

router = APIRouter(prefix="/v1/pendingack", tags=["pending acks"])
hot = HotRoutes(router)


@hot.post("/acks", body=PendingAckCreate)
async def ack(request: HotRequest) -> bytes:
    """Hold the messages for the transaction; 200 once durable, 409 on a conflict."""
    body = request.json(PendingAckCreate)
    ids = parse_many(body.message_ids)
    guard: TxnGuard | None = getattr(request.state, "txn_guard", None)
    if guard is not None:
        # The door check (issue 21 item 2): the transaction open, the subscription registered in
        # it. The caller is a broker, which checked the client's ownership before forwarding.
        await guard.check(body.txn_id, None, subscriptions=[(body.topic, body.subscription)])
    async with stores_of(request.state).use(body.topic, body.subscription, create=True) as store:
        assert store is not None  # created on demand
        await store.ack(body.txn_id, ids, body.cumulative)
    return OK


@router.delete("/subscriptions")
async def delete_subscription(
    stores: Stores, topic: Annotated[str, Query(pattern=TOPIC_PATTERN)],
    subscription: Annotated[str, Query(pattern=NAME_PATTERN)],
    partitions: Annotated[int, Query(ge=0, le=MAX_PARTITIONS)] = 0,
) -> dict[str, bool]:
    """The broker deletes the subscription: its pending-ack state goes (under every name of the
    topic; ``partitions``: how many, for logs kept under their names before). 409 while an open
    transaction holds acks in it."""
    return {"deleted": await stores.delete(topic, subscription, partitions)}


@router.get("/held")
async def held(stores: Stores, topic: Annotated[str, Query(pattern=TOPIC_PATTERN)],
               subscription: Annotated[str, Query(pattern=NAME_PATTERN)]) -> Held:
    """Ids held by open transactions (the broker asks on restart); 404 where nothing was ever acked."""
    store = await stores.require(topic, subscription)
    return Held(message_ids=store.held(), holders=store.holders(), cumulative=store.cumulative())
