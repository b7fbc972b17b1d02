"""Settings every service has; each service subclasses :class:`ServiceSettings` once."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServiceSettings(BaseSettings):
    """Common settings, read from ``STREAMTX_*`` environment variables."""

    model_config = SettingsConfigDict(env_prefix="STREAMTX_", extra="ignore")

    cluster: str = Field("standalone", description="cluster name, a label on every metric")
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    ledger_url: str = Field("file://data/ledgers", description="file://DIR, kafka://HOST:PORT, memory://")
    coordinator_url: str | None = Field(None, description="base URL of the transaction coordinator")
    broker_url: str | None = Field(None, description="base URL of the partition broker")
    pendingack_url: str | None = Field(None, description="base URL of the pending-ack store")
    replication_url: str | None = Field(None, description="base URL of the replication controller")
    admin_token: str | None = Field(None, description="when set, admin paths need this bearer token")
    client_token: str | None = Field(None, description="when set, data paths need this bearer token")
    max_body_bytes: int = Field(
        16 << 20, ge=1024, description="a larger request body is refused with 413 before it is read",
    )
    fast_lane: bool = Field(True, description="serve the hot routes ahead of FastAPI's stack (fastlane.py)")

    def services(self) -> dict[str, str]:
        """The URLs `/v1/cluster` advertises (services not deployed are absent)."""
        urls = {
            "coordinator": self.coordinator_url,
            "broker": self.broker_url,
            "pendingack": self.pendingack_url,
            "replication": self.replication_url,
        }
        return {k: v.rstrip("/") for k, v in urls.items() if v}
