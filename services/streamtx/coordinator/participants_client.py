"""Calls from the coordinator to a transaction's participants.

The participant endpoints (docs/internal-api.md):

* broker: ``POST /v1/txn/partitions/end`` ``{"txn_id", "partition", "action"}``;
* pending-ack store: ``POST /v1/txn/subscriptions/prepare``
  ``{"txn_id", "topic", "subscription"}`` (409 when the transaction's acks
  overlap a committed transaction's) and ``POST /v1/txn/subscriptions/end``
  ``{"txn_id", "topic", "subscription", "action"}``.

Every call is idempotent, so ends are retried with capped, jittered backoff
until they succeed: once COMMITTING or ABORTING is logged the decision is
final and every participant must hear it, however long it is down.

Except a 409 or a 400 to an end. A 409: the participant already ended the transaction the
other way (the broker's stuck-transaction checker aborted it, a buggy or
forged call ended it). Retrying cannot change that, so it is not retried: it
is a protocol violation, returned as a :class:`Violation` for the coordinator
to report (log, metric, admin view) while the transaction still reaches its
final state. A 400 says the participant cannot end what was registered (a name
that is no partition's): no retry can change that either, so it is a violation
too. A 409 whose error code is ``fenced`` is not such an answer (the
participant lost its ledger to a newer process, which will answer): it is
retried like a 503.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass

from pydantic import BaseModel

from streamtx.contracts import Action, TxnId
from streamtx.contracts.models import PartitionEnd, SubscriptionTxn, SubscriptionTxnEnd
from streamtx.errors import ConflictError, MalformedError, NotFoundError, StreamtxError, UnavailableError
from streamtx.records.txnlog import Subscription
from streamtx.transport import ONCE, HttpClient, RetryPolicy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Violation:
    """A participant answered an end with 409: it ended the transaction the other way."""

    participant: str  # "partition <name>" or "subscription <topic> <subscription>"
    action: str  # what the coordinator asked for
    answer: str  # the participant's error message
    at_ms: int  # wall-clock ms

    def as_json(self) -> dict[str, object]:
        return {"participant": self.participant, "action": self.action, "answer": self.answer,
                "at": self.at_ms}


class Participants:
    """The broker and pending-ack store a coordinator ends transactions on."""

    def __init__(
        self,
        broker_url: str | None,
        pendingack_url: str | None,
        *,
        backoff_s: float,
        max_backoff_s: float,
        timeout_s: float,
        prepare_attempts: int,
        token: str | None = None,
    ) -> None:
        self._broker = HttpClient(broker_url, peer="broker", setting="STREAMTX_BROKER_URL",
                                  timeout_s=timeout_s, token=token, retry=ONCE)
        self._pendingack = HttpClient(
            pendingack_url, peer="pending-ack store", setting="STREAMTX_PENDINGACK_URL",
            timeout_s=timeout_s, token=token,
            retry=RetryPolicy(attempts=prepare_attempts, backoff_s=backoff_s, max_backoff_s=max_backoff_s),
        )
        # An end must land: every failure (even a garbled 200) is retried, for ever.
        self._until_done_policy = RetryPolicy(attempts=None, backoff_s=backoff_s, max_backoff_s=max_backoff_s,
                                              any_error=True)

    def check_partitions(self) -> None:
        """UnavailableError (503) when no broker is configured to end partitions on."""
        if not self._broker.configured:
            raise UnavailableError("no broker_url configured: partitions cannot be ended")

    def check_subscriptions(self) -> None:
        """UnavailableError (503) when no pending-ack store is configured."""
        if not self._pendingack.configured:
            raise UnavailableError("no pendingack_url configured: subscriptions cannot be ended")

    async def prepare(self, txn: TxnId, subscriptions: Iterable[Subscription]) -> None:
        """Ask every subscription whether the commit may go ahead.

        ConflictError when one refuses (overlapping commit); UnavailableError
        when one cannot be reached after the configured tries (a ``fenced``
        store is one of those: its successor will answer).
        """
        subs = list(subscriptions)
        if not subs:
            return
        client = self._pendingack
        bodies = [SubscriptionTxn(txn_id=txn, topic=s.topic, subscription=s.subscription) for s in subs]
        results = await asyncio.gather(
            *(client.request("POST", "/v1/txn/subscriptions/prepare", json=b) for b in bodies),
            return_exceptions=True,
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        conflict = next((e for e in errors if isinstance(e, ConflictError)), None)
        if conflict is not None:
            raise ConflictError(f"overlapping commit: {conflict.message}")
        for err in errors:
            if isinstance(err, StreamtxError):
                raise UnavailableError(f"preparing the commit of {txn} failed: {err.message}")
            raise err

    async def end(
        self,
        txn: TxnId,
        action: Action,
        partitions: Iterable[str],
        subscriptions: Iterable[Subscription],
    ) -> list[Violation]:
        """End the transaction on every participant, in parallel; return when all answered.

        Returns the participants that refused because they had ended it the other way.
        """
        calls: list[Awaitable[Violation | None]] = []
        for partition in partitions:
            if not self._broker.configured:
                log.error("%s: no broker_url, cannot end partition %s", txn, partition)
                continue
            body: BaseModel = PartitionEnd(txn_id=txn, partition=partition, action=action)
            who = f"partition {partition}"
            calls.append(self._until_done(self._broker, "/v1/txn/partitions/end", body, who))
        for sub in subscriptions:
            if not self._pendingack.configured:
                log.error("%s: no pendingack_url, cannot end subscription %s", txn, sub)
                continue
            body = SubscriptionTxnEnd(txn_id=txn, topic=sub.topic, subscription=sub.subscription,
                                      action=action)
            who = f"subscription {sub.topic} {sub.subscription}"
            calls.append(self._until_done(self._pendingack, "/v1/txn/subscriptions/end", body, who))
        results = await asyncio.gather(*calls) if calls else []
        return [v for v in results if v is not None]

    async def _until_done(self, client: HttpClient, path: str, body: BaseModel, who: str) -> Violation | None:
        """Send until the participant answers. A 404 counts as done: it has nothing of that
        transaction to end (say, the topic was deleted), and waiting would block the end forever.
        A 409 ``conflict`` is not retried (see the module docstring); a 409 ``fenced`` decodes
        as :class:`~streamtx.errors.FencedError`, not a conflict, and is retried like a 503."""
        what = f"{path} {body.model_dump(mode='json')}"
        action = str(getattr(body, "action", ""))

        def retrying(attempt: int, exc: BaseException) -> None:
            # Warn on the first failures and then now and then, not on every retry.
            if attempt <= 3 or attempt % 20 == 0:
                log.warning("%s failed (try %d), retrying: %r", what, attempt, exc)

        async def once() -> Violation | None:
            try:
                await client.request("POST", path, json=body, retry=ONCE)
            except NotFoundError as exc:
                log.warning("%s: participant answered 404, nothing to end: %s", what, exc.message)
            except (ConflictError, MalformedError) as exc:
                # 400: the participant cannot end what was registered (a topic's name where a
                # partition's belongs, say); asking again would be refused for ever, with the
                # transaction stuck ending and its messages holding back the partition.
                log.error("PROTOCOL VIOLATION: %s %s answered %d to %s: %s",
                          getattr(body, "txn_id", "?"), who, exc.status, action, exc.message)
                answer = exc.message if exc.status == 409 else f"{exc.status} {exc.code}: {exc.message}"
                return Violation(who, action, answer, time.time_ns() // 1_000_000)
            return None

        return await self._until_done_policy.run(once, on_retry=retrying)

    async def aclose(self) -> None:
        await self._broker.aclose()
        await self._pendingack.aclose()
