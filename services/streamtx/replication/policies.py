"""Which clusters exist and where each namespace's and topic's messages go. Pure: no I/O.

The state is rebuilt by applying records in log order (:mod:`streamtx.replication.store`
persists them); each record is one JSON object:

* ``{"kind": "cluster", "name", "service_url"}`` registers (or moves) a peer;
* ``{"kind": "cluster_deleted", "name"}`` forgets one;
* ``{"kind": "namespace", "namespace": "tenant/ns", "clusters": [...]}``;
* ``{"kind": "topic", "topic": "persistent://tenant/ns/x", "clusters": [...]}``
  (overrides its namespace's list; an empty list falls back to the namespace's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streamtx.errors import MalformedError, NotFoundError


@dataclass
class Policies:
    """The replication policies of one cluster (named ``local``)."""

    local: str
    clusters: dict[str, str] = field(default_factory=dict)  # name -> a service URL of it
    namespaces: dict[str, list[str]] = field(default_factory=dict)
    topics: dict[str, list[str]] = field(default_factory=dict)

    def apply(self, record: dict[str, Any]) -> None:
        kind = record["kind"]
        if kind == "cluster":
            self.clusters[str(record["name"])] = str(record["service_url"])
        elif kind == "cluster_deleted":
            self.clusters.pop(str(record["name"]), None)
        elif kind == "namespace":
            self.namespaces[str(record["namespace"])] = list(record["clusters"])
        elif kind == "topic":
            clusters = list(record["clusters"])
            if clusters:
                self.topics[str(record["topic"])] = clusters
            else:
                self.topics.pop(str(record["topic"]), None)

    def known(self) -> list[str]:
        """Every cluster name: this one and the registered peers."""
        return sorted({self.local, *self.clusters})

    def check_clusters(self, clusters: list[str]) -> list[str]:
        """``clusters`` deduplicated, in order; 400 when one is unknown."""
        unknown = [c for c in clusters if c != self.local and c not in self.clusters]
        if unknown:
            raise NotFoundError(f"unknown cluster(s) {unknown}: register them with "
                                 "PUT /admin/v2/clusters/NAME")
        return list(dict.fromkeys(clusters))

    def clusters_for(self, topic: str) -> list[str]:
        """Where ``persistent://tenant/ns/x`` replicates: its own list, else its namespace's."""
        own = self.topics.get(topic)
        if own:
            return own
        return self.namespaces.get(namespace_of(topic), [])

    def remotes_for(self, topic: str) -> list[str]:
        """The registered clusters other than this one that ``topic`` goes to."""
        return [c for c in self.clusters_for(topic) if c != self.local and c in self.clusters]


def namespace_of(topic: str) -> str:
    """``persistent://tenant/ns/x`` -> ``tenant/ns``."""
    rest = topic.removeprefix("persistent://")
    parts = rest.split("/")
    if len(parts) != 3:
        raise MalformedError(f"not a topic name: {topic!r}")
    return f"{parts[0]}/{parts[1]}"
