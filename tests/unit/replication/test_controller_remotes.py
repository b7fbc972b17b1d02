"""The controller deletes the replicator cursors of a remote a topic no longer goes to (issue 21 item 7).

Before: once a topic had replicated to a remote, the broker kept its ``pulsar.repl.<remote>``
cursors for good (reopened with every partition); removing the cluster from the policy, or
deleting the cluster, only stopped the replicator, and the cursor nobody moved any more held
back every trim. As Pulsar deletes a replicator's cursor when its cluster leaves the
namespace's replication clusters, the controller now asks the broker to delete them.
"""

from __future__ import annotations

from typing import Any

import pytest

from streamtx.contracts.replication import ReplicationTopics
from streamtx.replication.controller import Controller
from streamtx.replication.policies import Policies
from streamtx.replication.settings import ReplicationSettings
from tests.support.wire import body_of

T = "persistent://t/n/x"


class LocalBroker:
    """The local broker's answers: one topic of two partitions, with cursors for ``remotes``."""

    def __init__(self, remotes: list[str]) -> None:
        self.remotes = remotes
        self.calls: list[tuple[str, str, Any]] = []

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        self.calls.append((method, path, body_of(kw.get("json"))))
        if path == "/v1/replication/topics":
            return {"topics": [{"topic": T, "partitions": 2, "remotes": self.remotes}]}
        if path == "/v1/replication/cursor/delete":
            self.remotes.remove(body_of(kw["json"])["remote"])
            return {"deleted": True}
        raise AssertionError(f"unexpected call {method} {path}")

    def deletes(self) -> list[Any]:
        return [j for _, p, j in self.calls if p == "/v1/replication/cursor/delete"]


class Store:
    def __init__(self, policies: Policies) -> None:
        self.policies = policies


def controller(policies: Policies, local: LocalBroker) -> Controller:
    settings = ReplicationSettings(cluster="a", broker_url="http://broker")  # type: ignore[call-arg]
    return Controller(settings, Store(policies), local)  # type: ignore[arg-type]


@pytest.mark.parametrize("policies", [
    # the topic's own list leaves "y" out (its namespace still lists it)
    Policies("a", clusters={"y": "http://y"}, namespaces={"t/n": ["a", "y"]}, topics={T: ["a"]}),
    # the namespace's list no longer has "y"
    Policies("a", clusters={"y": "http://y"}, namespaces={"t/n": ["a"]}),
    # the cluster "y" was deleted (still named by the namespace's list)
    Policies("a", clusters={}, namespaces={"t/n": ["a", "y"]}),
], ids=["topic-policy", "namespace-policy", "cluster-deleted"])
async def test_a_remote_the_topic_no_longer_goes_to_has_its_cursors_deleted(policies: Policies) -> None:
    local = LocalBroker(["y"])
    c = controller(policies, local)
    await c.scan()
    assert local.deletes() == [{"topic": T, "remote": "y"}]
    await c.scan()  # once gone from the broker's record, never asked again
    assert len(local.deletes()) == 1


async def test_a_remote_still_wanted_keeps_its_cursors() -> None:
    local = LocalBroker(["y"])
    c = controller(Policies("a", clusters={"y": "http://y"}, namespaces={"t/n": ["a", "y"]}), local)
    listed = ReplicationTopics.model_validate(await local.request("GET", "/v1/replication/topics"))
    await c._delete_gone_remotes(listed.topics)
    assert local.deletes() == []
