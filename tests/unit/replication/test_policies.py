"""Replication policies: which clusters a topic goes to, rebuilt from records."""

from __future__ import annotations

import pytest

from streamtx.errors import MalformedError, NotFoundError
from streamtx.replication.policies import Policies, namespace_of


def _policies() -> Policies:
    p = Policies("a")
    for record in (
        {"kind": "cluster", "name": "b", "service_url": "http://b:1"},
        {"kind": "cluster", "name": "c", "service_url": "http://c:1"},
        {"kind": "namespace", "namespace": "t/n", "clusters": ["a", "b", "c"]},
        {"kind": "topic", "topic": "persistent://t/n/only-b", "clusters": ["a", "b"]},
    ):
        p.apply(record)
    return p


def test_topic_list_overrides_namespace_list() -> None:
    p = _policies()
    assert p.remotes_for("persistent://t/n/x") == ["b", "c"]
    assert p.remotes_for("persistent://t/n/only-b") == ["b"]
    assert p.remotes_for("persistent://t/other/x") == []
    p.apply({"kind": "topic", "topic": "persistent://t/n/only-b", "clusters": []})  # back to the namespace's
    assert p.remotes_for("persistent://t/n/only-b") == ["b", "c"]


def test_a_deleted_cluster_is_no_longer_a_remote() -> None:
    p = _policies()
    p.apply({"kind": "cluster_deleted", "name": "c"})
    assert p.known() == ["a", "b"]
    assert p.remotes_for("persistent://t/n/x") == ["b"]


def test_unknown_clusters_are_refused_and_lists_deduplicated() -> None:
    p = _policies()
    assert p.check_clusters(["b", "a", "b"]) == ["b", "a"]
    with pytest.raises(NotFoundError, match="unknown cluster"):
        p.check_clusters(["a", "z"])


def test_namespace_of() -> None:
    assert namespace_of("persistent://t/n/x") == "t/n"
    with pytest.raises(MalformedError):
        namespace_of("persistent://t/x")
