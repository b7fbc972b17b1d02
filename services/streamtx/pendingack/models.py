"""Request and response bodies of the pending-ack store's API."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from streamtx.names import SubscriptionName, TopicName


class AckCreate(BaseModel):
    """Broker -> store: a transactional ack to hold."""

    topic: TopicName
    subscription: SubscriptionName
    txn_id: str
    message_ids: list[str] = Field(min_length=1, max_length=100_000)
    cumulative: bool = False


class HeldPublic(BaseModel):
    """Ids held by open transactions, which the broker must not dispatch."""

    message_ids: list[str]


class SubscriptionTxn(BaseModel):
    """Coordinator -> store: one transaction on one subscription."""

    txn_id: str
    topic: TopicName
    subscription: SubscriptionName


class SubscriptionTxnEnd(SubscriptionTxn):
    """Coordinator -> store: end one transaction on one subscription."""

    action: Literal["commit", "abort"]


class BatchLogUpdate(BaseModel):
    """Admin: switch batched pending-ack log writes."""

    enabled: bool
