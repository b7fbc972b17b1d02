"""Issue 32: one identity per message, dispatch state changed under the partition's lock, exact
ends. Each test is one request sequence that broke exactly-once (no crash needed) before its
fix; the domain objects over the memory ledger, no HTTP."""

from __future__ import annotations

import asyncio

import pytest

from streamtx.broker.pendingack_client import held_pairs, held_reaches
from streamtx.broker.registry import Broker
from streamtx.broker.subscription import Subscription, SubscriptionType
from streamtx.contracts.models import Held
from streamtx.contracts.txnid import TxnId
from streamtx.errors import ConflictError
from streamtx.records.pendingack import MessageId
from streamtx.records.pendingack_state import SubscriptionState
from tests.unit.broker.memtopic import ACK_TIMEOUT_MS, T, mids, send

ACK_TIMEOUT_S = ACK_TIMEOUT_MS / 1000


def entry_id(message_id: str) -> str:
    """``L:E`` of ``L:E:i``: the whole-entry id."""
    return message_id.rsplit(":", 1)[0]


async def fetched(sub: Subscription, consumer: str, wait_s: float = 0.0) -> list[str]:
    return [m["message_id"] for m in await sub.fetch(consumer, 100, int(wait_s * 1000))]


async def after_ack_timeout(sub: Subscription, consumer: str) -> list[str]:
    await asyncio.sleep(ACK_TIMEOUT_S * 2)
    return await fetched(sub, consumer)


async def test_a_plain_ack_of_a_whole_batch_id_is_refused_while_a_transaction_holds_one_of_it(
        broker: Broker) -> None:
    """Defect 5: ``L:E`` was looked up as ``(E, None)``, holds are ``(E, i)``: the ack was
    answered 200 and deleted the entry, and the holder's abort then gave back nothing."""
    sub = await broker.create_subscription(T, "d5", SubscriptionType.SHARED, "earliest")
    ids = await send(broker.topic(T), "a", "b", "c")
    assert await fetched(sub, "c1") == ids
    txn = TxnId(1, 1)
    sub.hold(await sub.check_txn_ack(mids(ids[1]), txn), txn)
    with pytest.raises(ConflictError):
        await sub.ack(mids(entry_id(ids[0])), cumulative=False)
    await sub.end_txn([ids[1]], txn, commit=False)
    assert sorted(await after_ack_timeout(sub, "c2")) == sorted(ids)  # nothing was deleted


async def test_a_transactional_ack_of_a_whole_batch_id_holds_every_message_of_it(broker: Broker) -> None:
    """Defect 6: the hold was stored as ``(E, None)`` while dispatch looks for ``(E, i)``: the
    messages went to another consumer after the ack timeout, and the commit deleted them too."""
    sub = await broker.create_subscription(T, "d6", SubscriptionType.SHARED, "earliest")
    ids = await send(broker.topic(T), "a", "b", "c")
    assert await fetched(sub, "c1") == ids
    txn = TxnId(1, 2)
    resolved = await sub.check_txn_ack(mids(entry_id(ids[0])), txn)
    assert [u[1] for _, u in resolved] == [0, 1, 2]
    sub.hold(resolved, txn)
    assert await after_ack_timeout(sub, "c2") == []
    with pytest.raises(ConflictError):  # another transaction's ack of one of them
        await sub.check_txn_ack(mids(ids[2]), TxnId(1, 3))
    await sub.end_txn([entry_id(ids[0])], txn, commit=True)
    assert sub.parts[0].cursor.is_deleted(sub.resolve(MessageId.parse(ids[0]))[1][0])


async def test_a_nack_of_a_whole_batch_id_redelivers_each_message_once(broker: Broker) -> None:
    """Defect 7: ``Outstanding`` read ``(E, None)`` as batch index 0; after the nack and an ack
    of ``L:E:0`` the acked message was delivered again at every ack timeout, for ever."""
    sub = await broker.create_subscription(T, "d7", SubscriptionType.SHARED, "earliest")
    ids = await send(broker.topic(T), "a", "b", "c")
    assert await fetched(sub, "c1") == ids
    await sub.nack(mids(entry_id(ids[0])))
    assert sorted(await fetched(sub, "c2")) == sorted(ids)
    await sub.ack(mids(ids[0]), cumulative=False)
    for _ in range(3):
        assert ids[0] not in await after_ack_timeout(sub, "c3")


async def test_a_whole_entry_id_of_a_one_message_entry_and_its_index_0_are_one_message(
        broker: Broker) -> None:
    sub = await broker.create_subscription(T, "one", SubscriptionType.SHARED, "earliest")
    [only] = await send(broker.topic(T), "a")
    assert await fetched(sub, "c1") == [only]
    txn = TxnId(1, 4)
    sub.hold(await sub.check_txn_ack(mids(f"{only}:0"), txn), txn)
    with pytest.raises(ConflictError):
        await sub.ack(mids(only), cumulative=False)
    with pytest.raises(ConflictError):
        await sub.check_txn_ack(mids(only), TxnId(1, 5))


async def test_transaction_0_0_is_a_transaction_like_any_other(broker: Broker) -> None:
    """Defect 4: ``0:0`` was the "unknown holder", so another transaction's ack took over what
    the first transaction of a fresh coordinator held (the README's tour gets ``0:0``)."""
    sub = await broker.create_subscription(T, "d4", SubscriptionType.SHARED, "earliest")
    ids = await send(broker.topic(T), "a", "b")
    await fetched(sub, "c1")
    first = TxnId(0, 0)
    sub.hold(await sub.check_txn_ack(mids(ids[0]), first), first)
    with pytest.raises(ConflictError):
        await sub.check_txn_ack(mids(ids[0]), TxnId(0, 1))
    await sub.end_txn([], TxnId(0, 1), commit=False)  # another's end leaves 0:0's hold alone
    assert sub.parts[0].held.get(sub.resolve(MessageId.parse(ids[0]))[1]) == first


