"""Admin v3 routes of the pending-ack store (Pulsar's ``/admin/v3/transactions``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from streamtx.names import topic_name
from streamtx.pendingack.deps import Stores
from streamtx.pendingack.models import BatchLogUpdate

router = APIRouter(prefix="/admin/v3/transactions", tags=["admin"])


def _topic(tenant: str, namespace: str, topic: str) -> str:
    return topic_name(tenant, namespace, topic)  # 400 on a name Pulsar refuses, as the document says


@router.get("/pendingAckStats/{tenant}/{namespace}/{topic}/{sub}")
async def pending_ack_stats(tenant: str, namespace: str, topic: str, sub: str, stores: Stores) -> Any:
    """The subscription's pending-ack state."""
    store = await stores.require(_topic(tenant, namespace, topic), sub)
    return store.stats()


@router.get("/pendingAckInternalStats/{tenant}/{namespace}/{topic}/{sub}")
async def pending_ack_internal_stats(
    tenant: str, namespace: str, topic: str, sub: str, stores: Stores
) -> Any:
    """The subscription's pending-ack log: ``pendingAckLogStats.ledgers`` and its cursor."""
    store = await stores.require(_topic(tenant, namespace, topic), sub)
    return store.internal_stats()


@router.post("/pendingAckBatchLog")
async def set_pending_ack_batch_log(body: BatchLogUpdate, stores: Stores) -> dict[str, bool]:
    """Switch batched pending-ack log writes on or off, at run time."""
    stores.set_batch_enabled(body.enabled)
    return {"txnPendingAckBatchLogEnabled": stores.batch_enabled}


@router.get("/pendingAckBatchLogStat")
async def pending_ack_batch_log_stat(stores: Stores) -> dict[str, Any]:
    """The switch, and each opened subscription's state (PIP-160's shape)."""
    return {
        "txnPendingAckBatchLogEnabled": stores.batch_enabled,
        "subscriptionArray": [
            {f"{s.topic}-{s.subscription}": s.batch_enabled} for s in stores.opened()
        ],
    }
