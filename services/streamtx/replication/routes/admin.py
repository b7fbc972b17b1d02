"""Admin API of geo-replication, on Pulsar's paths (the broker forwards them here).

``PUT /admin/v2/clusters/{name}`` registers a peer, ``POST .../replication``
sets where a namespace's or topic's messages go; ``GET`` reads them back.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from streamtx.contracts.clusters import ClusterData, ClusterList, ClustersBody
from streamtx.errors import NotFoundError
from streamtx.names import check_name, topic_name
from streamtx.replication.deps import ControllerDep

router = APIRouter(prefix="/admin/v2", tags=["admin: replication"])

class ClusterPublic(ClusterData):
    """A registered cluster, with its broker URL when it answered discovery."""

    name: str
    broker_url: str | None = None


def _clusters(body: list[str] | ClustersBody) -> list[str]:
    """Pulsar sends a bare JSON list; ``{"clusters": [...]}`` is accepted too."""
    return list(body.clusters if isinstance(body, ClustersBody) else body)


def _check_name(name: str) -> None:
    check_name("cluster", name)  # Pulsar's rule for cluster names too


@router.get("/clusters")
async def list_clusters(controller: ControllerDep) -> list[str]:
    return controller.policies.known()


@router.get("/clusters/{name}")
async def get_cluster(name: str, controller: ControllerDep) -> ClusterPublic:
    url = controller.policies.clusters.get(name)
    if url is None:
        raise NotFoundError(f"cluster {name} is not registered")
    return ClusterPublic(name=name, service_url=url)


@router.put("/clusters/{name}")
async def put_cluster(name: str, body: ClusterData, controller: ControllerDep) -> ClusterPublic:
    _check_name(name)
    url = body.service_url.rstrip("/")
    broker = await controller.peers.check(name, url)  # 409 when it is another cluster
    if controller.policies.clusters.get(name) != url:
        await controller.policy_store.record({"kind": "cluster", "name": name, "service_url": url})
    return ClusterPublic(name=name, service_url=url, broker_url=broker)


@router.delete("/clusters/{name}")
async def delete_cluster(name: str, controller: ControllerDep) -> dict[str, str]:
    if name not in controller.policies.clusters:
        raise NotFoundError(f"cluster {name} is not registered")
    await controller.policy_store.record({"kind": "cluster_deleted", "name": name})
    return {"deleted": name}


@router.get("/namespaces/{tenant}/{namespace}/replication")
async def get_namespace_replication(tenant: str, namespace: str, controller: ControllerDep) -> list[str]:
    check_name("tenant", tenant)
    check_name("namespace", namespace)
    return controller.policies.namespaces.get(f"{tenant}/{namespace}", [])


@router.post("/namespaces/{tenant}/{namespace}/replication")
async def set_namespace_replication(tenant: str, namespace: str, controller: ControllerDep,
                                    body: ClusterList) -> list[str]:
    check_name("tenant", tenant)
    check_name("namespace", namespace)
    clusters = controller.policies.check_clusters(_clusters(body))
    await controller.policy_store.record({"kind": "namespace", "namespace": f"{tenant}/{namespace}",
                                   "clusters": clusters})
    return clusters


@router.get("/persistent/{tenant}/{namespace}/{topic}/replication")
async def get_topic_replication(tenant: str, namespace: str, topic: str, controller: ControllerDep,
                                applied: bool = False) -> list[str]:
    """The topic's own list (``?applied=true``: what applies, its namespace's when it has none)."""
    name = topic_name(tenant, namespace, topic)
    if applied:
        return controller.policies.clusters_for(name)
    return controller.policies.topics.get(name, [])


@router.post("/persistent/{tenant}/{namespace}/{topic}/replication")
async def set_topic_replication(tenant: str, namespace: str, topic: str, controller: ControllerDep,
                                body: ClusterList) -> list[str]:
    name = topic_name(tenant, namespace, topic)  # 400 on a control character, as a topic create
    clusters = controller.policies.check_clusters(_clusters(body))
    await controller.policy_store.record({"kind": "topic", "topic": name, "clusters": clusters})
    return clusters


@router.get("/replication/status")
async def status(controller: ControllerDep) -> dict[str, Any]:
    """The replicators running here: topic, partition, remote, connected, messages sent."""
    return {"cluster": controller.settings.cluster, "replicators": controller.status(),
            "replicatedSubscriptions": controller.snapshot_status()}
