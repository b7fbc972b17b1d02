"""Applying another cluster's ``acks`` marker on a partition (memory ledger): what is acknowledged,
which markers go along, and what a retry reads."""

from __future__ import annotations

from streamtx.broker.dispatch import PartitionDispatch
from streamtx.broker.notify import Notifier
from streamtx.broker.partition import Partition
from streamtx.broker.replication import markers
from streamtx.broker.settings import BrokerSettings
from streamtx.contracts.ackset import AckSet
from streamtx.cursor import Cursor
from streamtx.ledger import Position, open_ledger_factory
from streamtx.records.partition import Message


async def setup(layout: str) -> tuple[Partition, PartitionDispatch, list[Position]]:
    """A partition of cluster ``b`` with a message per ``m`` and a marker per ``k`` in ``layout``."""
    ledgers = open_ledger_factory("memory://")
    part = await Partition.open(ledgers, "persistent://t/n/x-partition-0", "persistent://t/n/x",
                                BrokerSettings(), Notifier())  # type: ignore[call-arg]
    positions = []
    for c in layout:
        if c == "m":
            mid = (await part.produce([Message(b"v")], None, None, None))[0][1]
            lid, eid = map(int, mid.split(":")[:2])
            positions.append(Position(lid, eid))
        else:
            positions.append(await part.append_marker(b'{"type": "snapshot_request"}'))
    cursor = await Cursor.open(ledgers, part.ledger, "s")
    return part, PartitionDispatch(0, part, cursor, 100), positions


def naming(positions: list[Position]) -> AckSet:
    return AckSet.build([[("b", p.ledger_id, p.entry_id)] for p in positions], [])


async def apply(dispatch: PartitionDispatch, got: markers.AckedHere) -> None:
    await dispatch.cursor.apply([u[0] for u in got.units] + got.fillers)


async def test_markers_between_and_after_acknowledged_messages_go_along() -> None:
    # No consumer passes the markers here: without them the mark-delete stays before the first.
    part, dispatch, pos = await setup("kmkkmmkm")
    got = await markers.acked_here(part, dispatch, "b", naming([pos[1], pos[4], pos[5]]), 1000)
    assert [u[0] for u in got.units] == [pos[1], pos[4], pos[5]]
    assert got.fillers == [pos[0], pos[2], pos[3], pos[6]] and got.missing == []
    await apply(dispatch, got)
    assert dispatch.cursor.mark_delete_position == pos[6]


async def test_no_marker_after_a_message_still_unacknowledged() -> None:
    part, dispatch, pos = await setup("mkmkmk")
    got = await markers.acked_here(part, dispatch, "b", naming([pos[0], pos[4]]), 1000)
    assert got.fillers == [pos[1], pos[5]]  # not pos[3]: it follows pos[2], left unacknowledged
    await apply(dispatch, got)
    assert dispatch.cursor.mark_delete_position == pos[1]


async def test_entries_not_here_yet_are_missing_and_a_retry_reads_on_from_the_end() -> None:
    part, dispatch, pos = await setup("mkm")
    late = AckSet({("c", 7): [(3, 9)]})
    got = await markers.acked_here(part, dispatch, "b", naming([pos[0], pos[2]]).union(late), 1000)
    assert got.missing == [("c", 7)] and got.next == Position(pos[2].ledger_id, pos[2].entry_id + 1)
    await apply(dispatch, got)
    more = await part.append_marker(b'{"type": "snapshot_request"}')
    again = await markers.acked_here(part, dispatch, "b", late, 1000, start=got.next)
    assert again.units == [] and again.fillers == [more] and again.missing == [("c", 7)]


async def test_an_export_names_no_aborted_entry_so_no_cluster_waits_for_it() -> None:
    """Issue 21 item 15: the dispatcher deletes an aborted entry as it passes it, and the export
    named it among the acknowledged messages; being last of its origin, it was the entry every
    other cluster waited for (aborted entries are never replicated): the marker stayed
    incomplete there, applied again at every arrival, until this cluster wrote anything later."""
    from streamtx.contracts.states import Action
    from streamtx.contracts.txnid import TxnId

    part, dispatch, pos = await setup("m")
    txn = TxnId(1, 1)
    aborted = (await part.produce([Message(b"no")], txn, None, None))[0][1]
    await part.end_txn(txn, Action.ABORT)
    aborted_pos = Position(*map(int, aborted.split(":")[:2]))
    end = part.ledger.last_position()
    assert end is not None and end > aborted_pos  # the abort marker
    await dispatch.cursor.apply([pos[0], aborted_pos, end])  # consumed: m acked, the rest passed
    acks = await markers.export_acks(part, dispatch, "a", None, 100, 1000)
    assert acks.last() == {("a", pos[0].ledger_id): pos[0].entry_id}
    assert acks.lookup(("a", aborted_pos.ledger_id, aborted_pos.entry_id)) is False
