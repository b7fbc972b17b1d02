"""Replicated subscriptions (PIP-33): the controller's scan and update calls, Pulsar's status path.

Internal: ``POST /v1/replication/scan`` (a partition's markers and its replicated
subscriptions' mark-delete positions), ``POST /v1/replication/subscriptions/update``
(apply an update marker here), ``POST /v1/replication/acks/export`` (what a
subscription acknowledged past its synced position, by origin) and
``POST /v1/replication/acks/apply`` (acknowledge here what another cluster's
``acks`` marker names). Admin: ``.../subscription/{sub}/replicatedSubscriptionStatus``.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Body

from streamtx.broker.deps import BrokerDep, topic_name
from streamtx.broker.registry import Broker, split_partition
from streamtx.broker.replication import markers
from streamtx.broker.replication.routes import owned_partition
from streamtx.broker.subscription import Subscription, SubscriptionType
from streamtx.broker.topic import Topic
from streamtx.contracts.ackset import AckSet
from streamtx.contracts.replication import (
    AckApply,
    AckExport,
    AppliedAcks,
    ExportedAcks,
    ReplicatedSubscriptionUpdate,
    ReplicationScan,
    ScannedMarkers,
)
from streamtx.errors import MalformedError, NotFoundError
from streamtx.ledger import Position

#: Entries an ack export or apply reads at most per call (acks further on wait for the next).
ACK_SYNC_MAX_ENTRIES = 50_000
_boot = uuid.uuid4().hex  # tokens of a restarted broker never match older ones

router = APIRouter(prefix="/v1/replication", tags=["replication (internal)"])
admin = APIRouter(prefix="/admin/v2/persistent/{tenant}/{namespace}/{topic}/subscription/{sub}",
                  tags=["admin: replication"])


@router.post("/scan", response_model=ScannedMarkers)
async def scan(body: ReplicationScan, broker: BrokerDep) -> dict[str, Any]:
    t, part = await owned_partition(broker, body.topic, body.partition)
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


async def _replicated_sub(broker: Broker, t: Topic, name: str) -> Subscription:
    """The subscription, created at the earliest position if another cluster has it and we do not.

    ``t``: the topic as open here (broker replicas: this replica's partitions of it)."""
    sub = t.subscriptions.get(name)
    if sub is None:
        created = await broker.create_subscription(t.name, name, SubscriptionType.SHARED, "earliest",
                                                   replicated=True)
        assert created is not None  # the topic is open here
        sub = created
    return sub


@router.post("/acks/export", response_model=ExportedAcks)
async def export_acks(body: AckExport, broker: BrokerDep) -> dict[str, Any]:
    t, part = await owned_partition(broker, body.topic, body.partition)
    dispatch = t.subscription(body.subscription).part(body.partition)
    after = markers.parse_position(part, body.after) if body.after else None
    token = f"{_boot}:{id(dispatch.cursor)}:{dispatch.cursor.version}:{after}:{body.back}"
    if token == body.known:
        return {"token": token, "origins": None}
    acks = await markers.export_acks(part, dispatch, broker.settings.cluster, after, body.back,
                                     ACK_SYNC_MAX_ENTRIES)
    return {"token": token, "origins": acks.to_wire()}


@router.post("/acks/apply", response_model=AppliedAcks)
async def apply_acks(body: AckApply, broker: BrokerDep) -> dict[str, Any]:
    t, part = await owned_partition(broker, body.topic, body.partition)
    try:
        acks = AckSet.from_wire(body.origins)
    except ValueError as exc:
        raise MalformedError(f"bad acks: {exc}") from None
    sub = await _replicated_sub(broker, t, body.subscription)
    dispatch = sub.part(body.partition)
    start = markers.parse_position(part, body.start) if body.start else None
    got = await markers.acked_here(part, dispatch, broker.settings.cluster, acks, ACK_SYNC_MAX_ENTRIES, start)
    acked = await sub.ack_synced(dispatch, got.units, got.fillers)
    return {"subscription": sub.name, "acked": acked, "complete": not got.missing,
            "missing": [list(o) for o in got.missing], "next": str(got.next)}


@router.post("/subscriptions/update")
async def update(body: ReplicatedSubscriptionUpdate, broker: BrokerDep) -> dict[str, Any]:
    """Apply an update marker: created at the earliest position if missing, then moved forward."""
    t, part = await owned_partition(broker, body.topic, body.partition)
    pos = markers.parse_position(part, body.position)
    sub = await _replicated_sub(broker, t, body.subscription)
    dispatch = sub.part(body.partition)
    mark = dispatch.cursor.mark_delete_position
    if mark is None or pos > mark:
        await dispatch.cursor.mark_delete(pos)
        dispatch.take_through(pos, None)
        t.notifier.changed()
    md = dispatch.cursor.mark_delete_position
    return {"subscription": sub.name, "markDeletePosition": str(md) if md else None}


async def _subscription_record(broker: Broker, name: str, sub: str) -> tuple[str, bool]:
    """(the topic's name, whether ``sub`` is replicated), from the catalog: every replica
    answers, also for a topic whose partitions are spread over several (or a partition's name)."""
    base, index = split_partition(name)
    if index is not None and name not in broker.catalog.topics and base in broker.catalog.topics:
        name = base
    record = (await broker.known(name)).subscriptions.get(sub)
    if record is None:
        raise NotFoundError(f"subscription {sub} of {name} does not exist")
    return name, record.replicated


@admin.post("/replicatedSubscriptionStatus")
async def set_status(tenant: str, namespace: str, topic: str, sub: str, broker: BrokerDep,
                     enabled: Annotated[bool, Body(strict=True)]) -> dict[str, bool]:
    """Pulsar's switch: ``true`` makes the subscription replicated, ``false`` stops it (recorded
    in the catalog: the other broker replicas holding its partitions follow at their next tick)."""
    name, _ = await _subscription_record(broker, topic_name(tenant, namespace, topic), sub)
    t = broker.topics.get(name)
    await broker.set_replicated(name, sub, t.subscriptions.get(sub) if t is not None else None, enabled)
    return {name: enabled}


@admin.get("/replicatedSubscriptionStatus")
async def get_status(tenant: str, namespace: str, topic: str, sub: str, broker: BrokerDep) -> dict[str, bool]:
    name, replicated = await _subscription_record(broker, topic_name(tenant, namespace, topic), sub)
    return {name: replicated}
