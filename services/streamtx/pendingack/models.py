"""Request and response bodies of the pending-ack store's API.

The bodies other services send live in :mod:`streamtx.contracts.models`.
"""

from __future__ import annotations

from pydantic import BaseModel

from streamtx.contracts.models import Held, PendingAckCreate, SubscriptionTxn, SubscriptionTxnEnd

__all__ = ["BatchLogUpdate", "Held", "PendingAckCreate", "SubscriptionTxn", "SubscriptionTxnEnd"]


class BatchLogUpdate(BaseModel):
    """Admin: switch batched pending-ack log writes."""

    enabled: bool
