"""Dispatch and acks on the broker's domain objects over the memory ledger (no HTTP)."""

from __future__ import annotations

import asyncio

import pytest

from streamtx.broker import subscription
from streamtx.broker.dispatch import handed_count, render_json, unit_id
from streamtx.broker.pendingack_client import PendingAckClient, held_pairs
from streamtx.broker.registry import Broker
from streamtx.broker.settings import BrokerSettings
from streamtx.broker.subscription import SubscriptionType
from streamtx.broker.txnchecker import checker as checker_of
from streamtx.contracts.models import Held
from streamtx.contracts.states import Action
from streamtx.contracts.txnid import TxnId
from streamtx.cursor.cursor import Cursor, cursor_ledger_name
from streamtx.errors import ConflictError, MalformedError, StreamtxError
from streamtx.ledger import Position, open_ledger_factory
from streamtx.ledger.memory import MemoryLedgerFactory
from streamtx.records.pendingack import MessageId
from streamtx.records.pendingack_state import SubscriptionState
from tests.unit.broker.memtopic import T, mids, send


async def test_batch_index_acks_and_redelivery_of_the_rest(broker: Broker) -> None:
    sub = await broker.create_subscription(T, "s", SubscriptionType.SHARED, "earliest")
    ids = await send(broker.topic(T), "a", "b", "c")
    got = await sub.fetch("c1", 10, 0)
    assert [m["message_id"] for m in got] == ids
    await sub.ack(mids(ids[1]), cumulative=False)
    part = sub.parts[0]
    assert part.cursor.deleted_batch_indexes(part.partition.ledger.last_position()) == 0b010  # type: ignore[arg-type]
    again = await sub.fetch("c2", 10, 200)  # after the 50 ms ack timeout
    assert sorted(m["message_id"] for m in again) == [ids[0], ids[2]]
    await sub.ack(mids(ids[0], ids[2]), cumulative=False)
    assert part.cursor.is_deleted(part.partition.ledger.last_position())  # type: ignore[arg-type]
    assert await sub.fetch("c1", 10, 100) == []
    with pytest.raises(MalformedError):
        await sub.ack(mids("1:2:3:4"), cumulative=False)


async def test_cumulative_ack_inside_a_batch(broker: Broker) -> None:
    sub = await broker.create_subscription(T, "x", SubscriptionType.EXCLUSIVE, "earliest")
    first = await send(broker.topic(T), "a")
    batch = await send(broker.topic(T), "b", "c", "d")
    await sub.fetch("c1", 10, 0)
    await sub.ack(mids(batch[1]), cumulative=True)  # a, b, c
    sub.parts[0].release(list(sub.parts[0].pending))
    assert [m["message_id"] for m in await sub.fetch("c1", 10, 0)] == [batch[2]]
    assert sub.parts[0].cursor.is_deleted(Position.parse(first[0]))


async def test_held_units_block_plain_acks_and_dispatch(broker: Broker) -> None:
    sub = await broker.create_subscription(T, "h", SubscriptionType.SHARED, "earliest")
    ids = await send(broker.topic(T), "a", "b")
    await sub.fetch("c1", 10, 0)
    newly = sub.hold(await sub.check_txn_ack(mids(ids[0]), (1, 1)), (1, 1))
    with pytest.raises(ConflictError):
        await sub.ack(mids(ids[0]), cumulative=False)
    with pytest.raises(ConflictError):
        await sub.check_txn_ack(mids(ids[0]), (1, 2))
    with pytest.raises(ConflictError):
        await sub.ack(mids(ids[1]), cumulative=True)  # would cover the held one
    await sub.nack(mids(*ids))
    assert [m["message_id"] for m in await sub.fetch("c2", 10, 0)] == [ids[1]]
    sub.unhold(newly, (1, 1))  # the pending-ack store refused: deliverable again
    assert [m["message_id"] for m in await sub.fetch("c3", 10, 0)] == [ids[0]]


async def test_exclusive_and_latest(broker: Broker) -> None:
    await send(broker.topic(T), "old")
    sub = await broker.create_subscription(T, "e", SubscriptionType.EXCLUSIVE, "latest")
    new = await send(broker.topic(T), "new")
    assert [m["message_id"] for m in await sub.fetch("one", 10, 0)] == new
    with pytest.raises(ConflictError):
        await sub.fetch("two", 10, 0)


