"""The controller's PIP-33 metrics, Pulsar's names (default registry, one controller per process)."""

from __future__ import annotations

from prometheus_client import Gauge, Histogram

pending_snapshots = Gauge(
    "pulsar_replicated_subscriptions_pending_snapshots",
    "Replicated-subscription snapshots started and not yet complete", ["cluster"],
)
# A gauge that only grows, so the series keeps Pulsar's name (a Counter would add _total).
timedout_snapshots = Gauge(
    "pulsar_replicated_subscriptions_timedout_snapshots",
    "Snapshots dropped because a cluster did not answer within the timeout", ["cluster"],
)
snapshot_ms = Histogram(
    "pulsar_replicated_subscriptions_snapshot_ms",
    "Time to complete a snapshot, from its request to its last response, in ms", ["cluster"],
    buckets=(5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000),
)
synced_acks = Gauge(
    "pulsar_replicated_subscriptions_synced_acks",
    "Acks applied here from other clusters' acks markers (individual acks beyond PIP-33)", ["cluster"],
)
