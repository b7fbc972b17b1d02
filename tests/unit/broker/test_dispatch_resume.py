"""A fetch that stopped inside a batched entry resumes there in bulk, unless messages of the
entry's rest were deleted meanwhile (issue 38 mutation 1).

Only another cluster's acks (a replicated ``acks`` marker, applied to the cursor) can delete
messages past where the fetch stopped: nobody had them, so a local ack of them is refused. The
bulk resume hands out ``[stopped_at, size)`` in one run; with a deleted message in that range it
must go message by message instead, or the acknowledged message is delivered again.
"""

from __future__ import annotations

from streamtx.broker.dispatch import PartitionDispatch, handed_units
from streamtx.broker.notify import Notifier
from streamtx.broker.partition import Partition
from streamtx.broker.settings import BrokerSettings
from streamtx.cursor import Cursor
from streamtx.ledger import Position, open_ledger_factory
from streamtx.records.partition import Message


async def one_entry_of(size: int) -> tuple[PartitionDispatch, Position]:
    """A partition holding one batched entry of ``size`` messages, and a dispatcher over it."""
    ledgers = open_ledger_factory("memory://")
    part = await Partition.open(ledgers, "persistent://t/n/r-partition-0", "persistent://t/n/r",
                                BrokerSettings(), Notifier())  # type: ignore[call-arg]
    cursor = await Cursor.open(ledgers, part.ledger, "s")
    # Produced after the dispatcher opened: an entry past all it ever handed out (at open it
    # counts everything already stored as handed out, and goes message by message there).
    dispatch = PartitionDispatch(0, part, cursor, 100)
    ids = await part.produce([Message(f"m{i}".encode()) for i in range(size)], None, None, None)
    lid, eid = map(int, ids[0][1].split(":")[:2])
    return dispatch, Position(lid, eid)


async def test_a_resumed_entry_skips_what_another_cluster_acked_since_the_fetch_stopped() -> None:
    dispatch, pos = await one_entry_of(5)
    first = await dispatch.fetch("c", 2, 1e12)
    assert handed_units(first) == [(pos, 0), (pos, 1)]  # stopped inside the entry
    # Another cluster's acks delete batch index 3 (past the stop: nobody here had it).
    await dispatch.cursor.delete_batch_index(pos, 3, 5)
    rest = await dispatch.fetch("c", 10, 1e12)
    assert handed_units(rest) == [(pos, 2), (pos, 4)]  # not index 3 again


async def test_with_nothing_deleted_the_rest_goes_out_as_one_run() -> None:
    # The bulk path itself (the guard must not turn it off): the rest of the entry is one run.
    dispatch, _ = await one_entry_of(5)
    await dispatch.fetch("c", 2, 1e12)
    rest = await dispatch.fetch("c", 10, 1e12)
    assert [(first, count) for _, first, count, _ in rest] == [(2, 3)]