async def test_txn_cumulative_ack_commit_and_abort(broker: Broker) -> None:
    sub = await broker.create_subscription(T, "tc", SubscriptionType.EXCLUSIVE, "earliest")
    ids = [(await send(broker.topic(T), f"m{i}"))[0] for i in range(4)]
    await sub.fetch("c1", 10, 0)
    # Abort: everything the cumulative ack held comes back.
    sub.hold(await sub.check_txn_ack(mids(ids[2]), (2, 1)), (2, 1), cumulative=True)
    assert sum(len(p.held) for p in sub.parts) == 3
    await sub.end_txn([ids[2]], (2, 1), commit=False)
    assert sum(len(p.held) for p in sub.parts) == 0
    assert [m["message_id"] for m in await sub.fetch("c1", 10, 0)] == ids[:3]
    # Commit: a mark-delete through the cumulative id.
    sub.hold(await sub.check_txn_ack(mids(ids[2]), (2, 2)), (2, 2), cumulative=True)
    await sub.end_txn([ids[2]], (2, 2), commit=True, cumulative_ids=[ids[2]])
    await sub.end_txn([ids[2]], (2, 2), commit=True, cumulative_ids=[ids[2]])  # idempotent
    part = sub.parts[0]
    assert part.cursor.mark_delete_position == Position.parse(ids[2])
    part.release(list(part.pending))
    assert [m["message_id"] for m in await sub.fetch("c1", 10, 0)] == [ids[3]]


async def test_one_transactions_successive_cumulative_acks_hold_each_unit_once(broker: Broker) -> None:
    """A worker's transaction acks each fetch cumulatively: the second ack takes back only what
    the second fetch handed out (whole entries kept as one record each); an abort gives every
    held unit back once, and a commit of a new transaction deletes them all."""
    sub = await broker.create_subscription(T, "tw", SubscriptionType.EXCLUSIVE, "earliest")
    first = await send(broker.topic(T), "a", "b", "c")
    second = await send(broker.topic(T), "d", "e")
    part = sub.parts[0]

    def unit(message_id: str) -> tuple[Position, int | None]:
        return sub.resolve(MessageId.parse(message_id))[1]

    assert [m["message_id"] for m in await sub.fetch("w", 3, 0)] == first
    takes = []
    take_through = part.take_through
    part.take_through = lambda *at: takes.append(at) or take_through(*at)  # type: ignore[method-assign]
    newly = sub.hold(await sub.check_txn_ack(mids(first[-1]), (5, 1)), (5, 1), cumulative=True)
    assert takes == [unit(first[-1])]  # once per id acked, not once per unit it covers
    del part.take_through
    assert sorted(u for change in newly for u in change.units) == [unit(i) for i in first]
    assert [m["message_id"] for m in await sub.fetch("w", 10, 0)] == second
    newly = sub.hold(await sub.check_txn_ack(mids(second[0]), (5, 1)), (5, 1), cumulative=True)
    assert [u for change in newly for u in change.units] == [unit(second[0])]
    assert len(part.held) == 4 and list(part.pending) == [unit(second[1])]
    await sub.end_txn([], (5, 1), commit=False)
    assert not part.held and list(part.pending) == [unit(second[1])]  # the rest: read again
    again = [m["message_id"] for m in await sub.fetch("w", 10, 0)]
    assert sorted(again) == sorted([*first, second[0]])
    sub.hold(await sub.check_txn_ack(mids(second[1]), (5, 2)), (5, 2), cumulative=True)
    assert len(part.held) == 5 and not part.pending and not part.redeliver
    await sub.end_txn([], (5, 2), commit=True, cumulative_ids=[second[1]])
    assert not part.held and part.cursor.mark_delete_position == Position.parse(second[1])


