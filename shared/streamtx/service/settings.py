"""Settings every service has; each service subclasses :class:`ServiceSettings` once."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from streamtx.errors import MalformedError
from streamtx.ledger import check_ledger_url


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
    # Auth (docs/security.md): on when any credential below is set, off otherwise (make run).
    admin_token: str | None = Field(None, description="static token with the admin role (all paths)")
    client_token: str | None = Field(None, description="static token with the client role, every tenant")
    service_token: str | None = Field(
        None, description="the credential this service sends to its peers (a JWT with the service role, "
        "or a static token); accepted as a static service token too; default: admin_token")
    auth_jwt_secret: str | None = Field(None, description="verify HS256-signed JWTs with this secret")
    auth_jwt_public_key: str | None = Field(None, description="verify RS256-signed JWTs with this PEM key")
    auth_jwt_public_key_file: Path | None = Field(None, description="... or with the PEM key in this file")
    auth_token_cache_size: int = Field(10_000, ge=0, description="verified tokens kept (LRU)")
    auth_token_cache_ttl_s: float = Field(300.0, ge=0, description="re-verify a cached token after this")
    max_body_bytes: int = Field(
        16 << 20, ge=1024, description="a larger request body is refused with 413 before it is read",
    )
    # What a connection may take before it delivers a request (connguard.py): 431, 408, closed.
    max_header_bytes: int = Field(32 << 10, ge=1024, description="a request's head (request line and "
                                  "headers) over this is refused with 431 and the connection closed")
    max_headers: int = Field(100, ge=8, description="more header lines than this: 431")
    request_head_timeout_s: float = Field(
        10.0, gt=0, description="a connection that has not sent a whole request head this long after it "
        "opened or after its last answer is closed (408 when it sent part of one)")
    request_body_timeout_s: float = Field(
        30.0, gt=0, description="a request whose body has not arrived whole this long after its head is "
        "closed (its route sees the client leave)")
    shutdown_timeout_s: float = Field(
        10.0, gt=0, description="a stopping service's shutdown (flushing and closing its logs) is cut short "
        "after this long, so that a service whose ledger backend is gone still exits (service/shutdown.py)")
    fast_lane: bool = Field(True, description="serve the hot routes ahead of FastAPI's stack (fastlane.py)")
    # uvicorn's "auto" picks uvloop and httptools (both come with uvicorn[standard]);
    # bench/stack.py measures the alternatives on the demo's job (README of the demo).
    server_loop: Literal["auto", "uvloop", "asyncio"] = Field(
        "auto", description="the server's event loop (auto: uvloop when installed)")
    server_http: Literal["auto", "httptools", "h11"] = Field(
        "auto", description="the server's HTTP/1.1 parser (auto: httptools when installed)")
    # Several processes on one port (service/workers.py). Only a service whose logs are
    # leased (it sets ``supports_workers``) may run more than one: two processes owning
    # every log would fence each other's appends.
    workers: int = Field(1, ge=1, le=64, description="worker processes serving this port (SO_REUSEPORT)")
    worker_index: int = Field(0, ge=0, description="set by the launcher: which worker this process is")

    supports_workers: ClassVar[bool] = False

    @field_validator("ledger_url")
    @classmethod
    def _ledger_url(cls, url: str) -> str:
        # At start-up, named (it failed in the app's start-up: a 74-line traceback).
        try:
            check_ledger_url(url)
        except MalformedError as exc:
            raise ValueError(str(exc)) from None
        return url

    @model_validator(mode="after")
    def _one_jwt_key(self) -> ServiceSettings:
        keys = [self.auth_jwt_secret, self.auth_jwt_public_key, self.auth_jwt_public_key_file]
        if sum(k is not None for k in keys) > 1:
            raise ValueError("set one of auth_jwt_secret, auth_jwt_public_key, auth_jwt_public_key_file")
        if self.auth_jwt_secret is not None and len(self.auth_jwt_secret.encode()) < 32:
            raise ValueError("auth_jwt_secret must be at least 32 bytes (RFC 7518, 3.2)")
        if self.workers > 1 and not self.supports_workers:
            raise ValueError(f"workers={self.workers}: this service runs one process per port "
                             "(only the coordinator runs several workers)")
        return self

    def outgoing_token(self) -> str | None:
        """The bearer token for calls to peer services (their internal paths need the service role)."""
        return self.service_token or self.admin_token

    def services(self) -> dict[str, str]:
        """The URLs `/v1/cluster` advertises (services not deployed are absent)."""
        urls = {
            "coordinator": self.coordinator_url,
            "broker": self.broker_url,
            "pendingack": self.pendingack_url,
            "replication": self.replication_url,
        }
        return {k: v.rstrip("/") for k, v in urls.items() if v}
