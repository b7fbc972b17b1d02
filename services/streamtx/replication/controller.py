"""The controller: keeps one replicator running per (topic, partition, remote) that policies ask for.

Every ``scan_interval_s`` it lists the local broker's topics, works out each
topic's remote clusters from the policies, starts the replicators that are
missing and stops those no longer wanted. A remote the broker still keeps
replicator cursors for but that no longer applies (it left the topic's or its
namespace's list, or its cluster was deleted) has its cursors deleted, as Pulsar
deletes a replicator's cursor when its cluster leaves the replication clusters:
nobody moves them any more, so they would hold back every trim for good.
Policies change through the admin API (:mod:`streamtx.replication.routes.admin`),
durably first.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import Any

from streamtx.contracts.replication import ReplicationTopics, ReplicatorCursorDelete, TopicReplicas
from streamtx.errors import StreamtxError, UnavailableError
from streamtx.ledger import LedgerFactory
from streamtx.replication.peers import Peers
from streamtx.replication.policies import Policies
from streamtx.replication.replicator import PartitionReplicator
from streamtx.replication.settings import ReplicationSettings
from streamtx.replication.store import PolicyStore
from streamtx.replication.subscriptions import PartitionSnapshots
from streamtx.transport import ONCE, HttpClient, RetryPolicy

log = logging.getLogger(__name__)

Key = tuple[str, int, str]  # (topic, partition, remote cluster)


class Controller:
    """Create with :meth:`open`; :meth:`start` runs the scan loop."""

    def __init__(self, settings: ReplicationSettings, policy_store: PolicyStore, local: HttpClient) -> None:
        self.settings = settings
        self.policy_store = policy_store
        self.local = local
        self.peers = Peers(timeout_s=settings.remote_timeout_s,
                           token=settings.remote_token or settings.outgoing_token())
        self.replicators: dict[Key, tuple[PartitionReplicator, asyncio.Task[None]]] = {}
        self.snapshots: dict[tuple[str, int], tuple[PartitionSnapshots, asyncio.Task[None]]] = {}
        self._scan: asyncio.Task[None] | None = None
        self.scanned = asyncio.Event()

    @classmethod
    async def open(cls, settings: ReplicationSettings, ledgers: LedgerFactory) -> Controller:
        if not settings.broker_url:
            raise UnavailableError("the replication controller needs STREAMTX_BROKER_URL")
        policy_store = await PolicyStore.open(ledgers, settings.cluster)
        local = HttpClient(settings.broker_url, token=settings.outgoing_token(),
                           timeout_s=settings.read_wait_ms / 1000 + 10, retry=RetryPolicy(attempts=5))
        return cls(settings, policy_store, local)

    @property
    def policies(self) -> Policies:
        return self.policy_store.policies

    def start(self) -> None:
        self._scan = asyncio.create_task(self._scan_loop())

    async def _scan_loop(self) -> None:
        while True:
            try:
                await self.scan()
                self.scanned.set()
            except StreamtxError as exc:
                log.warning("scan of the local broker failed: %s", exc)
            await asyncio.sleep(self.settings.scan_interval_s)

    async def scan(self) -> None:
        body = ReplicationTopics.model_validate(
            await self.local.request("GET", "/v1/replication/topics", retry=ONCE))
        wanted: dict[Key, int] = {}
        for t in body.topics:
            for remote in self.policies.remotes_for(t.topic):
                for i in range(t.partitions):
                    wanted[(t.topic, i, remote)] = t.partitions
        stopped = []
        for key in [k for k in self.replicators if k not in wanted]:
            _, task = self.replicators.pop(key)
            task.cancel()
            stopped.append(task)
        for task in stopped:  # its last calls are over before its cursors go
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._delete_gone_remotes(body.topics)
        self._scan_snapshots({(t, i) for t, i, _ in wanted})
        for key, partitions in wanted.items():
            if key not in self.replicators:
                topic, index, remote = key
                # Each partition's calls go to its owner (broker replicas split a topic's
                # partitions): a client per partition remembers where that is.
                r = PartitionReplicator(local=self.local.for_log(), remote_of=self._remote,
                                        local_cluster=self.settings.cluster, remote=remote, topic=topic,
                                        partition=index, partitions=partitions, settings=self.settings)
                self.replicators[key] = (r, asyncio.create_task(r.run()))

    async def _delete_gone_remotes(self, topics: list[TopicReplicas]) -> None:
        """Delete the replicator cursors the broker keeps for remotes a topic no longer goes to."""
        for t in topics:
            gone = set(t.remotes) - set(self.policies.remotes_for(t.topic))
            for remote in sorted(gone):
                try:
                    await self.local.request("POST", "/v1/replication/cursor/delete", retry=ONCE,
                                             json=ReplicatorCursorDelete(topic=t.topic, remote=remote))
                    log.info("%s no longer replicates to %s: its replicator cursors are deleted",
                             t.topic, remote)
                except StreamtxError as exc:  # the next scan asks again
                    log.warning("deleting the cursors of %s towards %s failed: %s", t.topic, remote, exc)

    def _scan_snapshots(self, wanted: set[tuple[str, int]]) -> None:
        """One PIP-33 loop per partition of every topic that replicates somewhere."""
        for key in [k for k in self.snapshots if k not in wanted]:
            _, task = self.snapshots.pop(key)
            task.cancel()
        for topic, index in wanted - set(self.snapshots):
            loop = PartitionSnapshots(local=self.local.for_log(), cluster=self.settings.cluster, topic=topic,
                                      partition=index, settings=self.settings,
                                      remotes=functools.partial(self.policies.remotes_for, topic))
            self.snapshots[(topic, index)] = (loop, asyncio.create_task(loop.run()))

    async def _remote(self, name: str) -> HttpClient:
        url = self.policies.clusters.get(name)
        if url is None:
            raise UnavailableError(f"cluster {name} is not registered")
        return await self.peers.broker(name, url)

    def status(self) -> list[dict[str, Any]]:
        return [{"topic": t, "partition": i, "remote": r, "connected": rep.connected,
                 "sentMessages": rep.sent_messages}
                for (t, i, r), (rep, _) in sorted(self.replicators.items())]

    def snapshot_status(self) -> list[dict[str, Any]]:
        return [loop.status() for _, (loop, _) in sorted(self.snapshots.items())]

    async def close(self) -> None:
        tasks = [t for _, t in self.replicators.values()] + [t for _, t in self.snapshots.values()]
        if self._scan is not None:
            tasks.append(self._scan)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.peers.aclose()
        await self.local.aclose()
        await self.policy_store.close()
