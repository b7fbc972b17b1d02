"""Ends transactions that hold acks here but that the coordinator has finished.

A transaction's acks hold their messages (the broker will not dispatch them)
until the coordinator's end arrives. The coordinator ends exactly the
subscriptions registered with it, once; an ack that reaches this store after
that end (a client acking with an aborted transaction, an end that arrived
before the first ack and was forgotten in a restart) would hold its messages
forever. So every ``stuck_txn_interval_s`` the store asks the coordinator
(``GET {coordinator_url}/v1/transactions/{txn}``) about each transaction that
has held acks here for longer than ``stuck_txn_after_s``, and ends it the way
the coordinator did:

* ``COMMITTED`` -> commit; ``ABORTED`` or ``TIMEOUT`` -> abort;
* 404 (the coordinator does not know it, e.g. its records were deleted after
  ``finished_retention_ms``) -> abort, except the 404 of a coordinator that
  does not serve the transaction's coordinator id (nothing is known then);
* ``OPEN``, ``COMMITTING``, ``ABORTING`` or no answer -> left alone: the
  coordinator still ends it (its timeout, its retried fan-out), or the next
  round asks again.

A transaction whose end is running right now is skipped; one whose end failed
(the broker was down) and nobody repeats it is ended by a later round.

Only the subscriptions opened since this process started are checked (see
:mod:`.registry`). Without a coordinator URL nothing is checked. The broker's
checker for transaction buffers (``streamtx.broker.txnchecker``) asks the same
question through the same :class:`streamtx.peers.CoordinatorLookup`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from streamtx.contracts import Action, TxnId
from streamtx.errors import StreamtxError
from streamtx.pendingack.store import PendingAckStore

log = logging.getLogger(__name__)

#: How the coordinator ended a transaction: the end to apply, or None to leave it for now
#: (:class:`streamtx.peers.CoordinatorLookup` is the real one).
Lookup = Callable[[TxnId], Awaitable[Action | None]]


class StuckTxnChecker:
    """Every ``interval_s``, ends the stuck transactions of every opened store as the coordinator did."""

    def __init__(self, lookup: Lookup, *, after_s: float, interval_s: float) -> None:
        self._lookup = lookup
        self._after_s = after_s
        self._interval_s = interval_s

    async def run(self, stores: Callable[[], Iterable[PendingAckStore]]) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.check(stores())
            except Exception:  # never let one bad round stop the checker
                log.exception("stuck-txn check failed")

    async def check(self, stores: Iterable[PendingAckStore]) -> int:
        """One round; returns how many transactions it ended."""
        ended = 0
        verdicts: dict[TxnId, Action | None] = {}  # one question per transaction per round
        for store in list(stores):
            for txn in store.state.stuck_txns(self._after_s):
                if store.ending_now(txn):
                    continue  # the coordinator's end is running; if it fails, the next round sees it
                if txn not in verdicts:
                    verdicts[txn] = await self._lookup(txn)
                action = verdicts[txn]
                if action is None:
                    continue
                commit = action is Action.COMMIT
                try:
                    await store.end(txn, commit)
                except StreamtxError as exc:
                    log.warning("%s/%s: ending stuck txn %s failed: %s",
                                store.topic, store.subscription, txn, exc)
                    continue
                ended += 1
                log.warning("%s/%s: ended stuck txn %s (%s) as the coordinator did",
                            store.topic, store.subscription, txn, action.value)
        return ended
