"""Calls to the pending-ack store: forward transactional acks, ask what is held."""

from __future__ import annotations

from streamtx.contracts import TxnId
from streamtx.contracts.models import Held, PendingAckCreate
from streamtx.errors import NotFoundError
from streamtx.transport import ONCE, HttpClient, RetryPolicy


class PendingAckClient:
    """The pending-ack store as the broker sees it (``STREAMTX_PENDINGACK_URL``)."""

    def __init__(self, base_url: str | None, timeout_s: float, token: str | None = None) -> None:
        self._client = HttpClient(base_url, peer="pending-ack store", setting="STREAMTX_PENDINGACK_URL",
                                  timeout_s=timeout_s, token=token, retry=RetryPolicy(attempts=5))

    @property
    def configured(self) -> bool:
        return self._client.configured

    async def ack(self, topic: str, subscription: str, txn: TxnId, message_ids: list[str],
                  cumulative: bool) -> None:
        """Returns once the store made the pending ack durable; ConflictError on a 409."""
        # model_construct: the ids were checked by the broker's own route; no second pass over them.
        body = PendingAckCreate.model_construct(topic=topic, subscription=subscription, txn_id=txn,
                                                message_ids=message_ids, cumulative=cumulative)
        await self._client.request("POST", "/v1/pendingack/acks", json=body)

    async def held(self, topic: str, subscription: str) -> list[tuple[str, TxnId | None]]:
        """The ids open transactions hold, each with its holder (None: an older store did not say)."""
        try:
            body = await self._client.request(
                "GET", "/v1/pendingack/held", params={"topic": topic, "subscription": subscription},
                retry=ONCE,
            )
        except NotFoundError:  # no transactional ack was ever logged there
            return []
        return held_pairs(Held.model_validate(body))

    async def aclose(self) -> None:
        await self._client.aclose()


def held_pairs(held: Held) -> list[tuple[str, TxnId | None]]:
    """A ``held`` answer as ``(id, holder)``; holder None when the store did not say (older)."""
    if not held.holders:
        return [(m, None) for m in held.message_ids]
    return [(m, TxnId.parse(t)) for t, ids in held.holders.items() for m in ids]
