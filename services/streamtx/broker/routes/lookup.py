"""Pulsar's topic lookup: ``GET /lookup/v2/topic/persistent/{tenant}/{namespace}/{topic}``.

Answers which broker serves a topic, in Pulsar's ``LookupData`` shape. As in
Pulsar, a partitioned topic is looked up per partition (``x-partition-3``), and
each partition has its own owner (the lease is the partition's,
:mod:`streamtx.broker.replicas.leases`); the base name answers partition 0's owner.
Brokers speak HTTP only, so ``brokerUrl`` is the HTTP URL as well and the TLS
fields are empty. While the partition moves between replicas: 503
``not_owner`` with ``owner: null`` (retry).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel

from streamtx.broker.deps import BrokerDep, topic_name
from streamtx.broker.registry import partition_item, split_partition
from streamtx.errors import NotFoundError, NotOwnerError
from streamtx.ownership import Ownership

router = APIRouter(prefix="/lookup/v2/topic", tags=["lookup"])


class LookupData(BaseModel):
    """Pulsar's lookup answer."""

    brokerUrl: str
    brokerUrlTls: str = ""
    httpUrl: str
    httpUrlTls: str = ""
    nativeUrl: str


@router.get("/persistent/{tenant}/{namespace}/{topic}", response_model=LookupData)
async def lookup_topic(request: Request, broker: BrokerDep, tenant: str, namespace: str, topic: str
                       ) -> LookupData:
    name = topic_name(tenant, namespace, topic)
    base, index = split_partition(name)
    if base not in broker.catalog.topics and name in broker.catalog.topics:
        base, index = name, None  # a topic whose own name ends in -partition-N
    record = await broker.known(base)
    if index is not None and index >= record.partitions:
        raise NotFoundError(f"{base} has no partition {index}")
    item = partition_item(base, index or 0)
    if broker.is_open(item):
        url = request.app.state.settings.own_url()
    else:
        # Asked of Redis, not of the owner map (refreshed once a tick): a lookup is rare and
        # should be as fresh as the leases.
        ownership: Ownership | None = request.app.state.ownership
        url = await ownership.owner_url(item) if ownership is not None else None
        if url is None or url == request.app.state.settings.own_url():
            raise NotOwnerError(f"partition {item} is moving between brokers", None)
    return LookupData(brokerUrl=url, httpUrl=url, nativeUrl=url)
