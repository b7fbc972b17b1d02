"""Pending-ack lookup: which replica owns a subscription's pending-ack log (its slot's owner)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel

from streamtx.pendingack.leases import Slots
from streamtx.pendingack.registry import check_names
from streamtx.pendingack.settings import PendingAckSettings

router = APIRouter(prefix="/lookup/v2", tags=["lookup"])


class SubscriptionOwner(BaseModel):
    """Answer of a subscription lookup."""

    slot: int
    owner: str | None  # the owner's URL; null while its slot moves between replicas
    servedHere: bool


@router.get("/subscription/persistent/{tenant}/{namespace}/{topic}/{sub}",
            response_model=SubscriptionOwner)
async def lookup_subscription(request: Request, tenant: str, namespace: str, topic: str,
                              sub: str) -> SubscriptionOwner:
    key = (f"persistent://{tenant}/{namespace}/{topic}", sub)
    check_names(*key)
    settings: PendingAckSettings = request.app.state.settings
    slots: Slots | None = request.app.state.slots
    if slots is None:  # one process serves every subscription
        return SubscriptionOwner(slot=0, owner=settings.own_url(), servedHere=True)
    slot = slots.slot(key)
    if slot in slots.ready:
        return SubscriptionOwner(slot=slot, owner=settings.own_url(), servedHere=True)
    return SubscriptionOwner(slot=slot, owner=slots.owners.get(slot), servedHere=False)
