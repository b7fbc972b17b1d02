"""What the broker's stuck-transaction checker looks at (the loop: :mod:`streamtx.peers.stuck`).

A transaction whose first message landed here keeps ``maxReadPosition`` behind
it until its marker arrives. The coordinator sends the marker to every
partition registered with it; a client that produced without registering, or a
zombie producing after the end, would leave the partition blocked forever. So
every ``stuck_txn_interval_s`` the broker asks the coordinator about each
transaction open here longer than ``stuck_txn_after_s``, and ends it the way
the coordinator did, read by :class:`streamtx.peers.CoordinatorLookup` (the
pending-ack store's checker asks the same way, in the same loop). Without a
coordinator URL nothing is checked.

Holds of acked messages too: a broker that took a partition over learns from the
pending-ack store which transactions hold what (``held``); when the previous
owner had applied an abort just before, no end ever comes here, and those
messages would never be dispatched again. Such a holder still holding after
``stuck_txn_after_s`` is asked about the same way; an abort releases its holds.
A commit is left to the store's end (its deletes were made durable by the
previous owner before it answered, so its messages are gone here already).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator

from streamtx.broker.partition import Partition
from streamtx.broker.subscription import Subscription
from streamtx.contracts import Action, TxnId
from streamtx.peers import Lookup, Stuck, StuckTxnChecker


def stuck_here(partitions: Callable[[], Iterable[Partition]],
               subscriptions: Callable[[], Iterable[Subscription]], after_s: float) -> Iterator[Stuck]:
    """One round's sweep: restored holds first, then the partitions' open transactions."""
    for sub in list(subscriptions()):
        for txn in sub.restored_holders(after_s):
            yield Stuck(txn, f"{sub.topic}/{sub.name} (holds restored from the pending-ack store)",
                        _releaser(sub, txn), only=Action.ABORT)
    for part in list(partitions()):
        for txn in part.stuck_txns(after_s):
            yield Stuck(txn, part.name, _ender(part, txn))


def checker(lookup: Lookup, partitions: Callable[[], Iterable[Partition]],
            subscriptions: Callable[[], Iterable[Subscription]], *,
            after_s: float, interval_s: float) -> StuckTxnChecker:
    """The broker's checker over what ``partitions`` and ``subscriptions`` list each round."""
    return StuckTxnChecker(lookup, lambda: stuck_here(partitions, subscriptions, after_s),
                           interval_s=interval_s)


def _ender(part: Partition, txn: TxnId) -> Callable[[Action], Awaitable[str | None]]:
    async def end(action: Action) -> str | None:
        marker = await part.end_txn(txn, action)
        return f"marker {marker}"
    return end


def _releaser(sub: Subscription, txn: TxnId) -> Callable[[Action], Awaitable[str | None]]:
    async def release(action: Action) -> str | None:
        await sub.release_aborted(txn)  # ``only`` abort: its end went elsewhere
        return "its holds released"
    return release
