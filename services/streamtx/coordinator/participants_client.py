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

Except a 409 to an end: the participant already ended the transaction the
other way (the broker's stuck-transaction checker aborted it, a buggy or
forged call ended it). Retrying cannot change that, so it is not retried: it
is a protocol violation, returned as a :class:`Violation` for the coordinator
to report (log, metric, admin view) while the transaction still reaches its
final state. A 409 whose error code is ``fenced`` is not such an answer (the
participant lost its ledger to a newer process, which will answer): it is
retried like a 503.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from streamtx.coordinator.records import Subscription
from streamtx.coordinator.state import Action
from streamtx.coordinator.txnid import TxnId
from streamtx.errors import ConflictError, NotFoundError, StreamtxError, UnavailableError
from streamtx.service import ServiceClient

log = logging.getLogger(__name__)

_fenced_code = "fenced"  # streamtx.errors.FencedError's code: a 409 that is retried


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
        def client(url: str | None, attempts: int) -> ServiceClient | None:
            if url is None:
                return None
            return ServiceClient(
                url, timeout_s=timeout_s, attempts=attempts, backoff_s=backoff_s,
                max_backoff_s=max_backoff_s, token=token,
            )

        self._broker = client(broker_url, 1)
        self._pendingack = client(pendingack_url, prepare_attempts)
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s

    def check_partitions(self) -> None:
        """UnavailableError (503) when no broker is configured to end partitions on."""
        if self._broker is None:
            raise UnavailableError("no broker_url configured: partitions cannot be ended")

    def check_subscriptions(self) -> None:
        """UnavailableError (503) when no pending-ack store is configured."""
        if self._pendingack is None:
            raise UnavailableError("no pendingack_url configured: subscriptions cannot be ended")

    async def prepare(self, txn: TxnId, subscriptions: Iterable[Subscription]) -> None:
        """Ask every subscription whether the commit may go ahead.

        ConflictError when one refuses (overlapping commit); UnavailableError
        when one cannot be reached after the configured tries.
        """
        subs = list(subscriptions)
        if not subs:
            return
        client = self._pendingack
        if client is None:
            raise UnavailableError("no pendingack_url configured")
        results = await asyncio.gather(
            *(client.request("POST", "/v1/txn/subscriptions/prepare", json=_sub_body(txn, s)) for s in subs),
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
        broker, pendingack = self._broker, self._pendingack
        for partition in partitions:
            if broker is None:
                log.error("%s: no broker_url, cannot end partition %s", txn, partition)
                continue
            body = {"txn_id": str(txn), "partition": partition, "action": action.value}
            calls.append(self._until_done(broker, "/v1/txn/partitions/end", body, f"partition {partition}"))
        for sub in subscriptions:
            if pendingack is None:
                log.error("%s: no pendingack_url, cannot end subscription %s", txn, sub)
                continue
            body = {**_sub_body(txn, sub), "action": action.value}
            who = f"subscription {sub.topic} {sub.subscription}"
            calls.append(self._until_done(pendingack, "/v1/txn/subscriptions/end", body, who))
        results = await asyncio.gather(*calls) if calls else []
        return [v for v in results if v is not None]

    async def _until_done(
        self, client: ServiceClient, path: str, body: dict[str, str], who: str
    ) -> Violation | None:
        try:
            await retry_forever(
                lambda: client.request("POST", path, json=body, attempts=1),
                what=f"{path} {body}", backoff_s=self._backoff_s, max_backoff_s=self._max_backoff_s,
            )
        except ConflictError as exc:
            log.error("PROTOCOL VIOLATION: %s %s answered 409 to %s: %s",
                      body["txn_id"], who, body["action"], exc.message)
            return Violation(who, body["action"], exc.message, time.time_ns() // 1_000_000)
        return None

    async def aclose(self) -> None:
        for client in (self._broker, self._pendingack):
            if client is not None:
                await client.aclose()


async def retry_forever(
    call: Callable[[], Awaitable[object]], *, what: str, backoff_s: float, max_backoff_s: float
) -> None:
    """Run ``call`` until it succeeds, sleeping a jittered, doubling delay between tries.

    A 404 counts as done: the participant has nothing of that transaction to
    end (say, the topic was deleted), and waiting would block the end forever.
    A 409 (other than ``fenced``) is raised: retrying cannot change it.
    """
    delay = backoff_s
    attempt = 0
    while True:
        try:
            await call()
            return
        except NotFoundError as exc:
            log.warning("%s: participant answered 404, nothing to end: %s", what, exc.message)
            return
        except ConflictError as exc:
            if exc.code != _fenced_code:
                raise
            failure: Exception = exc  # the participant lost its ledger: its successor will answer
        except Exception as exc:  # any failure (even a garbled 200) is retried: the end must land
            failure = exc
        attempt += 1
        # Warn on the first failures and then now and then, not on every retry.
        if attempt <= 3 or attempt % 20 == 0:
            log.warning("%s failed (try %d), retrying: %r", what, attempt, failure)
        await asyncio.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, max_backoff_s)


def _sub_body(txn: TxnId, sub: Subscription) -> dict[str, str]:
    return {"txn_id": str(txn), "topic": sub.topic, "subscription": sub.subscription}
