"""Admin API of geo-replication, on Pulsar's paths (the broker forwards them here).

``PUT /admin/v2/clusters/{name}`` registers a peer, ``POST .../replication``
sets where a namespace's or topic's messages go; ``GET`` reads them back.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Body
from pydantic import Field, field_validator

from streamtx.contracts.body import StrictBody
from streamtx.errors import MalformedError, NotFoundError
from streamtx.names import check_name, topic_name
from streamtx.replication.deps import ControllerDep

router = APIRouter(prefix="/admin/v2", tags=["admin: replication"])

#: A replication list: Pulsar's bare JSON list (``{"clusters": [...]}`` is accepted too).
ClusterList = Annotated[Any, Body()]


class ClusterData(StrictBody):
    """A peer cluster: any service URL of it (its ``/v1/cluster`` lists the others)."""

    # A host after the scheme, printable ASCII (the fuzzer's finds: "http://" alone was stored as
    # "http:" and broke every later read; non-ASCII was an invalid URL to httpx, a 500).
    service_url: str = Field(min_length=1, max_length=2048, pattern=r"^https?://[A-Za-z0-9\[][!-~]*$")

    @field_validator("service_url")
    @classmethod
    def _a_plain_service_url(cls, url: str) -> str:
        return check_service_url(url)


def check_service_url(url: str) -> str:
    """``url`` when it is http(s)://host[:port][/path] with a port in 1-65535 and no credentials in it.

    The controller sends the service token to this URL, and every later call parses it again:
    ``user:pass@`` would put a secret in the log and the policy store, a port of 99999 fails
    each call instead of this one (``ValueError``: a 400 ``malformed``).
    """
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port out of range or not a number
    except ValueError as exc:
        raise ValueError(f"service_url {url[:100]!r}: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError("service_url: http:// or https:// only")
    if "@" in parts.netloc:
        raise ValueError("service_url: no user or password in the URL (the service token is sent)")
    if not parts.hostname:
        raise ValueError("service_url: no host")
    if port == 0:
        raise ValueError("service_url: port 0")
    if parts.query or parts.fragment:
        raise ValueError("service_url: no query or fragment")
    return url


class ClusterPublic(ClusterData):
    """A registered cluster, with its broker URL when it answered discovery."""

    name: str
    broker_url: str | None = None


def _clusters(body: Any) -> list[str]:
    """Pulsar sends a bare JSON list; ``{"clusters": [...]}`` is accepted too."""
    if isinstance(body, dict):
        body = body.get("clusters")
    if not isinstance(body, list) or not all(isinstance(c, str) and c for c in body):
        raise MalformedError("body: a list of cluster names, e.g. [\"a\", \"b\"]")
    return list(body)


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
    name = f"persistent://{tenant}/{namespace}/{topic}"
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
