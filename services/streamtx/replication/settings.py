"""Settings of the replication controller (``STREAMTX_*`` environment variables)."""

from __future__ import annotations

from pydantic import Field

from streamtx.service import ServiceSettings


class ReplicationSettings(ServiceSettings):
    """The common settings (``STREAMTX_CLUSTER`` names this installation) and replication's own."""

    port: int = Field(default=8084, ge=0, le=65535)
    scan_interval_s: float = Field(default=1.0, gt=0, description="how often topics and policies are checked")
    read_max_entries: int = Field(default=500, ge=1, le=10_000, description="entries per replication read")
    read_wait_ms: int = Field(default=1000, ge=0, le=30_000, description="long poll of a replication read")
    remote_timeout_s: float = Field(default=10.0, gt=0, description="HTTP timeout towards a remote cluster")
    retry_max_s: float = Field(default=2.0, gt=0, description="longest pause between retries to a remote")
    remote_token: str | None = Field(
        default=None, description="credential for the other clusters' brokers (a service token valid "
        "there); default: this cluster's own service token")
    # PIP-33's broker.conf settings, same names.
    replicated_subscriptions_snapshot_frequency_ms: int = Field(default=1000, ge=10)
    replicated_subscriptions_snapshot_timeout_s: float = Field(default=30.0, gt=0)
    replicated_subscriptions_snapshot_max_cached_per_subscription: int = Field(default=30, ge=3)
    rescan_entries: int = Field(default=10_000, ge=0, description="markers looked back at when a "
                                "partition's snapshot loop starts")

    @classmethod
    def from_env(cls) -> ReplicationSettings:
        """Read the settings from the environment, validated."""
        return cls()  # type: ignore[call-arg]  # mypy sees the base's defaults as required
