"""Admin v2: partitioned topics."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from fastapi import APIRouter, Request
from pydantic import Field

from streamtx.broker.deps import BrokerDep, topic_name
from streamtx.broker.registry import Broker, Local, max_partitions, partition_item
from streamtx.broker.replicas import fanout, spread
from streamtx.broker.replicas.plan import SpreadPlan
from streamtx.broker.topic import Topic
from streamtx.contracts.body import StrictBody
from streamtx.contracts.msgid import MessageId, MessageIdText
from streamtx.errors import NotFoundError
from streamtx.ledger import Position
from streamtx.names import check_new_topic

router = APIRouter(prefix="/admin/v2/persistent/{tenant}/{namespace}/{topic}", tags=["topics"])


class PartitionsBody(StrictBody):
    """How many partitions a topic has."""

    partitions: int = Field(ge=1, le=max_partitions)


class TrimBody(StrictBody):
    """Trim partition ``partition`` before entry ``before`` (a message id of that partition; when
    absent, all that every subscription consumed). Without ``partition``: the partition ``before``
    is of (its ledger id names it), or every partition when ``before`` is absent too."""

    partition: int | None = Field(default=None, ge=0)
    before: MessageIdText | None = None


@router.put("/partitions")
async def create_partitions(tenant: str, namespace: str, topic: str, body: PartitionsBody,
                            broker: BrokerDep) -> PartitionsBody:
    await broker.create_topic(topic_name(tenant, namespace, check_new_topic(topic)), body.partitions)
    return body


@router.get("/partitions")
async def get_partitions(tenant: str, namespace: str, topic: str, broker: BrokerDep) -> PartitionsBody:
    # Any replica answers (Pulsar's partitioned-topic metadata): the catalog is everyone's.
    return PartitionsBody(partitions=(await broker.known(topic_name(tenant, namespace, topic))).partitions)


@router.get("/stats")
async def topic_stats(tenant: str, namespace: str, topic: str, broker: BrokerDep,
                      request: Request) -> dict[str, object]:
    """The topic's stats; of one partition asked by its name (``x-partition-N``). A topic whose
    partitions are spread over broker replicas: every owner is asked for its partitions
    (:mod:`streamtx.broker.replicas.fanout`)."""
    name = topic_name(tenant, namespace, topic)
    at = broker.resolve(name)
    if isinstance(at, SpreadPlan):
        return await _spread_stats(broker, at, request.app.state.forwarder)
    return await _local_stats(broker, at.topic, None if at.index is None else [at.index])


async def _spread_stats(broker: Broker, plan: SpreadPlan, forwarder: spread.Forwarder) -> dict[str, Any]:
    async def local(i: int) -> dict[str, Any] | None:
        t = plan.topic
        return await _local_stats(broker, t, [i]) if t is not None and i in t.owned else None

    return await fanout.gather(
        plan.name, plan.count, local, plan.owner_of,
        lambda i: f"/admin/v2/{partition_item(plan.name, i).replace('://', '/', 1)}/stats",
        forwarder.owner)


async def _local_stats(broker: Broker, t: Topic, only: list[int] | None) -> dict[str, Any]:
    subs = {name: await s.stats(only) for name, s in t.subscriptions.items()}
    parts: list[dict[str, Any]] = []
    for i, p in sorted(t.owned.items()):
        if only is not None and i not in only:
            continue
        last = p.ledger.last_position()
        parts.append({"partition": p.name, "lastPosition": str(last) if last else None,
                      "maxReadPosition": str(mrp) if (mrp := p.max_read_position()) else None,
                      "storageSize": sum(s.size for s in p.ledger.stats()),
                      "entries": sum(s.entries for s in p.ledger.stats())})
    return {
        "topic": t.name,
        "partitions": parts,
        "storageSize": sum(p["storageSize"] for p in parts),
        "subscriptions": subs,
        "replication": await broker.replication.stats(t.name, sorted(t.owned) if only is None else only),
    }


@router.post("/trim")
async def trim_topic(request: Request, tenant: str, namespace: str, topic: str, broker: BrokerDep,
                     body: TrimBody | None = None) -> dict[str, Any]:
    """Trim one partition (``partition``, the partition ``before`` is of, or the partition the
    name is) or every partition of the topic (Pulsar's trim of a partitioned topic: asked of
    each partition's owner when they are spread over broker replicas; 200 only when every
    partition was trimmed)."""
    body = body or TrimBody()
    name = topic_name(tenant, namespace, topic)
    at = broker.resolve(name, here=request.headers.get(spread.HERE) is not None)
    if isinstance(at, Local) and at.index is not None:  # a partition's own name
        if body.partition not in (None, at.index):
            # The partition's own name has no other partition (a `partition` it lacks: 404).
            raise NotFoundError(f"partition {body.partition} asked of partition {at.index}")
        return await _trim_here(broker, at.topic, at.index, body.before)
    plan = at if isinstance(at, SpreadPlan) else None
    here = at.topic  # the partitions open here, if any
    forwarder: spread.Forwarder = request.app.state.forwarder

    async def one(i: int) -> dict[str, Any]:
        owner = plan.owner_of(i) if plan is not None else None
        if owner is None:
            if here is None:
                raise NotFoundError(f"{name} has no partition {i}")
            return await _trim_here(broker, here, i, body.before)
        path = f"/admin/v2/{partition_item(name, i).replace('://', '/', 1)}/trim"
        r = await forwarder.send(owner, "POST", path, content=orjson.dumps({"before": body.before}),
                                 headers={"content-type": "application/json"})
        answer: dict[str, Any] = orjson.loads(r.content)
        return answer

    if body.partition is not None:
        if plan is not None and body.partition >= plan.count:
            raise NotFoundError(f"{name} has no partition {body.partition}")
        return await one(body.partition)
    if body.before is not None:  # a message id names its partition (by its ledger id), as an ack's does
        index = broker.ledger_partitions(name).get(MessageId.parse(body.before).ledger_id)
        if index is None:
            raise NotFoundError(f"{body.before} is a message id of no partition of {name}")
        return await one(index)
    indexes = list(range(at.count)) if isinstance(at, SpreadPlan) else sorted(at.topic.owned)
    got = await asyncio.gather(*(one(i) for i in indexes), return_exceptions=True)
    return {"topic": name, "partitions": spread.every_partition(f"trim of {name}", indexes, got)}


async def _trim_here(broker: Broker, t: Topic, index: int, before: str | None) -> dict[str, Any]:
    """Trim a partition open here before ``before`` (or all that every subscription consumed)."""
    part = t.partition(index)
    if before is None:
        last = part.ledger.last_position()
        limit = None if last is None else Position(last.ledger_id, last.entry_id + 1)
    else:
        lid, eid, _ = MessageId.parse(before)
        if lid != part.ledger.ledger_id:
            raise NotFoundError(f"{before!r} is not a position of {part.name}")  # another partition's
        limit = Position(lid, eid)
    if broker.replicas:  # a subscription recorded elsewhere holds back this trim as well
        await broker.catch_up()
    dropped = await t.trim(index, limit) if limit is not None else 0
    return {"partition": part.name, "abortedIdsDropped": dropped,
            "firstPosition": str(fp) if (fp := part.ledger.first_position()) else None}
