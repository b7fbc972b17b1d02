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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from streamtx.broker.partition import Partition
from streamtx.errors import StreamtxError
from streamtx.peers import CoordinatorLookup

log = logging.getLogger(__name__)


class StuckTxnChecker:
    """Every ``interval_s``, ends the partitions' stuck transactions as the coordinator did."""

    def __init__(self, coordinator_url: str, *, token: str | None, after_s: float, interval_s: float) -> None:
        self.verdict = CoordinatorLookup(coordinator_url, token=token)
        self._after_s = after_s
        self._interval_s = interval_s

    async def run(self, partitions: Callable[[], Iterable[Partition]]) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
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

    async def aclose(self) -> None:
        await self.verdict.aclose()
