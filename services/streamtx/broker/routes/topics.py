"""Admin v2: partitioned topics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from streamtx.broker import fanout
from streamtx.broker.broker import Broker, SpreadPlan, partition_item
from streamtx.broker.deps import BrokerDep, topic_name
from streamtx.broker.topic import Topic
from streamtx.names import check_new_topic

router = APIRouter(prefix="/admin/v2/persistent/{tenant}/{namespace}/{topic}", tags=["topics"])


class PartitionsBody(BaseModel):
    """How many partitions a topic has."""

    partitions: int = Field(ge=1)


class TrimBody(BaseModel):
    """Trim partition ``partition`` before entry ``before`` (a message id)."""

    partition: int = Field(ge=0)
    before: str


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
async def topic_stats(tenant: str, namespace: str, topic: str, broker: BrokerDep) -> dict[str, object]:
    """The topic's stats; of one partition asked by its name (``x-partition-N``). A topic whose
    partitions are spread over broker replicas: every owner is asked for its partitions
    (:mod:`streamtx.broker.fanout`)."""
    name = topic_name(tenant, namespace, topic)
    at = broker.resolve(name)
    if isinstance(at, SpreadPlan):
        return await _spread_stats(broker, at)
    return await _local_stats(broker, at.topic, None if at.index is None else [at.index])


async def _spread_stats(broker: Broker, plan: SpreadPlan) -> dict[str, Any]:
    async def local(i: int) -> dict[str, Any] | None:
        t = plan.topic
        return await _local_stats(broker, t, [i]) if t is not None and i in t.owned else None

    return await fanout.gather(
        plan.name, plan.count, local, plan.owner_of,
        lambda i: f"/admin/v2/{partition_item(plan.name, i).replace('://', '/', 1)}/stats",
        broker.settings.outgoing_token(), broker.settings.pendingack_timeout_s)


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
        # Replication links span every partition: on the topic's name only.
        "replication": await broker.replication.stats(t.name, t.partitions) if only is None else {},
    }


@router.post("/trim")
async def trim_partition(tenant: str, namespace: str, topic: str, body: TrimBody,
               broker: BrokerDep) -> dict[str, object]:
    from streamtx.broker.codec import parse_message_id
    from streamtx.errors import MalformedError
    from streamtx.ledger import Position

    t = broker.topic(topic_name(tenant, namespace, topic))
    part = t.partition(body.partition)
    try:
        lid, eid, _ = parse_message_id(body.before)
    except ValueError as exc:
        raise MalformedError(f"bad position {body.before!r}") from exc
    if lid != part.ledger.ledger_id:
        raise MalformedError(f"{body.before!r} is not a position of {part.name}")
    dropped = await t.trim(body.partition, Position(lid, eid))
    return {"partition": part.name, "abortedIdsDropped": dropped,
            "firstPosition": str(fp) if (fp := part.ledger.first_position()) else None}
