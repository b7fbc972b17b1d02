"""The pending-ack store's domain metrics (the PIP-160 batching ones live in streamtx.batching).

Families are created per registry, so tests can use their own; every series
carries the ``cluster`` label, as the PIP-160 ones do.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram


class PendingAckMetrics:
    """Counters of acks, conflicts and ends; open transactions and replay time."""

    def __init__(self, cluster: str, registry: CollectorRegistry = REGISTRY) -> None:
        self._acked = Counter(
            "streamtx_pendingack_acked_messages", "message ids held by transactional acks",
            ["cluster"], registry=registry,
        ).labels(cluster)
        conflicts = Counter(
            "streamtx_pendingack_conflicts", "refused acks (stage=ack) and commits (stage=prepare)",
            ["cluster", "stage"], registry=registry,
        )
        self._conflicts = {stage: conflicts.labels(cluster, stage) for stage in ("ack", "prepare")}
        ends = Counter(
            "streamtx_pendingack_txn_ends", "transactions ended on a subscription",
            ["cluster", "action"], registry=registry,
        )
        self._ends = {action: ends.labels(cluster, action) for action in ("commit", "abort")}
        self._open = Gauge(
            "streamtx_pendingack_open_txns", "transactions holding acks, over all open subscriptions",
            ["cluster"], registry=registry,
        ).labels(cluster)
        self._stores = Gauge(
            "streamtx_pendingack_open_stores", "subscriptions whose pending-ack store is open (LRU-bounded)",
            ["cluster"], registry=registry,
        ).labels(cluster)
        self._replay = Histogram(
            "streamtx_pendingack_replay_seconds", "time to replay one subscription's pending-ack log",
            ["cluster"], registry=registry, buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30),
        ).labels(cluster)

    def acked(self, count: int) -> None:
        self._acked.inc(count)

    def conflict(self, stage: str) -> None:
        self._conflicts[stage].inc()

    def ended(self, commit: bool) -> None:
        self._ends["commit" if commit else "abort"].inc()

    def replayed(self, seconds: float) -> None:
        self._replay.observe(seconds)

    def track_open_txns(self, count: Callable[[], int]) -> None:
        """Read the open-transaction count at scrape time."""
        self._open.set_function(count)

    def track_open_stores(self, count: Callable[[], int]) -> None:
        """Read the open-store count at scrape time."""
        self._stores.set_function(count)
