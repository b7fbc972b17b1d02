"""The coordinator's timeout loop on the memory ledger, with a clock the test moves (issue 21 item 17).

Mutations of the loop were caught only by integration and e2e tests; these fail in seconds: an
expired OPEN transaction is aborted as TIMEOUT on its participants, nothing else is touched,
and a transaction opened with a deadline before the loop's next wake-up wakes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from streamtx.batching import BatchingSettings
from streamtx.contracts import Action, TxnId
from streamtx.coordinator.coordinator import CoordinatorConfig, TransactionCoordinator
from streamtx.coordinator.log import TransactionLog
from streamtx.coordinator.metrics import CoordinatorMetrics
from streamtx.errors import ConflictError
from streamtx.ledger import open_ledger_factory
from streamtx.records.txnstate import TxnState

P0 = "persistent://t/n/x-partition-0"


class Participants:
    """The participants' side of the coordinator's calls: every end is recorded and answered."""

    def __init__(self) -> None:
        self.ends: list[tuple[TxnId, Action, list[str]]] = []

    def check_partitions(self) -> None:
        pass

    def check_subscriptions(self) -> None:
        pass

    async def prepare(self, txn: TxnId, subscriptions: Iterable[Any]) -> None:
        pass

    async def end(self, txn: TxnId, action: Action, partitions: Iterable[str],
                  subscriptions: Iterable[Any]) -> list[Any]:
        self.ends.append((txn, action, list(partitions)))
        return []


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000_000

    def __call__(self) -> int:
        return self.ms


Setup = tuple[TransactionCoordinator, Participants, Clock]


@pytest.fixture
async def setup(request: pytest.FixtureRequest) -> AsyncIterator[Setup]:
    interval_ms = getattr(request, "param", 10)
    ledgers = open_ledger_factory("memory://")
    txn_log = await TransactionLog.open(ledgers, cluster="c", coordinator_id=0, batching=BatchingSettings())
    participants, clock = Participants(), Clock()
    tc = TransactionCoordinator(0, txn_log, participants,  # type: ignore[arg-type]
                                CoordinatorMetrics("c", 0, registry=CollectorRegistry()),
                                CoordinatorConfig(timeout_check_interval_ms=interval_ms,
                                                  housekeeping_interval_ms=3_600_000), clock=clock)
    await tc.recover()
    yield tc, participants, clock
    await tc.close()
    await ledgers.close()


async def state_of(tc: TransactionCoordinator, txn: TxnId, wanted: TxnState, within_s: float = 2.0
                   ) -> TxnState:
    """The transaction's state once it is ``wanted``, or after ``within_s``."""
    loop = asyncio.get_running_loop()
    until = loop.time() + within_s
    for _ in range(int(within_s / 0.005)):
        if tc.get(txn).state is wanted or loop.time() >= until:
            break
        await asyncio.sleep(0.005)
    return tc.get(txn).state


async def test_an_expired_open_transaction_is_aborted_as_timeout_and_nothing_else_is(
        setup: Setup) -> None:
    tc, participants, clock = setup
    short = await tc.create(100)
    await tc.add_partitions(short.txn, [P0])
    long = await tc.create(60_000)
    committed = await tc.create(100)
    assert await tc.end(committed.txn, Action.COMMIT) is TxnState.COMMITTED

    await asyncio.sleep(0.05)  # several rounds of the loop: nothing is due yet
    assert tc.get(short.txn).state is TxnState.OPEN
    clock.ms += 101
    assert await state_of(tc, short.txn, TxnState.TIMEOUT) is TxnState.TIMEOUT
    assert (short.txn, Action.ABORT, [P0]) in participants.ends
    await asyncio.sleep(0.05)
    assert tc.get(long.txn).state is TxnState.OPEN
    assert tc.get(committed.txn).state is TxnState.COMMITTED
    assert [t for t, a, _ in participants.ends if a is Action.ABORT] == [short.txn]  # aborted once
    assert tc.metrics.timed_out._value.get() == 1


@pytest.mark.parametrize("setup", [60_000], indirect=True)  # the loop's own round: a minute
async def test_a_deadline_before_the_next_round_wakes_the_loop(
        setup: Setup) -> None:
    tc, _, clock = setup
    await tc.create(60_000)
    await asyncio.sleep(0.02)  # the loop sleeps until the next round (a minute away)
    short = await tc.create(20)  # due long before: it wakes the loop, which sleeps 20 ms instead
    clock.ms += 21
    assert await state_of(tc, short.txn, TxnState.TIMEOUT, within_s=1.0) is TxnState.TIMEOUT


async def test_a_transaction_past_its_timeout_never_commits(
        setup: Setup) -> None:
    """The commit of one the loop has not reached yet is refused and aborted all the same."""
    tc, participants, clock = setup
    meta = await tc.create(100)
    clock.ms += 100
    with pytest.raises(ConflictError, match="timed out"):
        await tc.end(meta.txn, Action.COMMIT)
    assert tc.get(meta.txn).state is TxnState.TIMEOUT
    assert [(t, a) for t, a, _ in participants.ends] == [(meta.txn, Action.ABORT)]
