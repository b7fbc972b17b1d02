"""Geo-replication on the broker: the controller's internal calls, and the admin paths it answers.

Internal (the replication controller calls them; service credential):
``POST /v1/replication/cursor`` (open the ``pulsar.repl.<remote>`` cursor, reached or not),
``POST /v1/replication/cursor/delete`` (the topic no longer replicates to the remote: its cursors go),
``POST /v1/replication/read`` (a partition's local entries for a remote),
``POST /v1/replication/ack`` (move the ``pulsar.repl.<remote>`` cursor),
``POST /v1/replication/write`` (append entries copied from another cluster),
``POST /v1/replication/markers`` (append a replication marker written here),
``GET /v1/replication/topics`` (what the broker serves), ``POST /v1/replication/topics``
(create a topic replicated here, as its source has it).

The bodies are :mod:`streamtx.contracts.replication`'s (the controller builds the same
models). Every call but ``/topics`` names one partition (``topic`` + ``partition``) and is
served by that partition's owner, as a request to ``x-partition-N`` is: broker
replicas split a topic's partitions, and a replica that does not own it answers
307 to the one that does. The replicator cursor is state of the partition, so it
opens wherever the partition is open now (:class:`~streamtx.broker.replication.state.PartitionLink`).

Admin: Pulsar's clusters and replication paths answer on the broker, as in
Pulsar; the replication controller does the work, so they are forwarded to it
with the caller's own credential (its admin token) and its answer returned as is.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request, Response

from streamtx.broker.deps import BrokerDep
from streamtx.broker.partition import Partition
from streamtx.broker.registry import Broker, partition_item
from streamtx.broker.replication import state as repl
from streamtx.broker.topic import Topic
from streamtx.contracts.clusters import ClusterData, ClusterList
from streamtx.contracts.replication import (
    ReplicatedTopic,
    ReplicationMarker,
    ReplicationRead,
    ReplicationTopics,
    ReplicationWrite,
    ReplicatorAck,
    ReplicatorCursor,
    ReplicatorCursorDelete,
)
from streamtx.errors import MalformedError, NotFoundError, UnavailableError
from streamtx.ledger import Position
from streamtx.transport import HttpClient

router = APIRouter(prefix="/v1/replication", tags=["replication (internal)"])
admin = APIRouter(prefix="/admin/v2", tags=["admin: replication"])


@router.get("/topics", response_model=ReplicationTopics)
async def topics(broker: BrokerDep) -> dict[str, Any]:
    # Every topic of the cluster (the catalog), wherever it is served: the controller's calls
    # about one partition are redirected to its owner.
    # ``remotes``: those it has replicator cursors for (the controller deletes those it no longer wants).
    topics = broker.catalog.topics.items()
    return {"topics": [{"topic": name, "partitions": t.partitions, "remotes": sorted(t.remotes)}
                       for name, t in topics]}


@router.post("/topics")
async def ensure_topic(body: ReplicatedTopic, broker: BrokerDep) -> ReplicatedTopic:
    """Create a topic a remote cluster replicates here (409 if it exists with other partitions)."""
    await broker.create_topic(body.topic, body.partitions)
    return body


async def owned_partition(broker: Broker, topic: str, index: int) -> tuple[Topic, Partition]:
    """Partition ``index`` of ``topic``, addressed by its own name (``x-partition-N``) as every
    per-partition call is: served where it is open; elsewhere a :class:`NotOwnerError` (307 to
    its owner, which the controller's client follows; 503 while it moves)."""
    await broker.known(topic)  # replicas: a topic another replica just created
    t, _ = broker.target(partition_item(topic, index))
    return t, t.partition(index)


@router.post("/cursor")
async def open_cursor(body: ReplicatorCursor, broker: BrokerDep) -> dict[str, Any]:
    """The replicator's first call, before the remote is ever reached: from now on the cursor
    holds back trims and counts the backlog (a new cursor starts at the partition's first entry)."""
    t, part = await owned_partition(broker, body.topic, body.partition)
    await broker.note_remote(t.name, body.remote)
    link = await broker.replication.link(t.name, body.partition, part, body.remote)
    link.reaches = body.connected
    return {"firstUnreplicated": str(link.cursor.first_undeleted())}


@router.post("/cursor/delete")
async def delete_cursor(body: ReplicatorCursorDelete, broker: BrokerDep) -> dict[str, Any]:
    """The remote left the topic's replication policy (or was deleted): its ``pulsar.repl.<remote>``
    cursors stop holding back trims, on every partition (each broker replica deletes those of the
    partitions it owns; the others at their next catalog tick)."""
    await broker.forget_remote(body.topic, body.remote)
    return {"topic": body.topic, "remote": body.remote, "deleted": True}


@router.post("/read")
async def read(body: ReplicationRead, broker: BrokerDep) -> dict[str, Any]:
    t, part = await owned_partition(broker, body.topic, body.partition)
    link = await broker.replication.link(t.name, body.partition, part, body.remote)
    link.reaches = body.connected
    loop = asyncio.get_running_loop()
    deadline = loop.time() + body.wait_ms / 1000
    while True:
        start = repl.start_of(part, link.cursor, body.after)
        items, last = await repl.read_local(part, start, body.max_entries)
        remaining = deadline - loop.time()
        if last is not None or remaining <= 0:
            break
        await t.notifier.wait(remaining)
        if t.owned.get(body.partition) is not part:  # handed over meanwhile: ask its new owner
            raise t.not_owner(body.partition)
    return {"entries": items, "last": str(last) if last else None}


@router.post("/ack")
async def ack(body: ReplicatorAck, broker: BrokerDep) -> dict[str, Any]:
    t, part = await owned_partition(broker, body.topic, body.partition)
    link = await broker.replication.link(t.name, body.partition, part, body.remote)
    try:
        pos = Position.parse(body.position)
    except ValueError:
        raise MalformedError(f"bad position {body.position!r}") from None
    if pos.ledger_id != part.ledger.ledger_id:
        raise NotFoundError(f"{body.position} is not a position of partition {body.partition}")
    await link.cursor.mark_delete(pos)
    link.out.add(body.messages, body.bytes)
    return {"markDeletePosition": str(link.cursor.mark_delete_position)}


@router.post("/write")
async def write(body: ReplicationWrite, broker: BrokerDep) -> dict[str, Any]:
    t, part = await owned_partition(broker, body.topic, body.partition)
    cluster = broker.replication.cluster
    written, dropped = await repl.write_replicated(part, body.source, body.entries, cluster)
    if written:
        msgs = [m for e in body.entries for m in e.messages or ()]
        broker.replication.incoming_meter(t.name, body.partition, body.source).add(
            len(msgs), sum(len(m.value) * 3 // 4 for m in msgs))
    return {"written": written, "duplicates": dropped}


@router.post("/markers")
async def marker(body: ReplicationMarker, broker: BrokerDep) -> dict[str, Any]:
    _, part = await owned_partition(broker, body.topic, body.partition)
    pos = await part.append_marker(repl.marker_bytes(body.marker))
    return {"position": str(pos)}


# --- admin paths the replication controller serves -------------------------------


def _controller(request: Request) -> HttpClient:
    client: HttpClient = request.app.state.replication_client  # made by the app (app.py)
    if not client.configured:
        raise NotFoundError("this cluster runs no replication controller (STREAMTX_REPLICATION_URL)")
    return client


async def _forward(request: Request) -> Response:
    """The same call on the controller, with the caller's own credential; its answer as is."""
    headers = {k: v for k, v in request.headers.items() if k in ("authorization", "content-type")}
    # The path as it came, still percent-encoded: decoded, a name with control characters
    # was an invalid URL to httpx, and a 500 (found by the fuzzer).
    raw: bytes | None = request.scope.get("raw_path")
    path = raw.decode("latin-1") if raw else request.url.path
    try:
        r = await _controller(request).send(request.method, path, content=await request.body(),
                                            params=request.query_params, headers=headers, errors=False)
    except UnavailableError as exc:
        raise UnavailableError(f"the replication controller does not answer: {exc}") from None
    return Response(r.content, status_code=r.status_code, media_type="application/json")


@admin.get("/clusters")
async def list_clusters(request: Request) -> Response:
    """The clusters this one knows: itself and every registered peer."""
    return await _forward(request)


@admin.get("/clusters/{name}")
async def get_cluster(name: str, request: Request) -> Response:
    return await _forward(request)


@admin.put("/clusters/{name}")
async def put_cluster(name: str, request: Request, body: ClusterData) -> Response:
    """Register a peer cluster: ``{"service_url": "<any service URL of it>"}``."""
    return await _forward(request)


@admin.delete("/clusters/{name}")
async def delete_cluster(name: str, request: Request) -> Response:
    return await _forward(request)


@admin.get("/namespaces/{tenant}/{namespace}/replication")
async def get_namespace_replication(tenant: str, namespace: str, request: Request) -> Response:
    return await _forward(request)


@admin.post("/namespaces/{tenant}/{namespace}/replication")
async def set_namespace_replication(tenant: str, namespace: str, request: Request,
                                    body: ClusterList) -> Response:
    """Where the namespace's messages go: a list of cluster names."""
    return await _forward(request)


@admin.get("/persistent/{tenant}/{namespace}/{topic}/replication")
async def get_topic_replication(tenant: str, namespace: str, topic: str, request: Request) -> Response:
    return await _forward(request)


@admin.post("/persistent/{tenant}/{namespace}/{topic}/replication")
async def set_topic_replication(tenant: str, namespace: str, topic: str, request: Request,
                                body: ClusterList) -> Response:
    """Where one topic's messages go (overrides its namespace's list)."""
    return await _forward(request)
