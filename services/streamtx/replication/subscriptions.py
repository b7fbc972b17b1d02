"""Replicated subscriptions for one partition: snapshots, caches, update markers (PIP-33).

One loop per partition of a replicated topic. Each turn scans the partition's
new entries through the broker (``POST /v1/replication/scan``: its markers,
whether messages arrived, its replicated subscriptions' mark-delete positions)
and then:

* collects the responses to its own request (:class:`PendingSnapshot`) and,
  once complete, writes the snapshot marker; a snapshot enters the caches only
  once that marker is durable (its append returned, or a rescan sees it);
* applies update markers from other clusters to the local subscription;
* when a subscription's mark-delete passes a cached snapshot, writes an update
  marker that the replicators carry to every other cluster (the scan's long poll
  also ends when a mark-delete moves, so that is not left for the next entry);
* syncs individual acks beyond that (:mod:`streamtx.replication.acksync`):
  writes ``acks`` markers, applies other clusters' ones;
* starts a snapshot every ``..._snapshot_frequency_ms`` while the partition has
  a replicated subscription and received messages since the last request
  (an idle topic gets no markers), each dropped after ``..._snapshot_timeout_s``.
  Several may be pending, as in Pulsar (whose controller keeps a map of them):
  when a round trip takes longer than the period, snapshots still land once a
  period, not once a round trip, and a failover repeats less. But a new one starts
  while others are pending only if one completed within the last timeout period
  (Pulsar: once any completed): remotes that never answered, or stopped
  answering a timeout ago, get one request per timeout period, not one per period.

Other clusters' snapshot requests are answered by the broker as they land
(:mod:`streamtx.broker.replication.markers`), not here: that took a scan and a call more.

When the loop starts it scans from ``rescan_entries`` before the partition's end:
snapshots not yet used refill the caches, and old updates move nothing (a
mark-delete never moves back).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from streamtx.contracts.replication import (
    ReplicatedSubscriptionUpdate,
    ReplicationMarker,
    ReplicationScan,
    ScannedMarker,
    ScannedMarkers,
)
from streamtx.errors import ConflictError, MalformedError, StreamtxError
from streamtx.ledger import Position
from streamtx.replication import metrics
from streamtx.replication.acksync import AckSync
from streamtx.replication.settings import ReplicationSettings
from streamtx.replication.snapshots import PendingSnapshot, Snapshot, SnapshotCache
from streamtx.transport import HttpClient

log = logging.getLogger(__name__)


class PartitionSnapshots:
    """The PIP-33 loop of one partition of one replicated topic."""

    def __init__(self, *, local: HttpClient, cluster: str, topic: str, partition: int,
                 remotes: Callable[[], list[str]], settings: ReplicationSettings) -> None:
        self.local = local
        self.cluster = cluster
        self.topic = topic
        self.partition = partition
        self.remotes = remotes
        self.settings = settings
        self.frequency_s = settings.replicated_subscriptions_snapshot_frequency_ms / 1000
        self.pending: dict[str, PendingSnapshot] = {}  # by snapshot id
        self._last_completed = -math.inf  # monotonic time the last snapshot completed
        self.caches: dict[str, SnapshotCache] = {}
        self.completed = 0
        self.updates = 0
        self.requests = 0  # first-round requests written: one per snapshot started
        self.scans = 0
        self._after: str | None = None
        self._dirty = True  # one snapshot after a start, then only after new messages
        # Monotonic time starts anywhere (near 0 on a machine just booted): never started is -inf,
        # so the first snapshot starts at once whatever the clock says.
        self._last_start = -math.inf
        self._marks: dict[str, str | None] | None = None  # the mark-deletes the last scan gave
        self.acks = AckSync(local=local, cluster=cluster, topic=topic, partition=partition,
                            period_s=self.frequency_s, back=settings.rescan_entries)

    async def run(self) -> None:
        delay = 0.05
        while True:
            try:
                await self.step()
                delay = 0.05
            except asyncio.CancelledError:
                raise
            except StreamtxError as exc:
                log.info("snapshots of %s[%d]: %s; retrying", self.topic, self.partition, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.settings.retry_max_s)
            except Exception:
                # A bug, but the loop is this partition's only one: it dying would stop its
                # snapshots and marker handling for good, with nothing said until exit.
                log.exception("snapshots of %s[%d] failed; retrying", self.topic, self.partition)
                await asyncio.sleep(self.settings.retry_max_s)

    async def step(self) -> None:
        got = ScannedMarkers.model_validate(await self.local.request(
            "POST", "/v1/replication/scan", json=ReplicationScan(
                topic=self.topic, partition=self.partition, after=self._after,
                wait_ms=self._wait_ms(), back=self.settings.rescan_entries, mark_deletes=self._marks,
            )))
        self.scans += 1
        self._dirty = self._dirty or got.data
        subs = got.subscriptions
        self._marks = subs
        for name in [n for n in self.caches if n not in subs]:
            del self.caches[name]
        for name in subs:
            self.caches.setdefault(name, SnapshotCache(
                self.settings.replicated_subscriptions_snapshot_max_cached_per_subscription))
        for m in got.markers:
            await self._handle(m, subs)
            # Past it only once handled: after a failure (the broker busy or restarting) the
            # next scan starts at it, so no update or acks marker is passed over unapplied.
            self._after = m.position
        if got.last is not None:
            self._after = got.last
        for name, md in subs.items():
            snap = self.caches[name].advance(Position.parse(md)) if md else None
            if snap is not None:
                await self._write({"type": "update", "subscription": name, "clusters": snap.clusters})
                self.updates += 1
                self.acks.updated(name, snap.local)
        await self.acks.sync(list(subs), got.data)
        await self._maybe_start(bool(subs))

    def _wait_ms(self) -> int:
        """How long the next scan may wait for news: until the next snapshot is due, if one is.

        The scan also ends on a new entry or a moved mark-delete; it must not hold back a
        snapshot that is due (on a quiet topic that would stretch the sync interval).
        """
        if self._after is None:
            return 0
        wait = self.frequency_s
        if self._may_start() and self._dirty and self.caches and self.remotes():
            wait = max(0.0, self._last_start + self.frequency_s - time.monotonic())
        return math.ceil(wait * 1000)

    def _may_start(self) -> bool:
        """No snapshot pending, or the remotes answer: one completed within the timeout."""
        timeout_s = self.settings.replicated_subscriptions_snapshot_timeout_s
        return not self.pending or time.monotonic() - self._last_completed <= timeout_s

    async def _maybe_start(self, has_subs: bool) -> None:
        now = time.monotonic()
        timeout_s = self.settings.replicated_subscriptions_snapshot_timeout_s
        for snapshot_id, pending in list(self.pending.items()):
            if pending.timed_out(now, timeout_s):
                log.info("snapshot %s of %s[%d] timed out (answered: %s)", snapshot_id, self.topic,
                         self.partition, sorted(pending.answered))
                self._drop(snapshot_id)
                self._dirty = True  # what it was to cover still is: the next one covers it
                metrics.timedout_snapshots.labels(self.cluster).inc()
        remotes = self.remotes()
        if not self._may_start() or not has_subs or not self._dirty or not remotes:
            return
        if now - self._last_start < self.frequency_s:
            return
        pending = PendingSnapshot(frozenset(remotes), now)
        await self._write(pending.request(self.cluster))
        self.requests += 1
        self.pending[pending.snapshot_id] = pending
        metrics.pending_snapshots.labels(self.cluster).inc()
        self._dirty = False
        # Keep to the beat: a start a little late (a scan to wait for, a slow round trip)
        # does not push every later one back; after a pause the beat starts again now.
        late = now - (self._last_start + self.frequency_s)  # inf after no start yet: the beat starts now
        self._last_start = now - late if late < self.frequency_s / 2 else now

    def _drop(self, snapshot_id: str) -> None:
        if self.pending.pop(snapshot_id, None) is not None:
            metrics.pending_snapshots.labels(self.cluster).dec()

    async def _handle(self, m: ScannedMarker, subs: dict[str, str | None]) -> None:
        """Handle one marker; one the broker refuses for good is skipped, said in the log."""
        try:
            await self._on_marker(m, subs)
        except (MalformedError, ConflictError, KeyError, TypeError, ValueError) as exc:
            log.warning("%s marker at %s of %s[%d] skipped: %r", m.marker.get("type"), m.position,
                        self.topic, self.partition, exc)

    async def _on_marker(self, m: ScannedMarker, subs: dict[str, str | None]) -> None:
        body = m.marker
        source, at = m.source, Position.parse(m.position)
        kind = body.get("type")
        # Requests from other clusters are answered by the broker as they land (markers.py).
        if kind == "snapshot_response" and source is not None:
            pending = self.pending.get(str(body.get("snapshot_id")))
            if pending is None or body.get("source_cluster") != self.cluster:
                return  # another cluster's snapshot, or one dropped
            done = pending.on_response(body, at)
            if done == "next_round":
                await self._write(pending.request(self.cluster))
            elif isinstance(done, Snapshot):
                self._last_completed = time.monotonic()
                took_ms = (self._last_completed - pending.started) * 1000
                metrics.snapshot_ms.labels(self.cluster).observe(took_ms)
                await self._write({"type": "snapshot", "snapshot_id": done.snapshot_id,
                                   "local_position": str(done.local), "clusters": done.clusters})
                self._drop(done.snapshot_id)
                self._cache(done)  # durable now: usable at once, not a scan later
        elif kind == "snapshot" and source is None:
            snap = Snapshot(str(body["snapshot_id"]), Position.parse(str(body["local_position"])),
                            dict(body["clusters"]))
            self.completed += 1
            self._cache(snap)  # a rescan's; those this loop wrote are cached already
        elif kind == "update" and source is not None:
            here = (body.get("clusters") or {}).get(self.cluster)
            if here:
                await self.local.request(
                    "POST", "/v1/replication/subscriptions/update", json=ReplicatedSubscriptionUpdate(
                        topic=self.topic, partition=self.partition, subscription=body["subscription"],
                        position=here))
        elif kind == "acks" and source is not None:
            await self.acks.apply(body, str(source))

    def _cache(self, snap: Snapshot) -> None:
        for cache in self.caches.values():
            cache.add(snap)  # already passed: the advance in this step writes its update

    async def _write(self, marker: dict[str, Any]) -> None:
        await self.local.request("POST", "/v1/replication/markers", json=ReplicationMarker(
            topic=self.topic, partition=self.partition, marker=marker))

    def status(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "pending": len(self.pending),
                "completedSnapshots": self.completed, "updates": self.updates,
                "requests": self.requests, "scans": self.scans,
                "cached": {n: len(c.snapshots) for n, c in self.caches.items()}, **self.acks.status()}