async def test_a_hold_whose_transaction_ended_meanwhile_is_given_back_when_the_store_refuses(
        broker: Broker) -> None:
    """Defect 3: the ack route held the ids, then the store (ending the transaction) refused
    them; the end had let go of the transaction's holds unopened, so ``unhold`` found nothing
    and the message was lost to dispatch until a restart."""
    sub = await broker.create_subscription(T, "d3", SubscriptionType.EXCLUSIVE, "earliest")
    ids = [(await send(broker.topic(T), f"m{i}"))[0] for i in range(2)]
    assert await fetched(sub, "w") == ids
    txn = TxnId(2, 1)
    sub.hold(await sub.check_txn_ack(mids(ids[0]), txn), txn)  # accepted by the store
    late = sub.hold(await sub.check_txn_ack(mids(ids[1]), txn), txn)  # on its way to the store
    await sub.end_txn([ids[0]], txn, commit=True)  # the store's end names what it accepted
    sub.unhold(late, txn)  # and it refused the late one: 409
    assert await fetched(sub, "w") == [ids[1]]
    with pytest.raises(ConflictError):  # a hold now would outlive the transaction
        await sub.check_txn_ack(mids(ids[1]), txn)


async def test_a_release_while_a_fetch_reads_is_not_lost(broker: Broker) -> None:
    """Defect 2: ``release`` moved ``read_pos`` back while a fetch was suspended in its read,
    which then overwrote it: the aborted transaction's message was neither out, queued, held
    nor deleted, and never delivered."""
    sub = await broker.create_subscription(T, "d2", SubscriptionType.EXCLUSIVE, "earliest")
    ids = [(await send(broker.topic(T), f"m{i}"))[0] for i in range(3)]
    assert await fetched(sub, "w") == ids
    txn = TxnId(2, 2)
    sub.hold(await sub.check_txn_ack(mids(ids[0]), txn, cumulative=True), txn, cumulative=True)
    later = await send(broker.topic(T), "m3")
    part = sub.parts[0]
    reading, resume = asyncio.Event(), asyncio.Event()
    read_visible = part.partition.read_visible

    async def slow_read(*args: object, **kwargs: object) -> object:
        reading.set()
        await resume.wait()  # a disk read
        return await read_visible(*args, **kwargs)  # type: ignore[arg-type]

    part.partition.read_visible = slow_read  # type: ignore[method-assign]
    fetch = asyncio.create_task(fetched(sub, "w"))
    await asyncio.wait_for(reading.wait(), 5)
    await sub.end_txn([ids[0]], txn, commit=False)  # the abort, during the read
    resume.set()
    first = await fetch  # what it read, and maybe what the abort rewound to: read again
    del part.partition.read_visible
    assert sorted(first + await fetched(sub, "w")) == sorted([ids[0], *later])


async def test_a_failover_move_during_a_fetch_hands_the_moved_messages_out_once(broker: Broker) -> None:
    """Defect 9: the move gave A's messages back and B took them; A's fetch then finished and
    released them again, out of B's hands: B got them twice with no nack."""
    sub = await broker.create_subscription(T, "d9", SubscriptionType.FAILOVER, "earliest")
    ids = await send(broker.topic(T), "a", "b", "c")
    out = await sub.fetch_raw("w2", 100, 0)  # A's fetch has read them...
    part = sub.parts[0]
    # ...when B joins (first by name: the partition moves to it, what A had is given back)
    assert await fetched(sub, "w1") == ids
    assert sub._still_assigned("w2", out) == []  # A's fetch ends: nothing of A's is left out
    assert await fetched(sub, "w1") == []
    assert len(part.pending) == 3 and all(part.pending[u].consumer == "w1" for u in part.pending)


async def test_a_restored_cumulative_ack_holds_its_whole_range(broker: Broker) -> None:
    """Defect 8: after a restart the store's ``held`` answer listed an open cumulative ack as
    its last id and only that was held: the range went to other consumers while the
    transaction was open."""
    ids = [(await send(broker.topic(T), f"m{i}"))[0] for i in range(4)]
    txn = TxnId(3, 1)
    store = SubscriptionState()  # the pending-ack store's side
    store.add_ack(txn, [MessageId.parse(ids[2])], cumulative=True)
    answer = Held(message_ids=[str(m) for m in store.held_ids()],
                  holders={str(t): [str(m) for m in ms] for t, ms in store.held_by_txn().items()},
                  cumulative={str(txn): [ids[2]]})
    for commit in (False, True):
        sub = await broker.create_subscription(T, f"d8-{commit}", SubscriptionType.SHARED, "earliest")
        await sub.restore_held(held_pairs(answer), held_reaches(answer))
        assert await fetched(sub, "c1") == [ids[3]]
        with pytest.raises(ConflictError):
            await sub.check_txn_ack(mids(ids[0]), TxnId(3, 2))
        await sub.end_txn([ids[2]], txn, commit=commit, cumulative_ids=[ids[2]])
        assert sorted(await after_ack_timeout(sub, "c2")) == sorted([ids[3]] if commit else ids)
