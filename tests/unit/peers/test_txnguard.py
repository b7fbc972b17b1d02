"""The participants' door check of transactional writes (issue 21 item 2), against a fake coordinator."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from streamtx.auth import Principal
from streamtx.contracts import TxnId
from streamtx.errors import ConflictError, ForbiddenError, NotFoundError, UnavailableError
from streamtx.peers import TxnGuard

P0, P1 = "persistent://a/n/x-partition-0", "persistent://a/n/x-partition-1"
SUB = ("persistent://a/n/x", "s")
OWNER = Principal("app-a", frozenset({"client"}), frozenset({"a"}))
OTHER = Principal("app-a2", frozenset({"client"}), frozenset({"a"}))  # same tenant, another subject
SERVICE = Principal("svc", frozenset({"service"}), None)
TXN = TxnId(0, 7)


class FakeCoordinator:
    """``GET /v1/transactions/{txn}`` as the coordinator answers it; counts the requests."""

    def __init__(self) -> None:
        self.txns: dict[str, dict[str, Any]] = {}
        self.requests = 0
        self.delay_s = 0.0
        self.late_s = 0.0  # the answer is made, then takes this long to arrive
        self.down = False
        self.moving = 0  # answers of an id between two replicas still to give

    def open(self, txn: TxnId, owner: str = "app-a", partitions: tuple[str, ...] = (P0,),
             subscriptions: tuple[tuple[str, str], ...] = (SUB,)) -> dict[str, Any]:
        self.txns[str(txn)] = body = {
            "txn_id": str(txn), "state": "OPEN", "owner": owner, "partitions": list(partitions),
            "subscriptions": [{"topic": t, "subscription": s} for t, s in subscriptions]}
        return body

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.down:
            return httpx.Response(503, json={"error": "unavailable", "message": "down"})
        if self.moving:
            self.moving -= 1
            return httpx.Response(503, json={"error": "not_owner", "message": "moving", "owner": None})
        txn = TxnId.parse(request.url.path.rsplit("/", 1)[1])
        if txn.coordinator_id != 0:
            return httpx.Response(404, json={"error": "not_served", "message": "not served here"})
        body = self.txns.get(str(txn))
        if body is None:
            return httpx.Response(404, json={"error": "not_found", "message": "unknown"})
        answer = httpx.Response(200, json=body)
        if self.late_s:
            await asyncio.sleep(self.late_s)
        return answer


@pytest.fixture
def tc() -> FakeCoordinator:
    return FakeCoordinator()


@pytest.fixture
async def guard(tc: FakeCoordinator) -> Any:
    http = httpx.AsyncClient(transport=httpx.MockTransport(tc.handle))
    g = TxnGuard("http://tc", token=None, http=http)
    yield g
    await g.aclose()
    await http.aclose()


async def test_the_owner_writes_to_what_it_registered_at_one_question_per_transaction(
        tc: FakeCoordinator, guard: TxnGuard) -> None:
    tc.open(TXN)
    for _ in range(5):
        await guard.check(TXN, OWNER, partitions=[P0])
        await guard.check(TXN, OWNER, subscriptions=[SUB])
        await guard.check(TXN, SERVICE, partitions=[P0], subscriptions=[SUB])  # a forwarding replica
        await guard.check(TXN, None, partitions=[P0])  # auth off
    assert tc.requests == 1  # the positive answer is cached


async def test_concurrent_first_sights_share_one_question(tc: FakeCoordinator, guard: TxnGuard) -> None:
    tc.open(TXN)
    tc.delay_s = 0.05
    await asyncio.gather(*(guard.check(TXN, OWNER, partitions=[P0]) for _ in range(20)))
    assert tc.requests == 1


async def test_never_opened_and_unserved_transactions_are_404(tc: FakeCoordinator, guard: TxnGuard) -> None:
    with pytest.raises(NotFoundError, match="unknown"):
        await guard.check(TxnId(0, 424242), OWNER, partitions=[P0])
    with pytest.raises(NotFoundError, match="no coordinator serves"):
        await guard.check(TxnId.parse("281474976710656:5"), OWNER, partitions=[P0])
    assert tc.requests == 2
    with pytest.raises(NotFoundError):  # a refusal is not cached: asked again
        await guard.check(TxnId(0, 424242), OWNER, partitions=[P0])
    assert tc.requests == 3


async def test_an_ended_transaction_is_409_and_forget_drops_the_cached_answer(
        tc: FakeCoordinator, guard: TxnGuard) -> None:
    body = tc.open(TXN)
    await guard.check(TXN, OWNER, partitions=[P0])
    body["state"] = "COMMITTED"
    await guard.check(TXN, OWNER, partitions=[P0])  # cached: the end has not reached us yet
    guard.forget(TXN)  # ... now it has
    with pytest.raises(ConflictError, match="COMMITTED, not OPEN"):
        await guard.check(TXN, OWNER, partitions=[P0])
    with pytest.raises(ConflictError):
        await guard.check(TXN, OWNER, partitions=[P0])
    assert tc.requests == 3  # a closed transaction is never cached as writable


async def test_another_subject_of_the_same_tenant_is_403(tc: FakeCoordinator, guard: TxnGuard) -> None:
    tc.open(TXN)
    await guard.check(TXN, OWNER, partitions=[P0])
    with pytest.raises(ForbiddenError, match="another client"):
        await guard.check(TXN, OTHER, partitions=[P0])
    with pytest.raises(ForbiddenError):
        await guard.check(TXN, OTHER, subscriptions=[SUB])
    with pytest.raises(ForbiddenError):  # who owns it is checked before anything else is told
        await guard.check(TXN, OTHER, partitions=[P1])
    tc.open(TxnId(0, 8), owner="")  # opened with auth off: no client token owns it
    with pytest.raises(ForbiddenError):
        await guard.check(TxnId(0, 8), OWNER, partitions=[P0])


async def test_an_unregistered_participant_is_asked_again_then_409(
        tc: FakeCoordinator, guard: TxnGuard) -> None:
    tc.open(TXN)
    await guard.check(TXN, OWNER, partitions=[P0])
    with pytest.raises(ConflictError, match=f"partition {P1} is not registered"):
        await guard.check(TXN, OWNER, partitions=[P1])
    assert tc.requests == 2  # asked again: it may have been registered since
    with pytest.raises(ConflictError, match="subscription t of"):
        await guard.check(TXN, OWNER, subscriptions=[("persistent://a/n/x", "t")])
    tc.open(TXN, partitions=(P0, P1))  # the client registers it
    await guard.check(TXN, OWNER, partitions=[P1])
    await guard.check(TXN, OWNER, partitions=[P0, P1])
    assert tc.requests == 4


async def test_a_coordinator_that_does_not_answer_is_503(tc: FakeCoordinator, guard: TxnGuard) -> None:
    tc.down = True
    with pytest.raises(UnavailableError):
        await guard.check(TXN, OWNER, partitions=[P0])


async def test_a_caller_going_away_does_not_cancel_the_others_answer(
        tc: FakeCoordinator, guard: TxnGuard) -> None:
    tc.open(TXN)
    tc.delay_s = 0.05
    gone = asyncio.create_task(guard.check(TXN, OWNER, partitions=[P0]))
    staying = asyncio.create_task(guard.check(TXN, OWNER, partitions=[P0]))
    await asyncio.sleep(0.01)
    gone.cancel()
    await staying
    assert tc.requests == 1


async def test_a_cached_answer_is_asked_again_after_its_ttl(tc: FakeCoordinator) -> None:
    tc.open(TXN)
    async with httpx.AsyncClient(transport=httpx.MockTransport(tc.handle)) as http:
        guard = TxnGuard("http://tc", token=None, http=http, ttl_s=0.05)
        await guard.check(TXN, OWNER, partitions=[P0])
        await guard.check(TXN, OWNER, partitions=[P0])
        assert tc.requests == 1
        tc.txns[str(TXN)]["state"] = "ABORTED"  # an end that never reached this process
        await asyncio.sleep(0.06)
        with pytest.raises(ConflictError, match="ABORTED"):
            await guard.check(TXN, OWNER, partitions=[P0])
        await guard.aclose()


async def test_a_coordinator_id_moving_between_replicas_is_waited_out_not_refused(
        tc: FakeCoordinator, guard: TxnGuard) -> None:
    # A scale-up hands ids over; meanwhile the coordinator answers 503 not_owner (moving).
    # The scale-up e2e test saw transactions aborted because the guard refused at once.
    tc.open(TXN)
    tc.moving = 2
    await guard.check(TXN, OWNER, partitions=[P0])
    assert tc.requests == 3


async def test_an_open_answer_on_its_way_when_the_end_arrived_is_not_believed(
        tc: FakeCoordinator, guard: TxnGuard) -> None:
    """Issue 32 suspicion: the coordinator answered OPEN, the end reached us (``forget``) while the
    answer travelled, and the answer arrived after it. Before, it was cached for ``ttl_s`` (30 s):
    a late produce of the finished transaction passed the door on a partition that had already
    written its marker (or forgot it across a restart) and opened it there again. The answer
    predates the end: asked again, and the caller and every later one get 409."""
    body = tc.open(TXN)
    tc.late_s = 0.05
    waiting = asyncio.create_task(guard.check(TXN, OWNER, partitions=[P0]))
    await asyncio.sleep(0.01)  # answered OPEN; on its way
    body["state"] = "COMMITTING"
    guard.forget(TXN)  # the end's marker request reached this participant
    joining = asyncio.create_task(guard.check(TXN, OWNER, partitions=[P0]))  # a first sight after it
    for task in (waiting, joining):
        with pytest.raises(ConflictError, match="COMMITTING, not OPEN"):
            await task
    tc.late_s = 0.0
    for _ in range(3):
        with pytest.raises(ConflictError, match="not OPEN"):
            await guard.check(TXN, OWNER, partitions=[P0])
