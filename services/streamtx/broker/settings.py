"""The broker's settings, read from ``STREAMTX_*`` environment variables."""

from __future__ import annotations

from pydantic import Field

from streamtx.ownership.replica import ReplicaSettings


class BrokerSettings(ReplicaSettings):
    """Settings of the partition broker; with ``redis_url`` its partitions are leased over the replicas."""

    # Shared subscriptions redeliver what is unacked this long.
    ack_timeout_ms: int = Field(default=30_000, ge=1)
    # Exclusive subscriptions let another consumer in once the owner is idle this long.
    exclusive_idle_ms: int = Field(default=30_000, ge=1)
    # Failover subscriptions move a consumer's partitions to the others once it has not
    # fetched for this long (or at once when it closes).
    failover_idle_ms: int = Field(default=3_000, ge=1)
    # Shared and Exclusive subscriptions forget a consumer not fetching for this long (at least
    # exclusive_idle_ms on Exclusive): names are not kept forever (Pulsar forgets a consumer
    # when it disconnects); at most max_consumers_per_subscription live ones (then 429).
    # Subscriptions one topic may have (Pulsar's maxSubscriptionsPerTopic): a new one past it is a 409.
    max_subscriptions_per_topic: int = Field(default=1000, ge=1)
    consumer_idle_ms: int = Field(default=60_000, ge=1)
    max_consumers_per_subscription: int = Field(default=10_000, ge=1)
    dispatch_read_entries: int = Field(default=200, ge=1)  # entries per ledger read in dispatch
    # cap on ?max= of one fetch: as many as a produce may carry, so a consumer working off a
    # backlog moves it in a few large answers rather than many round trips (issue 15)
    max_fetch_messages: int = Field(default=10_000, ge=1)
    max_wait_ms: int = Field(default=30_000, ge=0)  # cap on ?wait_ms= of one fetch
    max_request_messages: int = Field(default=10_000, ge=1)  # messages per produce request
    max_entry_bytes: int = Field(default=4 << 20, ge=1024)  # one partition's batch of a request: else 413
    snapshot_every_ops: int = Field(default=1000, ge=1)  # TB snapshot after this many txn ops
    snapshot_interval_s: float = Field(default=5.0, gt=0)  # ... or this often while changed
    snapshot_segment_size: int = Field(default=1000, ge=1)  # aborted txn ids per snapshot segment
    # Ask the coordinator about txns open here longer than this, and end those it finished.
    stuck_txn_after_s: float = Field(default=60.0, gt=0)
    stuck_txn_interval_s: float = Field(default=10.0, gt=0)
    # After a failed append a partition rebuilds its state: requests wait this long, then 503.
    reload_wait_ms: int = Field(default=5000, ge=0)
    # Producer dedup state (producers.py): a name idle this long is forgotten (Pulsar's
    # producer inactivity timeout, 6 h), and at most this many are kept per partition.
    producer_idle_s: float = Field(default=6 * 3600.0, gt=0)
    producer_max_names: int = Field(default=10_000, ge=1)
    pendingack_timeout_s: float = Field(default=10.0, gt=0)  # HTTP timeout to the pending-ack store
