"""Settings of the transaction coordinator (``STREAMTX_*`` environment variables).

Nested batching settings use ``__``: ``STREAMTX_BATCHING__ENABLED=false``,
``STREAMTX_BATCHING__MAX_RECORDS=512``. Coordinator ids are a JSON list or a
comma-separated list: ``STREAMTX_COORDINATOR_IDS=0,1,2``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from streamtx.batching.settings import BatchingSettings
from streamtx.contracts.txnid import max_coordinator_id
from streamtx.ownership.replica import ReplicaSettings


class CoordinatorSettings(ReplicaSettings):
    """Everything the TC is configured with, validated at start-up."""

    model_config = SettingsConfigDict(env_prefix="STREAMTX_", env_nested_delimiter="__", extra="ignore")

    port: int = Field(8081, ge=0, le=65535)
    # The coordinator's largest body is 1000 names of at most 2 KiB each.
    max_body_bytes: int = Field(
        4 << 20, ge=1024, description="a larger request body is refused with 413 before it is read",
    )
    coordinator_ids: Annotated[list[int], NoDecode] = Field(
        default_factory=lambda: [0],
        description="coordinator ids (0..65535): this process owns them all, or with redis_url the "
        "replicas share them out",
    )
    # Scale-out: with a Redis URL (ReplicaSettings) the coordinator ids are leased to the
    # live replicas (streamtx.ownership); without one this process owns coordinator_ids alone.
    # STREAMTX_WORKERS > 1: requests for a sibling worker's id go through Redis (coordinator/mailbox.py).
    mailbox_timeout_ms: int = Field(
        30_000, ge=100, description="a request forwarded to a sibling worker waits this long, then 503")
    mailbox_max_queued: int = Field(
        10_000, ge=1, description="requests one id's mailbox holds at most; past it a forwarded one is 503")

    supports_workers: ClassVar[bool] = True
    # PIP-160 transactionLogBatchedWrite*: validated like Pulsar's (max_records >= 10, ...).
    batching: BatchingSettings = Field(default_factory=BatchingSettings)
    default_timeout_ms: int = Field(60_000, ge=1, description="timeout of a transaction that names none")
    max_timeout_ms: int = Field(3_600_000, ge=1, description="a longer requested timeout is a 400")
    timeout_check_interval_ms: int = Field(
        1000, ge=1, description="longest sleep of the timeout task (it also wakes at the next deadline)"
    )
    housekeeping_interval_ms: int = Field(
        1000, ge=1, description="how often finished transactions' records are deleted and the log trimmed"
    )
    finished_retention_ms: int = Field(
        60_000, ge=0,
        description="a finished transaction stays queryable this long, then its log records are deleted",
    )
    id_block_size: int = Field(
        10_000, ge=1, description="transaction ids reserved per RESERVE_IDS record (ids never reused)"
    )
    fanout_backoff_ms: int = Field(50, ge=1, description="first delay between end retries to a participant")
    # Short (issue 25): a participant restarted after a crash is back within a second or two,
    # and every transaction that touched it waits for its end (held acks, a partition's read
    # position); retrying a refused connection is cheap.
    fanout_max_backoff_ms: int = Field(500, ge=1, description="longest delay between end retries")
    fanout_request_timeout_ms: int = Field(
        40_000, ge=1, description="HTTP timeout of one participant call (the pending-ack store may take 30 s)"
    )
    prepare_attempts: int = Field(
        5, ge=1, description="tries of a subscription prepare before a commit answers 503 (txn stays open)"
    )
    # Limits (quota.py): 429 past the open transactions of one client (the token's
    # subject; with auth off every caller is one client), 409 past the participants of one txn.
    max_open_txns_per_client: int = Field(10_000, ge=1, description="open transactions one client may hold")
    max_partitions_per_txn: int = Field(4096, ge=1, description="partitions one transaction may register")
    max_subscriptions_per_txn: int = Field(4096, ge=1, description="subscriptions one txn may register")
    max_concurrent_timeouts: int = Field(256, ge=1, description="timeout aborts running at once")

    @field_validator("coordinator_ids", mode="before")
    @classmethod
    def _parse_ids(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                text = text[1:-1]
            return [int(part) for part in text.split(",") if part.strip()]
        return value

    @field_validator("coordinator_ids")
    @classmethod
    def _check_ids(cls, ids: list[int]) -> list[int]:
        if not ids:
            raise ValueError("at least one coordinator id is needed")
        if len(set(ids)) != len(ids):
            raise ValueError(f"coordinator ids repeat: {ids}")
        bad = [i for i in ids if not 0 <= i <= max_coordinator_id]
        if bad:
            raise ValueError(f"coordinator ids must be in 0..{max_coordinator_id}: {bad}")
        return ids

    @model_validator(mode="after")
    def _check_bounds(self) -> CoordinatorSettings:
        if self.default_timeout_ms > self.max_timeout_ms:
            raise ValueError(
                f"default_timeout_ms {self.default_timeout_ms} exceeds max_timeout_ms {self.max_timeout_ms}"
            )
        if self.fanout_backoff_ms > self.fanout_max_backoff_ms:
            raise ValueError("fanout_backoff_ms exceeds fanout_max_backoff_ms")
        if self.workers > 1 and not self.redis_url:
            raise ValueError(f"workers={self.workers} needs redis_url (STREAMTX_REDIS_URL): the workers "
                             "lease the coordinator ids and forward requests through Redis")
        if self.workers > 1 and self.port == 0:
            raise ValueError("workers > 1 needs a fixed port (every worker binds the same one)")
        return self
