"""Admin v3 transactions: the transaction buffer's stats."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from streamtx.broker.deps import BrokerDep, topic_name

router = APIRouter(prefix="/admin/v3/transactions", tags=["admin"])

_summed = ("ongoingTxnSize", "abortedTxnCount", "segmentsSize", "unsealedAbortedTxnIdSize")


@router.get("/transactionBufferStats/{tenant}/{namespace}/{topic}")
async def transaction_buffer_stats(tenant: str, namespace: str, topic: str, broker: BrokerDep,
                                   partition: int | None = Query(None, ge=0)) -> dict[str, Any]:
    """One partition's stats (``?partition=i`` or ``x-partition-i`` as topic), else every partition's."""
    name = topic_name(tenant, namespace, topic)
    if "-partition-" in topic and partition is None:
        return broker.resolve_partition(name).stats()
    t = broker.topic(name)
    if partition is not None:
        return t.partition(partition).stats()
    parts = [p.stats() for p in t.partitions]
    out: dict[str, Any] = {k: sum(int(s[k]) for s in parts) for k in _summed}  # type: ignore[call-overload]
    out["lastSnapshotTimestamp"] = max(int(s["lastSnapshotTimestamp"]) for s in parts)  # type: ignore[call-overload]
    out["partitions"] = parts
    return out
