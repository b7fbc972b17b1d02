"""Calls to the pending-ack store: forward transactional acks, ask what is held."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import NamedTuple

from streamtx.contracts import TxnId
from streamtx.contracts.models import Held, PendingAckCreate
from streamtx.contracts.msgid import MessageId
from streamtx.errors import NotFoundError, StreamtxError
from streamtx.transport import ONCE, HttpClient, RetryPolicy

log = logging.getLogger(__name__)


class Outage:
    """Says once that a peer does not answer (again every ``every_s`` while that lasts), and once
    that it answers again: every subscription of a restarted broker waits for the pending-ack
    store, which may well start after it, and a line per try and per subscription (hundreds)
    drowned the log."""

    def __init__(self, peer: str, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.peer = peer
        self.every_s = every_s
        self._clock = clock
        self._since: float | None = None  # when the current outage began
        self._said = float("-inf")

    def failed(self, exc: Exception) -> None:
        now = self._clock()
        if self._since is None:
            self._since = now
        if now - self._said >= self.every_s:
            self._said = now
            waited = now - self._since
            log.warning("the %s does not answer%s (%s); what needs it waits, retrying quietly",
                        self.peer, f" for {waited:.0f} s" if waited >= 1 else " yet", exc)
        else:
            log.debug("the %s does not answer: %s", self.peer, exc)

    def answered(self) -> None:
        if self._since is not None:
            if self._said >= self._since:  # its outage was told: so is its end
                log.info("the %s answers again after %.1f s", self.peer, self._clock() - self._since)
            self._since = None


class PendingAckClient:
    """The pending-ack store as the broker sees it (``STREAMTX_PENDINGACK_URL``)."""

    def __init__(self, base_url: str | None, timeout_s: float, token: str | None = None) -> None:
        self._client = HttpClient(base_url, peer="pending-ack store", setting="STREAMTX_PENDINGACK_URL",
                                  timeout_s=timeout_s, token=token, retry=RetryPolicy(attempts=5))
        self.outage = Outage("pending-ack store")

    @property
    def configured(self) -> bool:
        return self._client.configured

    async def ack(self, topic: str, subscription: str, txn: TxnId, message_ids: list[MessageId],
                  cumulative: bool) -> None:
        """Returns once the store made the pending ack durable; ConflictError on a 409."""
        # model_construct: the ids were checked by the broker's own route; no second pass over them.
        body = PendingAckCreate.model_construct(topic=topic, subscription=subscription, txn_id=txn,
                                                message_ids=[str(m) for m in message_ids],
                                                cumulative=cumulative)
        await self._client.request("POST", "/v1/pendingack/acks", json=body)

    async def delete(self, topic: str, subscription: str, partitions: int) -> None:
        """Delete the subscription's pending-ack state (its log, under every name of the topic);
        ConflictError while an open transaction holds acks there. Idempotent."""
        await self._client.request("DELETE", "/v1/pendingack/subscriptions",
                                   params={"topic": topic, "subscription": subscription,
                                           "partitions": partitions})

    async def held(self, topic: str, subscription: str) -> HeldAnswer:
        """The ids open transactions hold, each with its holder (None: an older store did not
        say), and their cumulative acks' reaches."""
        try:
            body = await self._client.request(
                "GET", "/v1/pendingack/held", params={"topic": topic, "subscription": subscription},
                retry=ONCE,
            )
        except NotFoundError:  # no transactional ack was ever logged there
            return HeldAnswer([], [])
        answer = Held.model_validate(body)
        return HeldAnswer(held_pairs(answer), held_reaches(answer))

    async def held_when_answering(self, topic: str, subscription: str,
                                  max_delay_s: float = 0.25) -> HeldAnswer:
        """:meth:`held`, asked again (backing off) until the store answers; said once (:class:`Outage`)."""
        delay = 0.1
        while True:
            try:
                got = await self.held(topic, subscription)
            except StreamtxError as exc:
                self.outage.failed(exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, max_delay_s)
                continue
            self.outage.answered()
            return got

    async def aclose(self) -> None:
        await self._client.aclose()


class HeldAnswer(NamedTuple):
    """A ``held`` answer: ``(id, holder)`` pairs, and ``(cumulative id, holder)`` reaches."""

    pairs: list[tuple[str, TxnId | None]]
    reaches: list[tuple[str, TxnId]]


def held_reaches(held: Held) -> list[tuple[str, TxnId]]:
    """A ``held`` answer's cumulative acks as ``(id, holder)``: each holds all up to its id."""
    return [(m, TxnId.parse(t)) for t, ids in held.cumulative.items() for m in ids]


def held_pairs(held: Held) -> list[tuple[str, TxnId | None]]:
    """A ``held`` answer as ``(id, holder)``; holder None when the store did not say (older)."""
    if not held.holders:
        return [(m, None) for m in held.message_ids]
    return [(m, TxnId.parse(t)) for t, ids in held.holders.items() for m in ids]
