"""The stuck-transaction loop the broker and the pending-ack store share.

A participant (a partition's transaction buffer, a subscription's held acks)
keeps a transaction open until the coordinator's end reaches it. An end that
never comes (a client that produced or acked without registering, an end lost
in a restart or a handover) would hold it open for good. So every
``interval_s`` the participant lists what has been open too long (a *sweep*:
the one thing each service does its own way), asks the coordinator how each
transaction ended (:class:`~streamtx.peers.CoordinatorLookup`, once per
transaction per round) and applies that end.

A round that fails is logged and the next one runs: the loop never stops
before it is cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from streamtx.contracts import Action, TxnId
from streamtx.errors import StreamtxError

log = logging.getLogger(__name__)

#: How the coordinator ended a transaction: the end to apply, or None to leave it for now
#: (:class:`streamtx.peers.CoordinatorLookup` is the real one).
Lookup = Callable[[TxnId], Awaitable[Action | None]]


@dataclass(frozen=True)
class Stuck:
    """One transaction held open too long somewhere, and how to end it there."""

    txn: TxnId
    where: str  # names the holder in the log
    end: Callable[[Action], Awaitable[str | None]]  # applies the end; returns a detail to log
    only: Action | None = None  # the one end applied here (the other is left to its own path)


#: Lists what is stuck now; called once per round, read lazily between the round's calls.
Sweep = Callable[[], Iterable[Stuck]]


class StuckTxnChecker:
    """Every ``interval_s``, ends what ``sweep`` lists as the coordinator did (``lookup``)."""

    def __init__(self, lookup: Lookup, sweep: Sweep, *, interval_s: float) -> None:
        self._lookup = lookup
        self._sweep = sweep
        self._interval_s = interval_s

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.check()
            except Exception:  # never let one bad round stop the checker
                log.exception("stuck-txn check failed")

    async def check(self) -> int:
        """One round; returns how many transactions it ended."""
        ended = 0
        verdicts: dict[TxnId, Action | None] = {}  # one question per transaction per round
        for stuck in self._sweep():
            if stuck.txn not in verdicts:
                verdicts[stuck.txn] = await self._lookup(stuck.txn)
            action = verdicts[stuck.txn]
            if action is None or (stuck.only is not None and action is not stuck.only):
                continue
            try:
                detail = await stuck.end(action)
            except StreamtxError as exc:  # the next round asks again
                log.warning("%s: ending stuck txn %s failed: %s", stuck.where, stuck.txn, exc)
                continue
            ended += 1
            log.warning("%s: ended stuck txn %s (%s) as the coordinator did%s", stuck.where, stuck.txn,
                        action.value, f"; {detail}" if detail else "")
        return ended