async def test_a_refused_hold_inside_an_entry_a_fetch_cut_is_handed_out_again(broker: Broker) -> None:
    """The fetch stopped inside an entry; a transactional cumulative ack took back what it had,
    and the pending-ack store refused it: the next fetch resumes that entry and hands out
    those messages again with the rest, not only the rest."""
    sub = await broker.create_subscription(T, "cut", SubscriptionType.EXCLUSIVE, "earliest")
    before = await send(broker.topic(T), "z")  # passed whole: the read pass stands at the next
    ids = await send(broker.topic(T), "a", "b", "c", "d")
    assert [m["message_id"] for m in await sub.fetch("w", 3, 0)] == before + ids[:2]
    await sub.ack(mids(*before), cumulative=False)
    newly = sub.hold(await sub.check_txn_ack(mids(ids[1]), (6, 1)), (6, 1), cumulative=True)
    sub.unhold(newly, (6, 1))
    assert sorted(m["message_id"] for m in await sub.fetch("w", 10, 0)) == sorted(ids)


async def test_a_retried_commit_end_answers_only_once_its_deletes_are_durable() -> None:
    """The first end's cursor persist fails after the deletes were applied in memory; the
    retry finds nothing left to delete and must still persist them (issue 9, item 3)."""
    ledgers = open_ledger_factory("memory://")
    assert isinstance(ledgers, MemoryLedgerFactory)
    settings = BrokerSettings(ledger_url="memory://")  # type: ignore[call-arg]
    b = Broker(ledgers, settings, PendingAckClient(None, 1.0))
    await b.start()
    try:
        await b.create_topic(T, 1)
        sub = await b.create_subscription(T, "d", SubscriptionType.SHARED, "earliest")
        ids = await send(b.topic(T), "a", "b")
        await sub.fetch("c1", 10, 0)
        sub.hold(await sub.check_txn_ack(mids(*ids), (3, 1)), (3, 1))
        cursor = sub.parts[0].cursor
        own = cursor_ledger_name(cursor.ledger.name, cursor.name)
        ledgers.inject_append_failures(own, 3)  # every try of the framed ledger fails once
        with pytest.raises(StreamtxError):
            await sub.end_txn(ids, (3, 1), commit=True)
        await sub.end_txn(ids, (3, 1), commit=True)  # the coordinator's retry
        again = await Cursor.open(ledgers, cursor.ledger, cursor.name)  # what a restart reads
        assert again.is_deleted(Position.parse(ids[0]))  # both records of the batch
        await again.close()
    finally:
        await b.close()


async def test_a_held_answer_that_overtakes_an_abort_holds_nothing(broker: Broker) -> None:
    """The pending-ack store lists an ending transaction's ids until it has written its end, which
    it does after the broker applied it: a broker taking a partition over (asking ``held``) got
    that answer after the abort, held the first record of the aborted range for the unknown
    holder, and never dispatched it again (the deployment test's lost writes, a stalled worker)."""
    sub = await broker.create_subscription(T, "race", SubscriptionType.FAILOVER, "earliest")
    ids = [(await send(broker.topic(T), f"m{i}"))[0] for i in range(4)]
    txn, other = TxnId(5, 1), TxnId(5, 2)
    store = SubscriptionState()  # the pending-ack store's side, as the demo worker acks
    store.add_ack(txn, [MessageId.parse(ids[0])], cumulative=False)
    store.add_ack(txn, [MessageId.parse(ids[2])], cumulative=True)
    store.add_ack(other, [MessageId.parse(ids[3])], cumulative=False)
    acks = store.begin_end(txn)  # ENDING: still listed while the end goes to the broker
    assert acks is not None
    answer = Held(message_ids=[str(m) for m in store.held_ids()],
                  holders={str(t): [str(m) for m in ms] for t, ms in store.held_by_txn().items()})
    await sub.end_txn([str(m) for m in acks.message_ids()], txn, commit=False,
                      cumulative_ids=[str(c) for c in acks.cumulative.values()])
    await sub.restore_held(held_pairs(answer))  # the answer arrives after the end
    # The aborted range is dispatched again; only the open transaction's id stays held.
    assert [m["message_id"] for m in await sub.fetch("c1", 10, 0)] == ids[:3]
    assert {u for p in sub.parts for u in p.held} == {(Position.parse(ids[3]), None)}
    with pytest.raises(ConflictError):  # held by its real holder now, not "unknown"
        await sub.check_txn_ack(mids(ids[3]), txn)
    await sub.end_txn([ids[3]], other, commit=False)
    assert [m["message_id"] for m in await sub.fetch("c1", 10, 0)] == [ids[3]]


