"""Settings of the pending-ack store (``STREAMTX_*`` environment variables)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from streamtx.batching import BatchingSettings
from streamtx.ownership.replica import ReplicaSettings


class PendingAckSettings(ReplicaSettings):
    """The pending-ack store's settings: the common ones, replicas, batching, and bounds."""

    model_config = SettingsConfigDict(env_prefix="STREAMTX_", env_nested_delimiter="__", extra="ignore")

    port: int = Field(default=8083, ge=0, le=65535)
    # Replicas (with redis_url): subscriptions hash into this many slots, leased over the live
    # replicas (pendingack/slots.py). The same on every replica; more slots than replicas.
    pendingack_slots: int = Field(default=16, ge=1, le=4096,
                                  description="subscription slots leased over the pending-ack replicas")
    # PIP-160's transactionPendingAckBatchedWrite* settings, switchable at run
    # time: STREAMTX_BATCHING__ENABLED, __MAX_RECORDS, __MAX_BYTES,
    # __MAX_DELAY_MS, __POLICY ("auto" or "fixed").
    batching: BatchingSettings = Field(default_factory=BatchingSettings)
    # Bounds on memory (see streamtx.records.pendingack_state).
    pending_ack_max_committed_ids: int = Field(
        default=100_000, ge=0,
        description="committed ids remembered per subscription for the optimistic check",
    )
    pending_ack_max_ended_txns: int = Field(
        default=10_000, ge=0,
        description="ended transactions remembered per subscription to refuse late acks",
    )
    pending_ack_max_open_stores: int = Field(
        default=256, ge=1,
        description="subscriptions whose store (two ledgers) stays open; past it the least recently "
                    "used idle ones are closed",
    )
    # Telling the broker about an end: retried with backoff for this long, then
    # 503 so the coordinator retries the (idempotent) end.
    broker_end_timeout_s: float = Field(default=30.0, gt=0, description="budget of one end's broker call, s")
    trim_every_ends: int = Field(default=100, ge=1, description="ends between trims of a pending-ack log")
    # The stuck-transaction checker (streamtx.pendingack.txnchecker): a
    # transaction holding acks here longer than stuck_txn_after_s is looked up
    # at coordinator_url and ended as the coordinator ended it. The default is
    # twice the coordinator's default transaction timeout (60 s): a transaction
    # still OPEN then (a longer timeout) is simply asked about again.
    stuck_txn_after_s: float = Field(
        default=120.0, gt=0, description="age of a transaction's acks before the coordinator is asked, s",
    )
    stuck_txn_interval_s: float = Field(default=10.0, gt=0, description="time between stuck-txn checks, s")
