"""What the pending-ack store's stuck-transaction checker looks at (the loop: :mod:`streamtx.peers.stuck`).

It ends transactions that hold acks here but that the coordinator has finished.

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
question through the same :class:`streamtx.peers.CoordinatorLookup`, in the same loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator

from streamtx.contracts import Action, TxnId
from streamtx.peers import Lookup, Stuck, StuckTxnChecker
from streamtx.pendingack.store import PendingAckStore


def stuck_acks(stores: Iterable[PendingAckStore], after_s: float) -> Iterator[Stuck]:
    """One round's sweep over ``stores``: their transactions holding acks too long."""
    for store in list(stores):
        for txn in store.state.stuck_txns(after_s):
            if store.ending_now(txn):
                continue  # the coordinator's end is running; if it fails, the next round sees it
            yield Stuck(txn, f"{store.topic}/{store.subscription}", _ender(store, txn))


def checker(lookup: Lookup, stores: Callable[[], Iterable[PendingAckStore]], *,
            after_s: float, interval_s: float) -> StuckTxnChecker:
    """The store's checker over the subscriptions ``stores`` lists each round (the opened ones)."""
    return StuckTxnChecker(lookup, lambda: stuck_acks(stores(), after_s), interval_s=interval_s)


def _ender(store: PendingAckStore, txn: TxnId) -> Callable[[Action], Awaitable[str | None]]:
    async def end(action: Action) -> str | None:
        await store.end(txn, action is Action.COMMIT)
        return None
    return end
