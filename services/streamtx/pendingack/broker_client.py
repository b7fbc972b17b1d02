"""Telling the partition broker how a transaction's acks ended.

On commit the broker deletes the messages from its subscription cursor; on
abort it makes them deliverable again. The call is idempotent on the broker's
side, so it is retried with backoff until it succeeds or the end's time budget
runs out; then the end fails with 503 and the coordinator retries it.
"""

from __future__ import annotations

import abc
import logging

from streamtx.contracts import Action, TxnId
from streamtx.contracts.models import SubscriptionAcksEnd
from streamtx.errors import UnavailableError
from streamtx.transport import HttpClient, RetryPolicy

log = logging.getLogger(__name__)


class BrokerNotifier(abc.ABC):
    """Where the store sends ``POST /v1/txn/subscriptions/end``."""

    @abc.abstractmethod
    async def end(
        self, topic: str, subscription: str, txn: TxnId, action: Action, message_ids: list[str],
        *, cumulative_message_ids: list[str] | None = None,
    ) -> None:
        """Return once the broker applied the end (or raise UnavailableError)."""

    async def aclose(self) -> None:  # noqa: B027 - most notifiers hold nothing
        """Release connections."""


class BrokerClient(BrokerNotifier):
    """Calls the broker over HTTP, retrying transport errors and 5xx until ``timeout_s``.

    Without a broker URL (a store run alone) an end is only logged.
    """

    def __init__(self, broker_url: str | None, *, timeout_s: float, token: str | None = None) -> None:
        self._client = HttpClient(broker_url, peer="broker", setting="STREAMTX_BROKER_URL", token=token,
                                  retry=RetryPolicy(attempts=None, deadline_s=timeout_s))

    async def end(
        self, topic: str, subscription: str, txn: TxnId, action: Action, message_ids: list[str],
        *, cumulative_message_ids: list[str] | None = None,
    ) -> None:
        if not self._client.configured:
            log.warning("no broker_url: %s of %s on %s/%s not sent to a broker",
                        action.value, txn, topic, subscription)
            return
        body = SubscriptionAcksEnd.model_construct(
            topic=topic, subscription=subscription, txn_id=txn, action=action,
            message_ids=message_ids, cumulative_message_ids=cumulative_message_ids or [])

        def retrying(attempt: int, exc: BaseException) -> None:
            log.warning("broker end of %s on %s/%s failed (try %d), retrying: %s",
                        txn, topic, subscription, attempt, exc)

        try:
            await self._client.request("POST", "/v1/txn/subscriptions/end", json=body, on_retry=retrying)
        except UnavailableError as exc:  # a 4xx is final and propagates as its own class
            raise UnavailableError(f"broker did not apply {action.value} of {txn}: {exc}") from exc

    async def aclose(self) -> None:
        await self._client.aclose()
