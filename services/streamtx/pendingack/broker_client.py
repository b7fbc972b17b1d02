"""Telling the partition broker how a transaction's acks ended.

On commit the broker deletes the messages from its subscription cursor; on
abort it makes them deliverable again. The call is idempotent on the broker's
side, so it is retried with backoff until it succeeds or the end's time budget
runs out; then the end fails with 503 and the coordinator retries it.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import time

from streamtx.errors import UnavailableError
from streamtx.service import ServiceClient

log = logging.getLogger(__name__)

_first_backoff_s = 0.05
_max_backoff_s = 2.0


class BrokerNotifier(abc.ABC):
    """Where the store sends ``POST /v1/txn/subscriptions/end``."""

    @abc.abstractmethod
    async def end(
        self, topic: str, subscription: str, txn_id: str, action: str, message_ids: list[str],
        *, cumulative_message_ids: list[str] | None = None,
    ) -> None:
        """Return once the broker applied the end (or raise UnavailableError)."""

    async def aclose(self) -> None:  # noqa: B027 - most notifiers hold nothing
        """Release connections."""


class HttpBrokerNotifier(BrokerNotifier):
    """Calls the broker over HTTP, retrying transport errors and 5xx until ``timeout_s``."""

    def __init__(self, broker_url: str, *, timeout_s: float, token: str | None = None) -> None:
        self._client = ServiceClient(broker_url, token=token, attempts=3)
        self._timeout_s = timeout_s

    async def end(
        self, topic: str, subscription: str, txn_id: str, action: str, message_ids: list[str],
        *, cumulative_message_ids: list[str] | None = None,
    ) -> None:
        body = {
            "topic": topic, "subscription": subscription, "txn_id": txn_id, "action": action,
            "message_ids": message_ids, "cumulative_message_ids": cumulative_message_ids or [],
        }
        deadline = time.monotonic() + self._timeout_s
        delay = _first_backoff_s
        while True:
            try:
                await self._client.request("POST", "/v1/txn/subscriptions/end", json=body)
                return
            except UnavailableError as exc:
                # ServiceClient raises only retriable errors as UnavailableError;
                # a 4xx is final and propagates as its own class.
                if time.monotonic() + delay > deadline:
                    raise UnavailableError(f"broker did not apply {action} of {txn_id}: {exc}") from exc
                log.warning("broker end of %s on %s/%s failed, retrying: %s",
                            txn_id, topic, subscription, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _max_backoff_s)

    async def aclose(self) -> None:
        await self._client.aclose()


class NoBroker(BrokerNotifier):
    """No broker configured (a store run alone): ends are only logged here."""

    async def end(
        self, topic: str, subscription: str, txn_id: str, action: str, message_ids: list[str],
        *, cumulative_message_ids: list[str] | None = None,
    ) -> None:
        log.warning("no broker_url: %s of %s on %s/%s not sent to a broker",
                    action, txn_id, topic, subscription)
