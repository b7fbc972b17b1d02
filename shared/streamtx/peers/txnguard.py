"""May this produce or ack go into that transaction? The participants' door check (issue 21 item 2).

A broker stores a transactional message, and a pending-ack store holds a
transactional ack, only once it knows that the transaction is OPEN, that this
partition (or subscription) is registered in it, and that the caller owns it.
Without the check a produce naming a never-opened, an ended, or an unserved
transaction was stored (and held back every reader of the partition until the
stuck-transaction checker aborted it, or for ever), and a client of the same
tenant could write into someone else's open transaction, which its owner's
commit then published.

Pulsar's broker relies on the coordinator's registration in the same way, and
Kafka's KIP-890 defends against hanging transactions so: the participant asks
the coordinator (``GET {coordinator_url}/v1/transactions/{txn}``, whose answer
carries the owner, the state and the registered participants) on first sight,
and caches the positive answer per transaction. A partition or subscription not
in the cached answer is asked again (the client may have registered it since);
the entry is dropped when the transaction's end reaches this process
(:meth:`TxnGuard.forget`), and re-asked after ``ttl_s`` in any case, so an end
that never reached us (the partition moved) is noticed too. An OPEN answer to a
question sent before the end reached us predates the end: it is neither cached
nor believed, the coordinator is asked again (issue 32: cached, it let a late
produce of the finished transaction through the door for ``ttl_s``, and where
the partition no longer remembered the end, after a restart, opened the
transaction there again). Concurrent first sights of one transaction share one
request.

Answers, in the API's error shape: 404 (unknown transaction, or one of a
coordinator id no coordinator serves), 403 (another client's transaction),
409 (not OPEN, or this participant not registered), 503 (the coordinator could
not be asked: retry).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import httpx

from streamtx.auth.policy import check_owner
from streamtx.auth.tokens import Principal
from streamtx.contracts import TxnId, TxnState
from streamtx.errors import (
    ConflictError,
    NotFoundError,
    NotServedError,
    StreamtxError,
    UnavailableError,
)
from streamtx.transport import ONCE, HttpClient
from streamtx.transport.redirect import OwnerCache

__all__ = ["Registration", "TxnGuard", "registration_of"]

#: A subscription as the coordinator registers it: (topic or partition name, subscription).
SubscriptionKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Registration:
    """What the coordinator said of a transaction: its owner, state and participants."""

    txn: TxnId
    owner: str
    state: str
    partitions: frozenset[str]
    subscriptions: frozenset[SubscriptionKey]
    at: float  # time.monotonic() when the question was sent: the answer is at least that fresh

    def covers(self, partitions: Iterable[str], subscriptions: Iterable[SubscriptionKey]) -> bool:
        return self.partitions.issuperset(partitions) and self.subscriptions.issuperset(subscriptions)

    def check(self, principal: Principal | None, partitions: Iterable[str],
              subscriptions: Iterable[SubscriptionKey]) -> None:
        """Raise unless ``principal`` may write into the transaction on these participants.

        The owner first: another client learns nothing of the transaction but 403.
        """
        check_owner(principal, self.owner, f"transaction {self.txn}")
        if self.state != TxnState.OPEN.name:
            raise ConflictError(f"transaction {self.txn} is {self.state}, not OPEN")
        for p in partitions:
            if p not in self.partitions:
                raise ConflictError(f"partition {p} is not registered in transaction {self.txn}: register it "
                                    f"first (POST /v1/transactions/{self.txn}/partitions)")
        for topic, sub in subscriptions:
            if (topic, sub) not in self.subscriptions:
                raise ConflictError(f"subscription {sub} of {topic} is not registered in transaction "
                                    f"{self.txn}: register it first (POST /v1/transactions/{self.txn}"
                                    "/subscriptions)")


def registration_of(txn: TxnId, answer: object, at: float) -> Registration:
    """The coordinator's ``GET /v1/transactions/{txn}`` answer as a :class:`Registration`. Pure."""
    if not isinstance(answer, dict):
        raise UnavailableError(f"the coordinator's answer about {txn} is not an object")
    try:
        subs = frozenset((str(s["topic"]), str(s["subscription"])) for s in answer.get("subscriptions") or ())
        return Registration(txn, str(answer.get("owner") or ""), str(answer.get("state")),
                            frozenset(str(p) for p in answer.get("partitions") or ()), subs, at)
    except (KeyError, TypeError) as exc:
        raise UnavailableError(f"the coordinator's answer about {txn} is garbled: {exc!r}") from None


