"""PIP-33 snapshots, pure: the request/response rounds of one snapshot, and a subscription's cache.

A snapshot ties a position here to a position in every other cluster such that a
consumer that acknowledged everything up to the local one has also seen
everything up to each remote one. Taking it (seed 004): write a request marker;
each other cluster answers with a response marker that carries the request's
position there (its broker writes it as the request lands:
:func:`streamtx.broker.replication.markers.response`); with more than two clusters a second
round of requests and responses follows, so that messages exchanged between the remotes meanwhile
are covered. The snapshot uses the remote positions of round 1 and, as local
position, that of the last response of the last round. Only complete snapshots
are used; one that misses an answer within the timeout is dropped.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from streamtx.ledger import Position


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A complete snapshot: this cluster's position and each remote's."""

    snapshot_id: str
    local: Position
    clusters: dict[str, str]  # remote cluster -> position there ("ledger:entry")


@dataclass
class PendingSnapshot:
    """A snapshot being taken: which clusters answered in which round."""

    remotes: frozenset[str]
    started: float  # monotonic seconds
    snapshot_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    round: int = 1
    first_round: dict[str, str] = field(default_factory=dict)
    answered: set[str] = field(default_factory=set)

    @property
    def rounds(self) -> int:
        return 2 if len(self.remotes) > 1 else 1

    def request(self, local_cluster: str) -> dict[str, object]:
        """The request marker of the current round."""
        return {"type": "snapshot_request", "snapshot_id": self.snapshot_id, "source_cluster": local_cluster,
                "round": self.round}

    def on_response(self, marker: dict[str, object], at: Position) -> Snapshot | str | None:
        """A response seen here at ``at``: the snapshot when complete, ``"next_round"``, or None."""
        cluster = str(marker.get("cluster"))
        if marker.get("snapshot_id") != self.snapshot_id or marker.get("round") != self.round:
            return None
        if cluster not in self.remotes or cluster in self.answered:
            return None
        self.answered.add(cluster)
        if self.round == 1:
            self.first_round[cluster] = str(marker.get("position"))
        if self.answered != set(self.remotes):
            return None
        if self.round < self.rounds:
            self.round += 1
            self.answered = set()
            return "next_round"
        return Snapshot(self.snapshot_id, at, dict(self.first_round))

    def timed_out(self, now: float, timeout_s: float) -> bool:
        return now - self.started > timeout_s


class SnapshotCache:
    """A subscription's snapshots not yet used, at most ``max_size``, spread out.

    When full, the snapshot whose neighbours are closest together goes (never the
    first nor the last): a consumer far behind keeps snapshots all along its
    backlog, not only the newest.

    A snapshot the mark-delete has already passed when it completes is kept: it is
    the newest one the consumer is known to be past, so the next :meth:`advance`
    turns it into an update at once. (Dropped, a consumer that keeps up - past the
    last response before the snapshot marker is written - had almost none used,
    and a failover repeated several seconds of messages instead of one interval.)
    """

    def __init__(self, max_size: int) -> None:
        if max_size < 3:
            raise ValueError("a snapshot cache holds at least 3")
        self.max_size = max_size
        self.snapshots: list[Snapshot] = []  # by local position
        self.used: Position | None = None  # local position of the last snapshot advance gave

    def add(self, snap: Snapshot) -> None:
        """Keep ``snap`` (a complete, durable snapshot) unless a newer one is kept or was used."""
        if self.used is not None and snap.local <= self.used:
            return  # older than one already turned into an update (a rescan sees it again)
        if self.snapshots and snap.local <= self.snapshots[-1].local:
            return
        self.snapshots.append(snap)
        if len(self.snapshots) > self.max_size:
            s = self.snapshots
            gaps = [(s[i + 1].local.entry_id - s[i - 1].local.entry_id, i) for i in range(1, len(s) - 1)]
            del s[min(gaps)[1]]

    def advance(self, mark_delete: Position) -> Snapshot | None:
        """The newest snapshot at or before ``mark_delete`` (it and older ones leave the cache)."""
        passed = [i for i, s in enumerate(self.snapshots) if s.local <= mark_delete]
        if not passed:
            return None
        last = passed[-1]
        found = self.snapshots[last]
        del self.snapshots[: last + 1]
        self.used = found.local
        return found
