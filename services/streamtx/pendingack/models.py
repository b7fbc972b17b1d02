"""Request and response bodies of the pending-ack store's API.

The bodies other services send live in :mod:`streamtx.contracts.models`.
"""

from __future__ import annotations

from streamtx.contracts.body import StrictBody
from streamtx.contracts.models import Held, PendingAckCreate, SubscriptionTxn, SubscriptionTxnEnd

__all__ = ["BatchLogUpdate", "Held", "PendingAckCreate", "SubscriptionTxn", "SubscriptionTxnEnd"]


class BatchLogUpdate(StrictBody):
    """Admin: switch batched pending-ack log writes."""

    enabled: bool
