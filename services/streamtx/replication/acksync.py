"""Individual acks that follow the consumer to the other clusters (beyond PIP-33).

PIP-33 moves a subscription in the other clusters only through update markers:
the mark-delete position, as of the newest snapshot it passed. A consumer that
acknowledged out of order (a few messages left behind, the mark-delete stuck)
or simply past the last snapshot gets all of that again after a failover. Here
the rest travels too, as ``acks`` markers (:mod:`streamtx.broker.replication.markers`):

* **Naming.** A replicated message is known in every cluster by its origin: the
  cluster it was produced in and its position there (replicated entries carry
  it; a local one is its own origin). An ``acks`` marker names acknowledged
  messages by origin (:class:`~streamtx.contracts.ackset.AckSet`: entry-id
  ranges per origin, bitsets for partly acknowledged batches), so a receiving
  cluster needs no position mapping through a snapshot: it walks its own
  entries from the subscription's first unacknowledged one, looks each up by its
  origin, and acknowledges the named ones individually (``POST
  /v1/replication/acks/apply``; creating the subscription at the earliest
  position first if it has none, as an update does).
* **What is exported** (``POST /v1/replication/acks/export``): the messages the
  subscription acknowledged past the local position of the snapshot before the
  last one an update marker was written for (:meth:`AckSync.updated` says why):
  everything past it up to the mark-delete, and the individually acknowledged
  entries beyond; before the first two updates since
  the controller started, from ``STREAMTX_RESCAN_ENTRIES`` entries before the
  mark-delete (what update markers moved elsewhere is named again: harmless). Only message
  entries count, so markers that the dispatcher deletes as it passes them are
  never news.
* **Cadence and cost.** At most one export per partition and subscription per
  snapshot period (``..._snapshot_frequency_ms``); the broker answers "unchanged"
  from a token (its cursor's change count) without reading anything, and a
  marker is written only when the export names a message this cluster has not
  already written or received in an ``acks`` marker: never one per ack, nothing
  for an idle subscription, and acknowledgements applied from another cluster are
  not echoed back. A marker holds the whole set, not a delta, so a lost or
  skipped one is made good by the next.
* **Durability.** Markers are ledger entries like every other marker (never
  handed to a consumer, never holding back a reader) and acks apply to the
  durable cursor; a controller that restarts rescans them and applies them again
  (applying is idempotent), and its first export after the restart is written
  once if not empty.
* **Late entries.** A marker can name messages of a third cluster that have not
  reached this one yet (that cluster replicates here more slowly than to the
  writer, or not at all for a while). The broker says which origins' last named
  entries it did not find and where its walk ended; the controller keeps what the
  marker names of those origins and, whenever new messages arrived, applies it
  again from where the last walk ended (so a retry reads only what arrived
  since), until it is complete or the subscription is gone here. The writer's
  next marker is applied together with what is still missing of its earlier ones:
  it may not name them again (its exports start past its last updates, and an
  update marker positions this cluster only up to where its request arrived, not
  up to the third cluster's late messages). Dropped after a while, those messages
  would stay unacknowledged here for good once they came: duplicates after a failover.
* **Bounds.** An export or apply reads at most 50,000 entries; acks further on
  wait until the mark-delete moves.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from streamtx.contracts.ackset import AckSet
from streamtx.contracts.replication import AckApply, AckExport, AppliedAcks, ExportedAcks, ReplicationMarker
from streamtx.ledger import Position
from streamtx.replication import metrics
from streamtx.transport import HttpClient

log = logging.getLogger(__name__)


class AckSync:
    """The ack sync of one partition of one replicated topic, for each of its replicated subscriptions."""

    def __init__(self, *, local: HttpClient, cluster: str, topic: str, partition: int, period_s: float,
                 back: int) -> None:
        self.local = local
        self.cluster = cluster
        self.topic = topic
        self.partition = partition
        self.period_s = period_s
        self.back = back
        # (subscription, writer) -> (what its markers named of entries not here yet, where the
        # last walk ended)
        self.incomplete: dict[tuple[str, str], tuple[AckSet, str | None]] = {}
        self._arrived = False  # messages arrived since the last retry
        self.synced_to: dict[str, Position] = {}  # subscription -> where exports start (see updated)
        self._update_at: dict[str, Position] = {}  # subscription -> local position of its last update
        self.known: dict[str, AckSet] = {}  # what this cluster already wrote or received, per subscription
        self.tokens: dict[str, str] = {}  # the broker's token of the last export
        self.markers = 0  # acks markers written
        self.applied = 0  # acks applied here from other clusters' markers
        self._last: float | None = None  # None: the first sync runs (monotonic may be small after boot)
        self._applied: set[str] = set()  # subscriptions acks were applied to since the last sync

    def updated(self, subscription: str, local: Position) -> None:
        """An update marker was written for the snapshot at ``local``.

        Exports start past the *previous* update's snapshot, not this one: a remote's
        position in a snapshot is where the first round's request reached it, and
        messages written here between that request and ``local`` (the last response)
        may be past it there, so the update does not cover them. The previous
        snapshot completed before this one's request was written, so nothing is
        missed; naming messages an update already covered again is harmless.
        """
        self.synced_to.pop(subscription, None)
        if subscription in self._update_at:
            self.synced_to[subscription] = self._update_at[subscription]
        self._update_at[subscription] = local

    async def sync(self, subscriptions: list[str], arrived: bool) -> None:
        """Export each subscription's acks (once per period) and write a marker for what is new;
        apply again the markers that named messages still on their way (``arrived``: some came)."""
        self._arrived = self._arrived or arrived
        now = time.monotonic()
        if self._last is not None and now - self._last < self.period_s:
            return
        self._last = now
        for name in [n for n in self.known if n not in subscriptions and n not in self._applied]:
            self.known.pop(name, None)  # gone here (one just created by apply is not in this scan yet)
            self.tokens.pop(name, None)
            self.synced_to.pop(name, None)
            self._update_at.pop(name, None)
            for key in [k for k in self.incomplete if k[0] == name]:
                del self.incomplete[key]  # before the retries: one would create it again
        self._applied.clear()
        if self._arrived:
            self._arrived = False
            for (name, writer), (missing, start) in list(self.incomplete.items()):
                await self._apply(name, writer, missing, start)
        for name in subscriptions:
            after = self.synced_to.get(name)
            got = ExportedAcks.model_validate(await self.local.request(
                "POST", "/v1/replication/acks/export", json=AckExport(
                    topic=self.topic, partition=self.partition, subscription=name,
                    after=str(after) if after else None, back=self.back, known=self.tokens.get(name))))
            self.tokens[name] = got.token
            if got.origins is None:
                continue
            acks = AckSet.from_wire(got.origins)
            known = self.known.get(name)
            if not acks or (known is not None and known.covers(acks)):
                continue
            await self.local.request("POST", "/v1/replication/markers", json=ReplicationMarker(
                topic=self.topic, partition=self.partition,
                marker={"type": "acks", "subscription": name, "origins": got.origins}))
            self.known[name] = acks
            self.markers += 1

    async def apply(self, marker: dict[str, Any], writer: str) -> None:
        """``writer``'s ``acks`` marker: acknowledge the same messages here."""
        name = str(marker.get("subscription"))
        try:
            acks = AckSet.from_wire(marker.get("origins"))
        except ValueError as exc:
            log.warning("acks marker of %s[%d] skipped: %s", self.topic, self.partition, exc)
            return
        known = self.known.get(name)
        self.known[name] = acks if known is None else known.union(acks)
        self._applied.add(name)
        late = self.incomplete.get((name, writer))
        await self._apply(name, writer, acks if late is None else acks.union(late[0]), None)

    async def _apply(self, name: str, writer: str, acks: AckSet, start: str | None) -> None:
        """Apply ``acks`` (from ``start`` on, for a retry); keep what is still on its way."""
        got = AppliedAcks.model_validate(await self.local.request(
            "POST", "/v1/replication/acks/apply", json=AckApply(
                topic=self.topic, partition=self.partition, subscription=name,
                origins=acks.to_wire(), start=start)))
        key = (name, writer)
        missing = [(str(c), int(lid)) for c, lid in got.missing]
        if missing:
            if key not in self.incomplete:
                log.info("acks of %s on %s[%d] from %s: entries of %s not here yet; applied again as "
                         "they arrive", name, self.topic, self.partition, writer, missing)
            self.incomplete[key] = (acks.only(missing), got.next)
        elif self.incomplete.pop(key, None) is not None:
            log.info("acks of %s on %s[%d] from %s: late entries applied", name, self.topic, self.partition,
                     writer)
        n = got.acked
        self.applied += n
        metrics.synced_acks.labels(self.cluster).inc(n)

    def status(self) -> dict[str, Any]:
        return {"ackMarkers": self.markers, "syncedAcks": self.applied,
                "lateAckMarkers": len(self.incomplete)}  # markers waiting for entries still on their way
