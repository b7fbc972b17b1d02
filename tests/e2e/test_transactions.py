"""Transactions end to end: coordinator, broker and pending-ack store as real processes.

Everything goes through the SDK over real HTTP, on the file and the kafka
ledger (see ``conftest.py``): commits across partitions and subscriptions,
aborts, read isolation, timeouts, the three 409s (ack conflict, fenced
producer, overlapping commit), and kill -9 of each service.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from streamtx.client import AdminClient, StreamtxClient
from streamtx.client.names import path_of
from streamtx.errors import ConflictError, StreamtxError
from tests.support.suite import Suite, eventually, everything, receive


def topic(stem: str) -> str:
    """A topic of its own for each test (the suite is shared by the module)."""
    return f"persistent://t/n/{stem}-{uuid.uuid4().hex[:8]}"


async def sub_stats(client: StreamtxClient, name: str, sub: str) -> Any:
    return await client.broker.call("GET", f"/v1/topics/{path_of(name)}/subscriptions/{sub}/stats")


async def state(client: StreamtxClient, txn_id: str) -> str:
    return str((await client.transaction_metadata(txn_id))["state"])


async def feed(client: StreamtxClient, name: str, n: int, partitions: int = 1) -> None:
    await client.create_topic(name, partitions)
    producer = await client.producer(name, name="feed")
    for i in range(n):
        await producer.send(f"in{i}".encode(), key=f"k{i}")


# --- commit and abort ---------------------------------------------------------


async def test_commit_across_3_partitions_and_2_subscriptions(running: Suite) -> None:
    src, out = topic("in"), topic("out")
    async with StreamtxClient(running.url) as client:
        assert set(client.services) >= {"coordinator", "broker", "pendingack"}
        await feed(client, src, 3)
        subs = {s: await client.consumer(src, s, "earliest", "Shared", name=f"w-{s}") for s in ("sa", "sb")}
        await client.create_topic(out, 3)
        reader = await client.consumer(out, "read", "earliest", "Shared")
        sink = await client.producer(out, name="sink")
        got = {s: await receive(c, 3) for s, c in subs.items()}
        assert all(len(msgs) == 3 for msgs in got.values())

        async with client.transaction(timeout_ms=30_000) as txn:
            for p, m in enumerate(got["sa"]):
                await sink.send(m.value.upper(), partition=p, txn=txn)
            for s, c in subs.items():
                await c.ack(got[s], txn=txn)
            # Before the commit: nothing visible, the input held on both subscriptions.
            assert await reader.receive(max=10, wait_ms=300) == []
            for s in subs:
                assert (await sub_stats(client, src, s))["heldByTransactions"] == 3
        meta = await client.transaction_metadata(txn.txn_id)
        assert meta["state"] == "COMMITTED"
        assert len(meta["partitions"]) == 3 and len(meta["subscriptions"]) == 2

        # After: all three partitions' messages visible, both subscriptions acked.
        seen = await receive(reader, 3)
        assert sorted(m.value for m in seen) == [b"IN0", b"IN1", b"IN2"]
        assert sorted(m.partition for m in seen if m.partition is not None) == [0, 1, 2]
        for s in subs:
            stats = await sub_stats(client, src, s)
            assert stats["msgBacklog"] == 0 and stats["heldByTransactions"] == 0, stats


async def test_abort_hides_output_and_redelivers_input(running: Suite) -> None:
    src, out = topic("in"), topic("out")
    async with StreamtxClient(running.url) as client:
        await feed(client, src, 3)
        subs = {s: await client.consumer(src, s, "earliest", "Shared", name=f"w-{s}") for s in ("sa", "sb")}
        await client.create_topic(out, 3)
        sink = await client.producer(out, name="sink")
        got = {s: await receive(c, 3) for s, c in subs.items()}

        with pytest.raises(RuntimeError):
            async with client.transaction(timeout_ms=30_000) as txn:
                for p, m in enumerate(got["sa"]):
                    await sink.send(m.value.upper(), partition=p, txn=txn)
                for s, c in subs.items():
                    await c.ack(got[s], txn=txn)
                raise RuntimeError("transform failed")
        assert await state(client, txn.txn_id) == "ABORTED"

        await sink.send(b"plain-after")  # visible; the aborted ones never are
        assert await everything(client, out) == [b"plain-after"]
        for s in subs:  # the acked input is deliverable again (to anyone)
            again = await receive(await client.consumer(src, s, name=f"retry-{s}"), 3)
            assert sorted(m.value for m in again) == [b"in0", b"in1", b"in2"]
            assert (await sub_stats(client, src, s))["heldByTransactions"] == 0


async def test_reader_sees_nothing_of_an_open_txn_nor_after_its_first_message(running: Suite) -> None:
    name = topic("iso")
    async with StreamtxClient(running.url) as client:
        await client.create_topic(name, 1)
        reader = await client.consumer(name, "r", "earliest", "Exclusive")
        producer = await client.producer(name)
        await producer.send(b"before")
        txn = await client.new_transaction(timeout_ms=30_000)
        await producer.send(b"t1", txn=txn)
        await producer.send(b"plain-after-t1")  # held back behind the open txn's first message
        await producer.send(b"t2", txn=txn)
        assert [m.value for m in await receive(reader, 3, timeout_s=1.0)] == [b"before"]
        assert await reader.receive(max=10, wait_ms=300) == []

        waiting = asyncio.create_task(reader.receive(max=10, wait_ms=5000))
        await asyncio.sleep(0.3)
        await txn.commit()  # wakes the long poll
        got = await waiting
        got += await receive(reader, 3 - len(got), timeout_s=3.0)
        assert [m.value for m in got] == [b"t1", b"plain-after-t1", b"t2"]


async def test_timeout_aborts_and_its_messages_never_show(running: Suite) -> None:
    name = topic("timeout")
    async with StreamtxClient(running.url) as client:
        await client.create_topic(name, 2)
        producer = await client.producer(name)
        txn = await client.new_transaction(timeout_ms=500)
        await producer.send(b"doomed-0", partition=0, txn=txn)
        await producer.send(b"doomed-1", partition=1, txn=txn)

        async def timed_out() -> bool:
            return await state(client, txn.txn_id) == "TIMEOUT"

        await eventually(timed_out, what="the coordinator times the txn out")
        with pytest.raises(ConflictError):
            await txn.commit()
        await producer.send(b"plain-0", partition=0)
        await producer.send(b"plain-1", partition=1)
        assert sorted(await everything(client, name)) == [b"plain-0", b"plain-1"]
        admin = AdminClient(client)
        for p in (0, 1):
            stats = await admin.buffer_stats(f"{name}-partition-{p}")
            assert stats["ongoingTxnSize"] == 0 and stats["abortedTxnCount"] == 1, stats


# --- conflicts ----------------------------------------------------------------


async def test_zombie_consumers_ack_conflict_and_overlapping_commit(running: Suite) -> None:
    """Two zombies of the same input: the second may neither hold nor commit what the first did."""
    src, out = topic("in"), topic("out")
    async with StreamtxClient(running.broker.url) as client:  # any service's URL will do
        await feed(client, src, 3)
        await client.create_topic(out, 1)
        zombie_a = await client.consumer(src, "work", "earliest", "Shared", name="zombie-a")
        zombie_b = await client.consumer(src, "work", name="zombie-b")
        sink = await client.producer(out)
        msgs = await receive(zombie_a, 3)
        msgs.sort(key=lambda m: m.value)
        assert len(msgs) == 3
        await zombie_a.nack(msgs)  # A looks dead: its input goes to B as well
        again = sorted(await receive(zombie_b, 3), key=lambda m: m.value)
        assert [m.message_id for m in again] == [m.message_id for m in msgs]

        a = await client.new_transaction(timeout_ms=30_000)
        b = await client.new_transaction(timeout_ms=30_000)
        await sink.send(b"from-a", txn=a)
        await sink.send(b"from-b", txn=b)
        await zombie_a.ack([msgs[1]], txn=a)
        with pytest.raises(ConflictError):  # held by A: the ack conflict
            await zombie_b.ack([again[1]], txn=b)
        await zombie_b.ack([again[2]], txn=b, cumulative=True)  # B claims everything up to m2
        await a.commit()
        with pytest.raises(ConflictError):  # m1 was committed by A: the optimistic check
            await b.commit()
        assert await state(client, b.txn_id) in ("ABORTED", "ABORTING")
        assert await everything(client, out) == [b"from-a"]  # nothing of B visible
        c = await client.new_transaction(timeout_ms=30_000)
        with pytest.raises(ConflictError):  # already acked (by A's commit)
            await zombie_b.ack([again[1]], txn=c)
        await c.abort()


async def test_fenced_producer(running: Suite) -> None:
    name = topic("fence")
    async with StreamtxClient(running.url) as client:
        await client.create_topic(name, 1)
        old = await client.producer(name, name="writer", epoch=1)
        await old.send(b"old-1")
        new = await client.producer(name, name="writer", epoch=2)
        await new.send(b"new-1")
        with pytest.raises(ConflictError):
            await old.send(b"old-2")
        txn = await client.new_transaction(timeout_ms=30_000)
        with pytest.raises(ConflictError):  # fenced in a transaction too
            await old.send(b"old-txn", txn=txn)
        await new.send(b"new-txn", txn=txn)
        await txn.commit()
        assert await everything(client, name) == [b"old-1", b"new-1", b"new-txn"]


# --- crashes ------------------------------------------------------------------


async def test_broker_kill9_recovers_the_buffer_from_its_snapshot(running: Suite) -> None:
    name = topic("crash")
    async with StreamtxClient(running.url) as client:
        admin = AdminClient(client)
        await client.create_topic(name, 2)
        producer = await client.producer(name, name="p")
        for i in range(12):
            txn = await client.new_transaction(timeout_ms=60_000)
            await producer.send(f"v{i}".encode(), partition=i % 2, txn=txn)
            await producer.send(f"plain{i}".encode(), partition=i % 2)
            await (txn.commit() if i % 3 == 0 else txn.abort())
        still_open = await client.new_transaction(timeout_ms=60_000)
        await producer.send(b"still-open", partition=0, txn=still_open)
        await producer.send(b"behind-open", partition=0)

        parts = [f"{name}-partition-{p}" for p in (0, 1)]

        async def snapshotted() -> bool:
            stats = [await admin.buffer_stats(p) for p in parts]
            return all(s["lastSnapshotTimestamp"] and s["segmentsSize"] >= 1 for s in stats)

        await eventually(snapshotted, what="a snapshot with sealed segments on both partitions")
        await asyncio.sleep(0.5)  # a snapshot after the last operation
        before = await everything(client, name)
        stats_before = [await admin.buffer_stats(p) for p in parts]
        assert sorted(before) == sorted([f"v{i}".encode() for i in range(0, 12, 3)]
                                        + [f"plain{i}".encode() for i in range(12)])

        running.broker.restart()
        after = await everything(client, name)
        assert after == before  # the same messages, in the same order; aborted ones still hidden
        for b, a in zip(stats_before, [await admin.buffer_stats(p) for p in parts], strict=True):
            # lastSnapshotTimestamp unchanged and set: the state came from that snapshot.
            for key in ("maxReadPosition", "ongoingTxnSize", "abortedTxnCount", "segmentsSize",
                        "lastSnapshotTimestamp"):
                assert a[key] == b[key], (key, b, a)
        await still_open.commit()  # the recovered buffer still knows the open txn, and releases it
        assert sorted(await everything(client, name)) == sorted([*before, b"still-open", b"behind-open"])


async def test_pendingack_kill9_keeps_pending_acks(running: Suite) -> None:
    src = topic("in")
    async with StreamtxClient(running.url) as client:
        await feed(client, src, 4)
        consumer = await client.consumer(src, "s", "earliest", "Shared", name="c1")
        msgs = await receive(consumer, 4)
        msgs.sort(key=lambda m: m.value)
        txn = await client.new_transaction(timeout_ms=60_000)
        await consumer.ack(msgs[:2], txn=txn)

        running.pendingack.restart()
        stats = await AdminClient(client).pending_ack_stats(src, "s")
        assert stats["heldMessageCount"] == 2 and stats["ongoingTxnSize"] == 1, stats  # replayed
        other = await client.new_transaction(timeout_ms=60_000)
        for m in msgs[:2]:  # still held by txn after the restart
            with pytest.raises(ConflictError):
                await consumer.ack([m], txn=other)
        await other.abort()
        await consumer.nack(msgs)
        again = await receive(await client.consumer(src, "s", name="c2"), 4, timeout_s=2.0)
        assert sorted(m.value for m in again) == [b"in2", b"in3"]  # never the held ones

        await txn.commit()
        assert await state(client, txn.txn_id) == "COMMITTED"
        await consumer.ack(again)

        async def drained() -> bool:
            s = await sub_stats(client, src, "s")
            return bool(s["msgBacklog"] == 0 and s["heldByTransactions"] == 0)

        await eventually(drained, what="the committed acks deleted from the cursor")


async def test_coordinator_kill9_mid_commit_finishes_after_restart(running: Suite) -> None:
    src, out = topic("in"), topic("out")
    async with StreamtxClient(running.url) as client:
        await feed(client, src, 2)
        await client.create_topic(out, 2)
        consumer = await client.consumer(src, "s", "earliest", "Shared", name="c1")
        sink = await client.producer(out, name="sink")
        msgs = await receive(consumer, 2)
        txn = await client.new_transaction(timeout_ms=60_000)
        for p, m in enumerate(msgs):
            await sink.send(m.value.upper(), partition=p, txn=txn)
        await consumer.ack(msgs, txn=txn)

        # With the broker down the commit is logged COMMITTING but cannot complete.
        running.broker.kill9()
        commit = asyncio.create_task(txn.commit())

        async def committing() -> bool:
            return await state(client, txn.txn_id) == "COMMITTING"

        await eventually(committing, what="the commit logged COMMITTING")
        running.coordinator.kill9()
        with pytest.raises(StreamtxError):  # the coordinator died under the request
            await commit
        running.coordinator.start()  # replays its log, retries the ends while the broker is down
        assert await state(client, txn.txn_id) == "COMMITTING"
        running.broker.start()

        async def committed() -> bool:
            return await state(client, txn.txn_id) == "COMMITTED"

        await eventually(committed, timeout_s=30, what="the restarted coordinator finishes the commit")
        assert sorted(await everything(client, out)) == [b"IN0", b"IN1"]

        async def acked() -> bool:
            s = await sub_stats(client, src, "s")
            return bool(s["msgBacklog"] == 0 and s["heldByTransactions"] == 0)

        await eventually(acked, what="the committed acks deleted from the cursor")
