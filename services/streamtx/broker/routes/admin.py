"""Admin v3 transactions: the transaction buffer's stats."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from fastapi import APIRouter, Query, Request

from streamtx.broker.deps import BrokerDep, topic_name
from streamtx.broker.replicas import spread
from streamtx.broker.replicas.plan import SpreadPlan
from streamtx.errors import NotFoundError

router = APIRouter(prefix="/admin/v3/transactions", tags=["admin"])

_summed = ("ongoingTxnSize", "abortedTxnCount", "segmentsSize", "unsealedAbortedTxnIdSize")


@router.get("/transactionBufferStats/{tenant}/{namespace}/{topic}")
async def transaction_buffer_stats(request: Request, tenant: str, namespace: str, topic: str,
                                   broker: BrokerDep, partition: int | None = Query(None, ge=0)
                                   ) -> dict[str, Any]:
    """One partition's stats (``?partition=i`` or ``x-partition-i`` as topic), else every partition's."""
    name = topic_name(tenant, namespace, topic)
    if "-partition-" in topic and partition is None:
        return broker.resolve_partition(name).stats()
    at = broker.resolve(name)
    if isinstance(at, SpreadPlan):  # spread over broker replicas: each partition asked of its owner
        plan = at
        forwarder: spread.Forwarder = request.app.state.forwarder

        async def one(i: int) -> dict[str, Any]:
            owner = plan.owner_of(i)
            if owner is None:
                assert plan.topic is not None
                return plan.topic.partition(i).stats()
            path = f"/admin/v3/transactions/transactionBufferStats/{tenant}/{namespace}/{topic}-partition-{i}"
            body: dict[str, Any] = orjson.loads((await forwarder.send(owner, "GET", path)).content)
            return body

        if partition is not None:
            if partition >= plan.count:
                raise NotFoundError(f"{name} has no partition {partition}") from None
            return await one(partition)
        return _summed_up(list(await asyncio.gather(*(one(i) for i in range(plan.count)))))
    if partition is not None:
        return at.topic.partition(partition).stats()
    return _summed_up([p.stats() for p in at.topic.partitions])


def _summed_up(parts: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {k: sum(int(s[k]) for s in parts) for k in _summed}
    out["lastSnapshotTimestamp"] = max(int(s["lastSnapshotTimestamp"]) for s in parts)
    out["partitions"] = parts
    return out
