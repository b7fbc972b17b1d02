"""Late acks of ended transactions: remembered ends, and the stuck-transaction checker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from streamtx.contracts import Action, TxnId
from streamtx.errors import ConflictError
from streamtx.ledger import LedgerFactory, open_ledger_factory
from streamtx.peers import CoordinatorLookup
from streamtx.peers.coordinator import outcome_of
from streamtx.pendingack.txnchecker import checker as checker_of
from streamtx.records.pendingack import RecordKind
from streamtx.records.pendingack_state import SubscriptionState, TxnPhase
from tests.unit.pendingack.test_store import A, B, RecordingBroker, ids, open_store_

C = TxnId(0, 3)


@pytest.fixture
async def ledgers() -> AsyncIterator[LedgerFactory]:
    created = open_ledger_factory("memory://")
    yield created
    await created.close()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# --- the state ----------------------------------------------------------------


def test_end_of_an_unknown_txn_refuses_its_late_acks() -> None:
    state = SubscriptionState()
    assert state.finish_end(A, RecordKind.ABORTED) is None
    assert state.ended(A) is RecordKind.ABORTED
    with pytest.raises(ConflictError, match="ABORTED"):
        state.check_ack(A, ids("1:1"), False)
    state.check_ack(B, ids("1:1"), False)  # others are not affected


def test_remembered_unknown_ends_are_bounded() -> None:
    state = SubscriptionState(max_ended_txns=2)
    for least in range(1, 4):
        state.finish_end(TxnId(0, least), RecordKind.ABORTED)
    assert state.ended(TxnId(0, 1)) is None
    assert state.ended(TxnId(0, 3)) is RecordKind.ABORTED


def test_stuck_txns_are_the_old_ones() -> None:
    clock = Clock()
    state = SubscriptionState(clock=clock)
    state.add_ack(A, ids("1:1"), False)
    clock.now += 5
    state.add_ack(B, ids("1:2"), False)
    state.add_ack(A, ids("1:3"), False)  # a later ack does not make A younger
    assert state.stuck_txns(1.0) == [A]
    clock.now += 5
    assert state.stuck_txns(1.0) == [A, B]
    state.prepare(B)
    assert state.txns[B].phase is TxnPhase.PREPARED
    assert state.stuck_txns(1.0) == [A, B]
    state.begin_end(A)  # ending (maybe a failed end nobody repeats): still listed
    assert state.stuck_txns(1.0) == [A, B]
    state.finish_end(A, RecordKind.ABORTED)
    assert state.stuck_txns(1.0) == [B]
    assert state.stuck_txns(20.0) == []


# --- the store ----------------------------------------------------------------


async def test_store_remembers_the_end_of_a_txn_it_never_saw(ledgers: LedgerFactory) -> None:
    broker = RecordingBroker()
    store = await open_store_(ledgers, broker)
    await store.end(A, commit=False)  # the coordinator's abort before any ack: 200, no broker call
    assert broker.calls == []
    with pytest.raises(ConflictError):
        await store.ack(A, ids("1:1"), False)
    assert store.held() == []
    await store.end(A, commit=False)  # repeats are still fine
    with pytest.raises(ConflictError):
        await store.end(A, commit=True)
    await store.close()


# --- the checker ----------------------------------------------------------------


def test_verdicts() -> None:
    assert outcome_of({"state": "COMMITTED"}) is Action.COMMIT
    assert outcome_of({"state": "ABORTED"}) is Action.ABORT
    assert outcome_of({"state": "TIMEOUT"}) is Action.ABORT
    for state in ("OPEN", "COMMITTING", "ABORTING", None, "???", 2):
        assert outcome_of({"state": state}) is None
    assert outcome_of(None) is None and outcome_of([]) is None


async def test_checker_ends_stuck_txns_as_the_coordinator_did(ledgers: LedgerFactory) -> None:
    broker = RecordingBroker()
    store = await open_store_(ledgers, broker)
    clock = Clock()
    store.state._clock = clock
    await store.ack(A, ids("1:1"), False)
    await store.ack(B, ids("1:2"), False)
    await store.ack(C, ids("1:3"), False)
    answers: dict[TxnId, Action | None] = {A: Action.ABORT, B: Action.COMMIT, C: None}
    asked: list[TxnId] = []

    async def lookup(txn: TxnId) -> Action | None:
        asked.append(txn)
        return answers[txn]

    checker = checker_of(lookup, lambda: [store], after_s=10, interval_s=1)
    assert await checker.check() == 0  # nothing old enough: the coordinator is not asked
    assert asked == []
    clock.now += 11
    assert await checker.check() == 2
    assert sorted(asked) == [A, B, C]
    assert {(c["txn_id"], c["action"]) for c in broker.calls} == {("0:1", "abort"), ("0:2", "commit")}
    assert list(store.state.txns) == [C]  # still open at the coordinator: left alone
    assert store.held() == ["1:3"]
    with pytest.raises(ConflictError):
        await store.ack(A, ids("1:4"), False)
    await store.close()


async def test_checker_survives_a_failing_end(ledgers: LedgerFactory) -> None:
    broker = RecordingBroker()
    store = await open_store_(ledgers, broker)
    await store.ack(A, ids("1:1"), False)

    async def abort(txn: TxnId) -> Action | None:
        return Action.ABORT

    checker = checker_of(abort, lambda: [store], after_s=0, interval_s=1)
    broker.fail = 1
    assert await checker.check() == 0  # broker down: the next round retries
    assert store.held() == ["1:1"]
    assert await checker.check() == 1
    assert store.held() == []
    await store.close()


def _lookup_with(handler: httpx.MockTransport) -> CoordinatorLookup:
    return CoordinatorLookup("http://tc", token=None, http=httpx.AsyncClient(transport=handler))


@pytest.mark.parametrize(("status", "body", "expected"), [
    (200, {"txn_id": "0:1", "state": "COMMITTED"}, Action.COMMIT),
    (200, {"txn_id": "0:1", "state": "ABORTED"}, Action.ABORT),
    (200, {"txn_id": "0:1", "state": "TIMEOUT"}, Action.ABORT),
    (200, {"txn_id": "0:1", "state": "OPEN"}, None),
    (200, {"txn_id": "0:1", "state": "ABORTING"}, None),
    (404, {"error": "not_found", "message": "transaction 0:1 not found"}, Action.ABORT),
    # Told apart by the code, not the text: another process owns coordinator 0.
    (404, {"error": "not_served", "message": "transaction 0:1 belongs to coordinator 0"}, None),
    (503, {"error": "unavailable", "message": "replaying"}, None),
    (401, {"error": "unauthorized", "message": "missing bearer token"}, None),
])
async def test_coordinator_lookup(status: int, body: dict[str, str], expected: Action | None) -> None:
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return httpx.Response(status, json=body)

    lookup = _lookup_with(httpx.MockTransport(handle))
    try:
        assert await lookup(A) is expected
    finally:
        await lookup.aclose()
    assert seen == ["/v1/transactions/0:1"]


async def test_checker_skips_a_txn_whose_end_is_running(ledgers: LedgerFactory) -> None:
    broker = RecordingBroker()
    store = await open_store_(ledgers, broker)
    await store.ack(A, ids("1:1"), False)
    release = asyncio.Event()
    original = broker.end

    async def slow_end(*args: Any, **kw: Any) -> None:
        await release.wait()
        await original(*args, **kw)

    broker.end = slow_end  # type: ignore[method-assign]
    ending = asyncio.create_task(store.end(A, commit=False))  # the coordinator's end, waiting for the broker
    await asyncio.sleep(0)
    assert store.ending_now(A)
    asked: list[TxnId] = []

    async def lookup(txn: TxnId) -> Action | None:
        asked.append(txn)
        return False

    assert await checker_of(lookup, lambda: [store], after_s=0, interval_s=1).check() == 0
    assert asked == []
    release.set()
    await ending
    assert not store.ending_now(A) and store.held() == []
    await store.close()