async def test_a_held_answer_without_holders_holds_for_an_unknown_txn(broker: Broker) -> None:
    sub = await broker.create_subscription(T, "old", SubscriptionType.SHARED, "earliest")
    ids = await send(broker.topic(T), "a", "b")
    await sub.restore_held(held_pairs(Held(message_ids=[ids[0]])))  # a store of before holders
    assert [m["message_id"] for m in await sub.fetch("c1", 10, 0)] == [ids[1]]
    await sub.end_txn([ids[0]], TxnId(6, 1), commit=False)  # whoever ends it frees it
    assert [m["message_id"] for m in await sub.fetch("c1", 10, 0)] == [ids[0]]


async def test_holds_of_a_transaction_aborted_on_the_previous_owner_are_released_by_the_checker(
        broker: Broker) -> None:
    """The abort was applied by the partition's previous owner; this broker learned the holds
    from a ``held`` answer given before the store wrote the end, and no end comes here: the
    stuck-transaction checker asks the coordinator and, aborted, releases them."""
    sub = await broker.create_subscription(T, "moved", SubscriptionType.FAILOVER, "earliest")
    ids = await send(broker.topic(T), "a", "b", "c")
    aborted, committed, still_open = TxnId(7, 1), TxnId(7, 2), TxnId(7, 3)
    await sub.restore_held([(ids[0], aborted), (ids[1], committed), (ids[2], still_open)])
    assert await sub.fetch("c1", 10, 0) == []
    assert sorted(sub.restored_holders(0.0)) == [aborted, committed, still_open]
    asked: list[TxnId] = []
    two_rounds = asyncio.Event()  # the first one's release is applied by then

    async def verdict(txn: TxnId) -> Action | None:
        asked.append(txn)
        if len(asked) >= 6:
            two_rounds.set()
        return {aborted: Action.ABORT, committed: Action.COMMIT}.get(txn)

    checker = checker_of(verdict, list, lambda: [sub], after_s=0.0, interval_s=0.01)
    task = asyncio.create_task(checker.run())
    try:
        await asyncio.wait_for(two_rounds.wait(), 10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    # Only the aborted one's message is deliverable again; a commit is the store's end's to
    # apply, an open transaction keeps its hold.
    assert [m["message_id"] for m in await sub.fetch("c1", 10, 0)] == [ids[0]]
    assert sorted(sub.restored_holders(0.0)) == [committed, still_open]


async def test_a_repeated_abort_does_not_hand_out_again_what_is_out_with_a_consumer(broker: Broker) -> None:
    """The pending-ack store retries an end whose answer it lost: the first one let the held
    message go, a consumer has it again, and the repeat must leave it there (the REST model test
    saw it delivered to the same consumer twice, never let go)."""
    sub = await broker.create_subscription(T, "again", SubscriptionType.SHARED, "earliest")
    ids = await send(broker.topic(T), "a", "b")
    await sub.fetch("c1", 10, 0)
    txn = TxnId(7, 1)
    sub.hold(await sub.check_txn_ack(mids(ids[0]), txn), txn)
    await sub.end_txn([ids[0]], txn, commit=False)
    assert [m["message_id"] for m in await sub.fetch("c2", 10, 0)] == [ids[0]]
    await sub.end_txn([ids[0]], txn, commit=False)  # the retry
    assert await sub.fetch("c3", 10, 0) == []
    assert sub.parts[0].pending[(Position.parse(ids[0]), 0)].consumer == "c2"


async def test_a_fetch_that_lost_its_partition_gives_it_back_in_order_with_one_sort(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fetch's partition moved to another consumer while it read: what it took goes back for
    redelivery in position order. One sort per partition, not per message: per message it was
    quadratic, ~15 s of the broker's CPU when a second worker joined under a backlog."""
    sub = await broker.create_subscription(T, "moved", SubscriptionType.FAILOVER, "earliest")
    ids = await send(broker.topic(T), *(f"m{i}" for i in range(50)))
    out = await sub.fetch_raw("a", 100, 0)
    assert handed_count(out) == 50
    sorts: list[int] = []
    real = subscription._in_position_order
    monkeypatch.setattr(subscription, "_in_position_order", lambda part: (sorts.append(1), real(part)))
    sub.active = {0: "b"}
    assert sub._still_assigned("a", out) == []
    assert len(sorts) == 1
    assert [unit_id(u) for u in sub.parts[0].redeliver] == ids


async def test_a_fetch_that_stopped_midway_goes_on_from_what_it_read_and_a_rewind_reads_again(
        broker: Broker) -> None:
    """A read brings up to ``read_entries`` entries; a fetch whose limit stopped it in them keeps
    the rest, so the next fetch does not read them again (they were read three times over by a
    backlog's 10,000-record fetches). A rewind of the read pass must read again, not be served
    from what was kept."""
    sub = await broker.create_subscription(T, "ahead", SubscriptionType.EXCLUSIVE, "earliest")
    pos = [Position.parse((await send(broker.topic(T), f"a{i}", f"b{i}"))[0]) for i in range(6)]

    def at(i: int, bi: int) -> str:
        return f"{pos[i]}:{bi}"

    part = sub.parts[0]
    reads: list[Position | None] = []
    read_visible = part.partition.read_visible

    async def counted(start: Position | None, max_entries: int):  # type: ignore[no-untyped-def]
        reads.append(start)
        return await read_visible(start, max_entries)

    part.partition.read_visible = counted  # type: ignore[method-assign]
    first = await sub.fetch("c1", 3, 0)  # entry 0 and the first of entry 1: stopped in entry 1
    assert [m["message_id"] for m in first] == [at(0, 0), at(0, 1), at(1, 0)] and len(reads) == 1
    second = await sub.fetch("c1", 5, 0)  # the rest of entry 1, entries 2 and 3: from memory
    assert [m["message_id"] for m in second] == [at(1, 1), at(2, 0), at(2, 1), at(3, 0), at(3, 1)]
    assert len(reads) == 1
    # A message of entry 2 that nobody here has (as one held before a restart) is let go: the
    # read pass rewinds to entry 2, behind what was kept (entries 4 and 5).
    part.forget([(pos[2], 0)])
    part.release([(pos[2], 0)])
    third = await sub.fetch("c1", 10, 0)
    assert [m["message_id"] for m in third] == [at(2, 0), at(4, 0), at(4, 1), at(5, 0), at(5, 1)]
    assert reads[1] == pos[2]  # read again from the rewound position (then past entry 5: nothing)


async def test_a_fetch_hands_out_runs_of_entries_not_a_record_per_message(broker: Broker) -> None:
    """A fresh entry goes out as one run (entry, first index, count, redeliveries); one a fetch's
    limit cut goes out as two; what is left around a message still out goes out as the runs
    of consecutive indexes between."""
    sub = await broker.create_subscription(T, "runs", SubscriptionType.SHARED, "earliest")
    ids = await send(broker.topic(T), *(f"m{i}" for i in range(6)))
    assert [h[1:] for h in await sub.fetch_raw("a", 100, 0)] == [(0, 6, 0)]
    more = await send(broker.topic(T), *(f"n{i}" for i in range(5)))
    assert [h[1:] for h in await sub.fetch_raw("a", 2, 0)] == [(0, 2, 0)]
    assert [h[1:] for h in await sub.fetch_raw("a", 100, 0)] == [(2, 3, 0)]
    await sub.nack(mids(*ids[:2], *ids[3:]))  # index 2 stays out with "a"
    redelivered = await sub.fetch_raw("b", 100, 0)
    assert [h[1:] for h in redelivered] == [(i, 1, 1) for i in (0, 1, 3, 4, 5)]
    assert [m["message_id"] for m in render_json(redelivered)] == [*ids[:2], *ids[3:]]
    await sub.ack(mids(*ids, more[1]), cumulative=False)
    # An aborted transaction's hold gives back what it took: the read pass finds it again
    # message by message, around the one acked.
    sub.hold(await sub.check_txn_ack(mids(more[4]), (9, 1)), (9, 1), cumulative=True)
    await sub.end_txn([], (9, 1), commit=False)
    assert [h[1:] for h in await sub.fetch_raw("c", 100, 0)] == [(0, 1, 0), (2, 3, 0)]
