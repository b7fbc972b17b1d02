"""Ends transactions the broker holds open but the coordinator has finished.

A transaction whose first message landed here keeps ``maxReadPosition`` behind
it until its marker arrives. The coordinator sends the marker to every
partition registered with it; a client that produced without registering, or a
zombie producing after the end, would leave the partition blocked forever. So
every ``stuck_txn_interval_s`` the broker asks the coordinator about each
transaction open here longer than ``stuck_txn_after_s``, and ends it the way
the coordinator did, read by :class:`streamtx.peers.CoordinatorLookup` (the
pending-ack store's checker asks the same way). Without a coordinator URL
nothing is checked.

Holds of acked messages too: a broker that took a partition over learns from the
pending-ack store which transactions hold what (``held``); when the previous
owner had applied an abort just before, no end ever comes here, and those
messages would never be dispatched again. Such a holder still holding after
``stuck_txn_after_s`` is asked about the same way; an abort releases its holds.
A commit is left to the store's end (its deletes were made durable by the
previous owner before it answered, so its messages are gone here already).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from streamtx.broker.partition import Partition
from streamtx.broker.subscription import Subscription
from streamtx.contracts.states import Action
from streamtx.errors import StreamtxError
from streamtx.peers import CoordinatorLookup

log = logging.getLogger(__name__)


class StuckTxnChecker:
    """Every ``interval_s``, ends the partitions' stuck transactions as the coordinator did."""

    def __init__(self, coordinator_url: str, *, token: str | None, after_s: float, interval_s: float) -> None:
        self.verdict = CoordinatorLookup(coordinator_url, token=token)
        self._after_s = after_s
        self._interval_s = interval_s

    async def run(self, partitions: Callable[[], Iterable[Partition]],
                  subscriptions: Callable[[], Iterable[Subscription]] = list) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            for sub in list(subscriptions()):
                await self._release_aborted_holds(sub)
            for part in list(partitions()):
                for txn in part.stuck_txns(self._after_s):
                    action = await self.verdict(txn)
                    if action is None:
                        continue
                    try:
                        marker = await part.end_txn(txn, action)
                        log.warning("%s: ended stuck txn %s (%s) as the coordinator did; marker %s",
                                    part.name, txn, action.value, marker)
                    except StreamtxError as exc:
                        log.warning("%s: ending stuck txn %s failed: %s", part.name, txn, exc)

    async def _release_aborted_holds(self, sub: Subscription) -> None:
        for txn in sub.restored_holders(self._after_s):
            if await self.verdict(txn) is not Action.ABORT:
                continue
            try:
                await sub.release_aborted(txn)
                log.warning("%s/%s: released the holds of %s, aborted (its end went elsewhere)",
                            sub.topic, sub.name, txn)
            except StreamtxError as exc:
                log.warning("%s/%s: releasing the holds of %s failed: %s", sub.topic, sub.name, txn, exc)

    async def aclose(self) -> None:
        await self.verdict.aclose()
