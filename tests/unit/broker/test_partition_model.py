"""Property: whatever happens (snapshots, partial snapshots, crashes), recovery rebuilds the
same transaction buffer a partition that never crashed would have."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from streamtx.broker.notify import Notifier
from streamtx.broker.partition import Partition
from streamtx.broker.settings import BrokerSettings
from streamtx.broker.txnbuffer import snapshot as tbsnapshot
from streamtx.contracts.states import Action
from streamtx.ledger import LedgerFactory, open_ledger_factory
from streamtx.records import tbsnapshot as sc
from streamtx.records.partition import Message

NAME = "persistent://t/n/m-partition-0"

op = st.one_of(
    st.tuples(st.just("plain"), st.just(0)),
    st.tuples(st.just("txn"), st.integers(0, 7)),
    st.tuples(st.sampled_from(["commit", "abort"]), st.integers(0, 7)),
    st.tuples(st.sampled_from(["snapshot", "partial", "crash"]), st.just(0)),
)


async def open_part(ledgers: LedgerFactory) -> Partition:
    s = BrokerSettings(snapshot_segment_size=2, snapshot_every_ops=10**9)  # type: ignore[call-arg]
    return await Partition.open(ledgers, NAME, "persistent://t/n/m", s, Notifier())


def view(p: Partition) -> tuple[object, ...]:
    return (list(p.tb.aborted.items()), list(p.tb.ongoing.items()), p.max_read_position(),
            p.producers.to_json())


async def run(ops: list[tuple[str, int]]) -> None:
    ledgers = open_ledger_factory("memory://")
    part = await open_part(ledgers)
    ended: set[int] = set()
    for name, t in ops:
        txn = (1, t)
        if name == "plain":
            await part.produce([Message(b"p")], None, None, None)
        elif name == "txn" and t not in ended:
            await part.produce([Message(b"t")], txn, None, None)
        elif name in ("commit", "abort") and t not in ended:
            await part.end_txn(txn, Action(name))
            ended.add(t)
        elif name == "snapshot":
            await part.take_snapshot()
        elif name == "partial":  # segments land, the index never does
            segments, _ = tbsnapshot.capture(part.tb, part.producers, 0)
            for seg in segments:
                if seg.ref is None:
                    await part.snap.append(sc.encode_segment(seg.segment_id, seg.ids))
        elif name == "crash":
            before = view(part)
            part = await open_part(ledgers)
            assert view(part) == before
    before = view(part)
    assert view(await open_part(ledgers)) == before
    await ledgers.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(op, max_size=40))
def test_recovery_matches_a_partition_that_never_crashed(ops: list[tuple[str, int]]) -> None:
    asyncio.run(run(ops))
