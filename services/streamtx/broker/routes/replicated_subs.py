"""Replicated subscriptions (PIP-33): the controller's scan and update calls, Pulsar's status path.

Internal: ``POST /v1/replication/scan`` (a partition's markers and its replicated
subscriptions' mark-delete positions), ``POST /v1/replication/subscriptions/update``
(apply an update marker here). Admin: ``.../subscription/{sub}/replicatedSubscriptionStatus``.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Body
from pydantic import BaseModel, Field

from streamtx.broker import markers
from streamtx.broker.deps import BrokerDep, topic_name
from streamtx.broker.subscription import SubscriptionType
from streamtx.ledger import Position

router = APIRouter(prefix="/v1/replication", tags=["replication (internal)"])
admin = APIRouter(prefix="/admin/v2/persistent/{tenant}/{namespace}/{topic}/subscription/{sub}",
                  tags=["admin: replication"])


class ScanRequest(BaseModel):
    """Scan a partition after ``after`` (None: from ``back`` entries before its end)."""

    topic: str
    partition: int = Field(ge=0)
    after: str | None = None
    back: int = Field(10_000, ge=0)
    max_entries: int = Field(1000, ge=1, le=10_000)
    wait_ms: int = Field(0, ge=0, le=30_000)
    #: The mark-deletes the caller last saw: the long poll also ends when one moves
    #: (a snapshot it passed is an update to write now, not at the next entry).
    mark_deletes: dict[str, str | None] | None = None


class UpdateRequest(BaseModel):
    """Move ``subscription``'s mark-delete on one partition to ``position`` (never back)."""

    topic: str
    partition: int = Field(ge=0)
    subscription: str = Field(min_length=1)
    position: str


@router.post("/scan")
async def scan(body: ScanRequest, broker: BrokerDep) -> dict[str, Any]:
    t = broker.topic(body.topic)
    part = t.partition(body.partition)
    last, first = part.ledger.last_position(), part.ledger.first_position()
    if body.after is None and (last is None or first is None):
        out: dict[str, Any] = {"markers": [], "data": False, "last": None}
    else:
        if body.after is None:
            assert last is not None and first is not None
            start = Position(last.ledger_id, max(first.entry_id, last.entry_id - body.back))
        else:
            after = markers.parse_position(part, body.after)
            start = Position(after.ledger_id, part.ledger.next_entry_id(after.entry_id))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + body.wait_ms / 1000
        while True:
            out = await markers.scan(part, start, body.max_entries)
            remaining = deadline - loop.time()
            if out["last"] is not None or remaining <= 0:
                break
            if body.mark_deletes is not None and markers.mark_deletes(t, body.partition) != body.mark_deletes:
                break
            await t.notifier.wait(remaining)
        if out["last"] is None:
            out["last"] = body.after or (str(last) if last else None)
    out["subscriptions"] = markers.mark_deletes(t, body.partition)
    return out


@router.post("/subscriptions/update")
async def update(body: UpdateRequest, broker: BrokerDep) -> dict[str, Any]:
    """Apply an update marker: created at the earliest position if missing, then moved forward."""
    t = broker.topic(body.topic)
    part = t.partition(body.partition)
    pos = markers.parse_position(part, body.position)
    sub = t.subscriptions.get(body.subscription)
    if sub is None:
        sub = await broker.create_subscription(t.name, body.subscription, SubscriptionType.SHARED, "earliest",
                                               replicated=True)
    dispatch = sub.parts[body.partition]
    mark = dispatch.cursor.mark_delete_position
    if mark is None or pos > mark:
        await dispatch.cursor.mark_delete(pos)
        dispatch.forget_through(pos, None)
        t.notifier.changed()
    md = dispatch.cursor.mark_delete_position
    return {"subscription": sub.name, "markDeletePosition": str(md) if md else None}


@admin.post("/replicatedSubscriptionStatus")
async def set_status(tenant: str, namespace: str, topic: str, sub: str, broker: BrokerDep,
                     enabled: Annotated[bool, Body()]) -> dict[str, bool]:
    """Pulsar's switch: ``true`` makes the subscription replicated, ``false`` stops it."""
    s = broker.topic(topic_name(tenant, namespace, topic)).subscription(sub)
    await broker.set_replicated(s, enabled)
    return {s.topic: s.replicated}


@admin.get("/replicatedSubscriptionStatus")
async def get_status(tenant: str, namespace: str, topic: str, sub: str, broker: BrokerDep) -> dict[str, bool]:
    s = broker.topic(topic_name(tenant, namespace, topic)).subscription(sub)
    return {s.topic: s.replicated}