class TxnGuard:
    """``await guard.check(txn, principal, partitions=..., subscriptions=...)`` before a transactional
    write is accepted; ``forget(txn)`` when its end arrives. See the module docstring."""

    def __init__(self, coordinator_url: str, *, token: str | None, timeout_s: float = 5.0,
                 ttl_s: float = 30.0, max_txns: int = 100_000, moving_wait_s: float = 10.0,
                 http: httpx.AsyncClient | None = None) -> None:
        # A coordinator id moving between replicas (a scale-up, a replica's restart) answers
        # 503 not_owner for a moment: that is latency, as for every other caller of a moving
        # log, never a reason to refuse a write of a transaction that is open.
        self._client = HttpClient(coordinator_url, peer="coordinator", setting="STREAMTX_COORDINATOR_URL",
                                  retry=ONCE, timeout_s=timeout_s, token=token, http=http,
                                  owners=OwnerCache(), moving_wait_s=moving_wait_s)
        self._ttl_s = ttl_s
        self._max = max_txns
        self._known: OrderedDict[TxnId, Registration] = OrderedDict()
        self._asking: dict[TxnId, asyncio.Task[Registration]] = {}
        # When an end last reached us, per transaction (as many as cached answers): an answer to
        # a question sent before it may say OPEN for a transaction that is ending.
        self._ended_at: OrderedDict[TxnId, float] = OrderedDict()

    async def check(self, txn: TxnId, principal: Principal | None, *, partitions: Iterable[str] = (),
                    subscriptions: Iterable[SubscriptionKey] = ()) -> None:
        """Return when the write may go in; else the 403/404/409/503 to answer (module docstring)."""
        parts, subs = tuple(partitions), tuple(subscriptions)
        known = self._known.get(txn)
        if known is None or time.monotonic() - known.at > self._ttl_s or not known.covers(parts, subs):
            known = await self._ask(txn)
        else:
            self._known.move_to_end(txn)
        known.check(principal, parts, subs)

    def forget(self, txn: TxnId) -> None:
        """The transaction ended here: the next write naming it asks the coordinator again, and
        an answer to a question already on its way is not believed."""
        self._known.pop(txn, None)
        self._ended_at[txn] = time.monotonic()
        self._ended_at.move_to_end(txn)
        while len(self._ended_at) > self._max:
            self._ended_at.popitem(last=False)

    async def _ask(self, txn: TxnId) -> Registration:
        while True:
            task = self._asking.get(txn)
            if task is None:
                task = self._asking[txn] = asyncio.create_task(self._lookup(txn), name=f"txnguard-{txn}")
                task.add_done_callback(functools.partial(self._asked, txn))
            # Shielded: one caller going away must not cancel the answer the others wait for.
            known = await asyncio.shield(task)
            if known.state != TxnState.OPEN.name or self._ended_at.get(txn, -1.0) < known.at:
                break
            # OPEN, asked before the end reached us: it was, and may no longer be. The end comes
            # after the coordinator logged COMMITTING/ABORTING, so a question sent now says so.
            if self._asking.get(txn) is task:
                del self._asking[txn]
        if known.state == TxnState.OPEN.name:
            self._known[txn] = known
            self._known.move_to_end(txn)
            while len(self._known) > self._max:
                self._known.popitem(last=False)
        else:
            self._known.pop(txn, None)
        return known

    def _asked(self, txn: TxnId, task: asyncio.Task[Registration]) -> None:
        if self._asking.get(txn) is task:  # not a newer question sent after an end
            del self._asking[txn]
        if not task.cancelled():
            task.exception()  # retrieved: every caller may have gone away meanwhile

    async def _lookup(self, txn: TxnId) -> Registration:
        asked = time.monotonic()
        try:
            answer = await self._client.request("GET", f"/v1/transactions/{txn}")
        except NotServedError:
            raise NotFoundError(f"transaction {txn} is unknown: no coordinator serves its coordinator id "
                                f"{txn.coordinator_id}") from None
        except NotFoundError:
            raise NotFoundError(f"transaction {txn} is unknown (never opened, or ended and "
                                "forgotten)") from None
        except StreamtxError as exc:
            # Our own credential refused, a coordinator down or moving: nothing is known; retry.
            raise UnavailableError(f"cannot ask the coordinator about transaction {txn}: "
                                   f"{exc.message}") from None
        return registration_of(txn, answer, asked)

    async def aclose(self) -> None:
        for task in list(self._asking.values()):
            task.cancel()
        await self._client.aclose()
