"""The bodies the services send each other (docs/internal-api.md), one model each.

The receiving route validates with the model, and the sending client builds
the same model and sends ``model_dump(mode="json")``, so a field renamed on one
side breaks a test instead of a deployment. Transaction ids are
:data:`~streamtx.contracts.txnid.TxnIdField`: a :class:`TxnId` in Python,
``"{most}:{least}"`` on the wire, validated by the one strict parser; names
follow :mod:`streamtx.names` (Pulsar's rules).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from streamtx.contracts.body import Lax, StrictBody
from streamtx.contracts.msgid import MessageIdText
from streamtx.contracts.states import Action
from streamtx.contracts.txnid import TxnIdField
from streamtx.names import PartitionName, SubscriptionName, TopicName

#: Most message ids one ack or end may carry.
MAX_IDS_PER_CALL = 100_000


class PartitionEnd(StrictBody):
    """Coordinator -> broker: end a transaction on one partition (write its marker; idempotent)."""

    txn_id: TxnIdField
    partition: PartitionName
    action: Annotated[Action, Lax]


class PartitionEnded(PartitionEnd):
    """Broker -> coordinator: the marker's message id, or null when the txn never produced there."""

    marker: str | None


class SubscriptionTxn(StrictBody):
    """Coordinator -> pending-ack store: one transaction on one subscription (prepare)."""

    txn_id: TxnIdField
    topic: TopicName
    subscription: SubscriptionName


class SubscriptionTxnEnd(SubscriptionTxn):
    """Coordinator -> pending-ack store: end one transaction's acks on one subscription."""

    action: Annotated[Action, Lax]


class PendingAckCreate(StrictBody):
    """Broker -> pending-ack store: a transactional ack to hold durably."""

    topic: TopicName
    subscription: SubscriptionName
    txn_id: TxnIdField
    message_ids: list[MessageIdText] = Field(min_length=1, max_length=MAX_IDS_PER_CALL)
    cumulative: bool = False


class Held(StrictBody):
    """Pending-ack store -> broker: ids open transactions hold, which the broker must not dispatch."""

    message_ids: list[str]
    # The same ids by holding transaction (absent from older stores): txn id -> ids.
    holders: dict[str, list[str]] = Field(default_factory=dict)
    # Each open transaction's cumulative acks (one id per partition; absent from older stores):
    # everything at or before such an id is held, not only the id (listed in ``holders`` too).
    cumulative: dict[str, list[str]] = Field(default_factory=dict)


class SubscriptionAcksEnd(StrictBody):
    """Pending-ack store -> broker: delete (commit) or redeliver (abort) a transaction's acked ids."""

    topic: TopicName
    subscription: SubscriptionName
    txn_id: TxnIdField
    action: Annotated[Action, Lax]
    message_ids: list[MessageIdText] = Field(default_factory=list)
    cumulative_message_id: MessageIdText | None = None  # one partition's (kept for older stores)
    cumulative_message_ids: list[MessageIdText] = Field(default_factory=list)  # at most one per partition
