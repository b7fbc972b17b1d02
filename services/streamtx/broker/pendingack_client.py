"""Calls to the pending-ack store: forward transactional acks, ask what is held."""

from __future__ import annotations

from typing import Any

from streamtx.errors import NotFoundError, UnavailableError
from streamtx.service import ServiceClient


class PendingAckClient:
    """The pending-ack store as seen by the broker; ``None`` URL means not deployed."""

    def __init__(self, base_url: str | None, timeout_s: float, token: str | None = None) -> None:
        self._client = ServiceClient(base_url, timeout_s=timeout_s, token=token) if base_url else None

    @property
    def configured(self) -> bool:
        return self._client is not None

    async def ack(self, topic: str, subscription: str, txn_id: str, message_ids: list[str],
                  cumulative: bool) -> None:
        """Returns once the store made the pending ack durable; ConflictError on a 409."""
        body = {"topic": topic, "subscription": subscription, "txn_id": txn_id,
                "message_ids": message_ids, "cumulative": cumulative}
        await self._require().request("POST", "/v1/pendingack/acks", json=body)

    async def held(self, topic: str, subscription: str) -> list[str]:
        try:
            body: Any = await self._require().request(
                "GET", "/v1/pendingack/held", params={"topic": topic, "subscription": subscription},
                attempts=1,
            )
        except NotFoundError:  # no transactional ack was ever logged there
            return []
        return [str(m) for m in (body or {}).get("message_ids", [])]

    def _require(self) -> ServiceClient:
        if self._client is None:
            raise UnavailableError("no pending-ack store is configured (STREAMTX_PENDINGACK_URL)")
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
