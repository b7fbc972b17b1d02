"""The stuck-transaction loop the broker and the pending-ack store share (streamtx.peers.stuck)."""

from __future__ import annotations

import asyncio
from typing import Any

from streamtx.broker.txnchecker import checker as broker_checker
from streamtx.contracts import Action, TxnId
from streamtx.errors import UnavailableError
from streamtx.peers import Stuck, StuckTxnChecker

A, B = TxnId(0, 1), TxnId(0, 2)


class FakePartition:
    """A partition with ``A`` stuck whose end fails as told."""

    name = "persistent://t/n/x-partition-0"

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.ended: list[tuple[TxnId, Action]] = []
        self.done = asyncio.Event()

    def stuck_txns(self, older_than_s: float) -> list[TxnId]:
        return [] if self.ended else [A]

    async def end_txn(self, txn: TxnId, action: Action) -> str | None:
        if self.failures:
            raise self.failures.pop(0)
        self.ended.append((txn, action))
        self.done.set()
        return "1:7"


async def abort(txn: TxnId) -> Action | None:
    return Action.ABORT


async def test_the_brokers_loop_outlives_a_round_that_raises() -> None:
    """A round failing with an unexpected error (here from the partition's end; before, the
    broker's loop had no guard and its task ended for good) is logged, and the next runs."""
    part = FakePartition(RuntimeError("a ledger bug"), UnavailableError("reloading"))
    parts: Any = lambda: [part]  # noqa: E731  # a fake Partition
    task = asyncio.create_task(broker_checker(abort, parts, list, after_s=0, interval_s=0.001).run())
    try:
        await asyncio.wait_for(part.done.wait(), 5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert part.ended == [(A, Action.ABORT)]


async def test_one_question_per_transaction_per_round_and_only_the_end_a_holder_takes() -> None:
    asked: list[TxnId] = []
    applied: list[tuple[str, TxnId, Action]] = []

    async def lookup(txn: TxnId) -> Action | None:
        asked.append(txn)
        return {A: Action.COMMIT, B: Action.ABORT}[txn]

    def ender(where: str, txn: TxnId) -> Any:
        async def end(action: Action) -> str | None:
            applied.append((where, txn, action))
            return None
        return end

    def sweep() -> list[Stuck]:
        return [Stuck(A, "p0", ender("p0", A)), Stuck(A, "p1", ender("p1", A)),
                Stuck(A, "holds", ender("holds", A), only=Action.ABORT),  # a commit is not its to apply
                Stuck(B, "holds", ender("holds", B), only=Action.ABORT)]

    checker = StuckTxnChecker(lookup, sweep, interval_s=1)
    assert await checker.check() == 3
    assert asked == [A, B]
    assert applied == [("p0", A, Action.COMMIT), ("p1", A, Action.COMMIT), ("holds", B, Action.ABORT)]
    assert await checker.check() == 3
    assert asked == [A, B, A, B]  # a new round asks again

