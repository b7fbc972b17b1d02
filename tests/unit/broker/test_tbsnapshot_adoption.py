"""A broker never adopts a compacted snapshot-ledger base that lacks what its newest snapshot stands on
(issue 22 item 5).

The aborted ids live only in the snapshot ledger here (no partition entries to
replay), so a base adopted without them loses them for good. A base holding
nothing is committed by hand (what the ``compact`` job commits); the running
broker's adoption check after its next snapshot and its recovery both refuse it.
"""

from __future__ import annotations

from streamtx.contracts.txnid import TxnId
from streamtx.ledger import Position, open_ledger_factory
from tests.support.bases import commit_base
from tests.unit.broker.test_partition import open_part


async def test_a_base_lacking_the_snapshots_segments_is_not_adopted_and_nothing_is_lost() -> None:
    ledgers = open_ledger_factory("memory://")
    part = await open_part(ledgers)
    lid = part.ledger.ledger_id
    aborted = [TxnId(1, i) for i in range(30)]
    for i, txn in enumerate(aborted):
        part.tb.add_aborted(txn, Position(lid, 1000 + 2 * i))
        if i % 7 == 6:
            await part.take_snapshot()
    await part.take_snapshot()
    info = await commit_base(ledgers, part.snap)  # holds nothing
    part.compaction.check_every_s = 0
    await part.take_snapshot()  # the running broker checks the base after a snapshot
    assert part.compaction.generation == -1
    await part.close()
    for _ in range(2):  # recovery checks it too; then a restart after that
        part = await open_part(ledgers)
        try:
            assert sorted(part.tb.aborted) == aborted
            assert part.compaction.generation == -1
            first = part.snap.first_position()
            assert first is not None and first.entry_id < info.cut  # not trimmed
        finally:
            await part.close()
    await ledgers.close()
