"""Property: an Exclusive reader sees exactly the committed messages, in log order, never a
marker nor an aborted message nor anything behind an open transaction's first message."""

from __future__ import annotations

import asyncio
import base64

from hypothesis import given, settings
from hypothesis import strategies as st

from streamtx.broker.subscription import SubscriptionType
from streamtx.broker.topic import Outgoing
from streamtx.contracts.msgid import MessageId
from streamtx.contracts.states import Action
from streamtx.records.partition import Message
from tests.support.membroker import memory_broker

T = "persistent://t/n/d"
ops = st.lists(st.one_of(
    st.tuples(st.just("plain"), st.just(0)),
    st.tuples(st.just("txn"), st.integers(0, 4)),
    st.tuples(st.sampled_from(["commit", "abort"]), st.integers(0, 4)),
    st.tuples(st.just("read"), st.integers(1, 3)),
), max_size=40)


async def run(script: list[tuple[str, int]]) -> None:
    broker = await memory_broker(T, dispatch_read_entries=2)
    topic = broker.topic(T)
    sub = await broker.create_subscription(T, "s", SubscriptionType.EXCLUSIVE, "earliest")
    log: list[tuple[str, tuple[int, int] | None]] = []  # value, txn in log order
    ended: dict[int, str] = {}
    seen: list[str] = []
    n = 0
    for op, arg in script:
        if op == "plain" or (op == "txn" and arg not in ended):
            n += 1
            txn = (3, arg) if op == "txn" else None
            await topic.produce([Outgoing(Message(f"v{n}".encode()), 0)], txn, None)
            log.append((f"v{n}", txn))
        elif op in ("commit", "abort") and arg not in ended and any(t == (3, arg) for _, t in log):
            await topic.partitions[0].end_txn((3, arg), Action(op))
            ended[arg] = op
        elif op == "read":
            got = await sub.fetch("c", arg, 0)
            seen += [base64.b64decode(m["value"]).decode() for m in got]
            await sub.ack([MessageId.parse(m["message_id"]) for m in got], cumulative=False)
    while got := await sub.fetch("c", 100, 0):
        seen += [base64.b64decode(m["value"]).decode() for m in got]
    # Expected: committed or plain messages before the first message of the oldest open txn.
    expected: list[str] = []
    for value, txn in log:
        if txn is not None and txn[1] not in ended:
            break
        if txn is None or ended[txn[1]] == "commit":
            expected.append(value)
    assert seen == expected
    await broker.close()


@settings(max_examples=80, deadline=None)
@given(ops)
def test_reader_sees_committed_prefix_in_order(script: list[tuple[str, int]]) -> None:
    asyncio.run(run(script))
