"""A partition reloading after a failed append answers nothing from a half-rebuilt state (issue 9, item 2)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from streamtx.broker.partition import Partition, partition_ledger_name
from streamtx.broker.txnbuffer import snapshot as tbsnapshot
from streamtx.contracts.states import Action
from streamtx.errors import ConflictError, StreamtxError, UnavailableError
from streamtx.ledger import open_ledger_factory
from streamtx.ledger.memory import MemoryLedgerFactory
from streamtx.records.partition import Message
from tests.unit.broker.test_partition import NAME, open_part

TXN = (4, 1)


async def break_partition(part: Partition, ledgers: MemoryLedgerFactory) -> None:
    """Fail every try of one append, so the partition starts reloading from its ledger."""
    ledgers.inject_append_failures(partition_ledger_name(NAME), 3)
    with pytest.raises(StreamtxError):
        await part.produce([Message(b"lost?")], (4, 2), None, None)
    assert reloading(part)


def reloading(part: Partition) -> bool:
    return part.stats()["state"] == "Recovering"


def hold_reloads(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Make a reload stop just after it started rebuilding, until the returned event is set."""
    gate = asyncio.Event()
    load: Callable[..., Awaitable[object]] = tbsnapshot.load

    async def held(*args: object) -> object:
        await gate.wait()
        return await load(*args)

    monkeypatch.setattr(tbsnapshot, "load", held)
    return gate


async def reloading_with_open_txn(
    monkeypatch: pytest.MonkeyPatch, *, reload_wait_ms: int
) -> tuple[MemoryLedgerFactory, Partition, asyncio.Event]:
    """A partition where TXN produced, now reloading (held until the event is set)."""
    ledgers = open_ledger_factory("memory://")
    assert isinstance(ledgers, MemoryLedgerFactory)
    part = await open_part(ledgers, reload_wait_ms=reload_wait_ms)
    await part.produce([Message(b"m")], TXN, None, None)
    gate = hold_reloads(monkeypatch)
    await break_partition(part, ledgers)
    return ledgers, part, gate


async def test_an_end_during_a_reload_waits_and_writes_its_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    ledgers, part, gate = await reloading_with_open_txn(monkeypatch, reload_wait_ms=60_000)

    end = asyncio.create_task(part.end_txn(TXN, Action.COMMIT))
    fetch = asyncio.create_task(part.read_visible(None, 10))
    await asyncio.sleep(0.1)
    assert not end.done()  # waits for the reload: the txn is unknown to the state being rebuilt
    assert await fetch == []  # nothing is read from a partition while it reloads
    gate.set()
    marker = await end
    assert marker is not None  # a marker was written, not "never produced here"
    assert not reloading(part) and TXN not in part.tb.ongoing
    assert [e.position for e in await part.read_visible(None, 10)][-1] == part.ledger.last_position()

    again = await open_part(ledgers)  # the commit is durable: nothing is ongoing after a restart
    assert TXN not in again.tb.ongoing and again.tb.ended_as(TXN) is not None
    with pytest.raises(ConflictError):
        await again.produce([Message(b"late")], TXN, None, None)
    await part.close()


async def test_requests_during_a_long_reload_answer_503(monkeypatch: pytest.MonkeyPatch) -> None:
    _, part, gate = await reloading_with_open_txn(monkeypatch, reload_wait_ms=50)

    with pytest.raises(UnavailableError):
        await part.end_txn(TXN, Action.COMMIT)
    with pytest.raises(UnavailableError):
        await part.produce([Message(b"x")], (4, 3), None, None)
    assert TXN in part.tb.ongoing  # the state in use is the one from before, whole
    gate.set()
    while reloading(part):  # noqa: ASYNC110 - the reload runs in the partition's own task
        await asyncio.sleep(0.01)
    assert await part.end_txn(TXN, Action.COMMIT) is not None
    await part.close()


async def test_an_end_whose_wait_saw_an_append_fail_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """The end waits for appends in flight; if one of them fails, it must not decide from stale state."""
    ledgers = open_ledger_factory("memory://")
    assert isinstance(ledgers, MemoryLedgerFactory)
    part = await open_part(ledgers, reload_wait_ms=50)
    hold_reloads(monkeypatch)
    ledgers.inject_append_failures(partition_ledger_name(NAME), 3, landed=False)
    produce = asyncio.create_task(part.produce([Message(b"m")], TXN, None, None))
    await asyncio.sleep(0)  # the produce's append is in flight
    with pytest.raises(UnavailableError):
        await part.end_txn(TXN, Action.COMMIT)
    with pytest.raises(StreamtxError):
        await produce
    assert part.tb.ended_as(TXN) is None
    await part.close()
