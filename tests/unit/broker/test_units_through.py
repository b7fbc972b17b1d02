"""Property: what a cumulative ack takes back (``PartitionDispatch.take_through``) is every unit
out with a consumer or queued for redelivery at or before its id, and nothing else, whether
found by bisection (entries handed out whole, units handed out in order) or by a scan after
nacks and redeliveries."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from streamtx.broker.dispatch import PartitionDispatch
from streamtx.broker.outstanding import Unit, unit_order
from streamtx.broker.subscription import SubscriptionType
from streamtx.broker.topic import Outgoing
from streamtx.contracts.msgid import MessageId
from streamtx.records.partition import Message
from tests.support.membroker import memory_broker

T = "persistent://t/n/c"
ops = st.lists(st.one_of(
    st.tuples(st.just("send"), st.integers(1, 4)),  # an entry of this many messages
    st.tuples(st.just("fetch"), st.integers(1, 5)),
    st.tuples(st.just("nack"), st.integers(0, 30)),  # the k-th handed unit, if any
    st.tuples(st.just("ack"), st.integers(0, 30)),
    st.tuples(st.just("take"), st.integers(0, 30)),  # through the k-th unit produced, given back
), max_size=40)


def covered(part: PartitionDispatch, bound: Unit) -> list[Unit]:
    """The definition: every unit out or queued at or before ``bound``."""
    pos, bi = bound
    return [u for u in [*part.pending, *part.redeliver]
            if u[0] < pos or (u[0] == pos and (bi is None or (u[1] or 0) <= bi))]


async def run(script: list[tuple[str, int]]) -> None:
    broker = await memory_broker(T, dispatch_read_entries=2)
    topic = broker.topic(T)
    sub = await broker.create_subscription(T, "s", SubscriptionType.SHARED, "earliest")
    part = sub.parts[0]
    handed: list[str] = []
    units: list[Unit] = []  # every unit produced, in log order
    for op, arg in script:
        if op == "send":
            ids = await topic.produce([Outgoing(Message(b"v", request_index=i), 0) for i in range(arg)],
                                      None, None)
            units += [sub.resolve(MessageId.parse(i))[1] for i in ids]
        elif op == "fetch":
            out_before = set(part.pending)
            got = [m["message_id"] for m in await sub.fetch("c", arg, 0)]
            # Never a unit twice, nor one still out (a fetch resuming inside an entry).
            units_got = [sub.resolve(MessageId.parse(i))[1] for i in got]
            assert len(set(units_got)) == len(got) and not out_before.intersection(units_got)
            handed += got
        elif handed and op == "nack":
            await sub.nack([MessageId.parse(handed[arg % len(handed)])])
        elif handed and op == "ack":
            await sub.ack([MessageId.parse(handed.pop(arg % len(handed)))], cumulative=False)
        elif units and op == "take":
            bound = units[arg % len(units)]
            out = sorted([*part.pending, *part.redeliver], key=unit_order)
            expected = covered(part, bound)
            taken = part.take_through(*bound)
            assert sorted(taken, key=unit_order) == sorted(expected, key=unit_order)
            left = sorted([*part.pending, *part.redeliver], key=unit_order)
            assert left == [u for u in out if u not in expected]
            assert len(part.pending) == len(list(part.pending))
            part.release(taken)  # as an unheld transactional ack gives them back
    await broker.close()


@settings(max_examples=120, deadline=None)
@given(ops)
def test_a_cumulative_ack_covers_every_unit_out_or_queued_before_it(script: list[tuple[str, int]]) -> None:
    asyncio.run(run(script))
