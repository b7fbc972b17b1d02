"""Admin v2: partitioned topics."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from streamtx.broker.deps import BrokerDep, topic_name
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
    t = broker.topic(topic_name(tenant, namespace, topic))
    subs = {name: await s.stats() for name, s in t.subscriptions.items()}
    parts = []
    for p in t.partitions:
        last = p.ledger.last_position()
        parts.append({"partition": p.name, "lastPosition": str(last) if last else None,
                      "maxReadPosition": str(mrp) if (mrp := p.max_read_position()) else None,
                      "storageSize": sum(s.size for s in p.ledger.stats()),
                      "entries": sum(s.entries for s in p.ledger.stats())})
    return {
        "topic": t.name,
        "partitions": parts,
        "storageSize": sum(p["storageSize"] for p in parts),  # type: ignore[misc]
        "subscriptions": subs,
        "replication": await broker.replication.stats(t.name, t.partitions),
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
