"""The compact job on file ledgers; the coordinator and a running broker read and adopt the bases."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

from streamtx.batching import compacted
from streamtx.batching.replay import replay_entries
from streamtx.batching.settings import BatchingSettings
from streamtx.broker.notify import Notifier
from streamtx.broker.partition import Partition
from streamtx.broker.settings import BrokerSettings
from streamtx.contracts.txnid import TxnId
from streamtx.coordinator.log import TransactionLog
from streamtx.jobs import compact, synth
from streamtx.ledger import Entry, Position, ledger_id_for, open_ledger_factory
from streamtx.records import txnlog as tc
from streamtx.records.txntable import TxnTable


def _state(table: TxnTable) -> Any:
    return ({m.txn: (m.state, list(m.partitions), list(m.subscriptions)) for m in table.unfinished()},
            table.next_counter)


async def _recover(url: str) -> tuple[Any, TransactionLog]:
    """What a restarted coordinator 0 of cluster c1 rebuilds (its log stays open: the caller closes it)."""
    factory = open_ledger_factory(url)
    txlog = await TransactionLog.open(factory, cluster="c1", coordinator_id=0, batching=BatchingSettings())
    table = TxnTable(0)
    # What a coordinator's table stands on once its housekeeping deleted the transactions its
    # finished retention let go (the generated ones finished long ago): it adopts the base then.
    await txlog.replay(table.apply, lambda: [r for m in table.unfinished() for r in m.refs]
                       + ([table.reserve_ref] if table.reserve_ref else []))
    return _state(table), txlog


class _Broker:
    """One partition of a broker on file ledgers, driven step by step from a sync test."""

    name = "persistent://t/ns/tb-partition-0"

    def __init__(self, url: str) -> None:
        self.url = url
        self.settings = BrokerSettings(ledger_url=url, snapshot_segment_size=5,  # type: ignore[call-arg]
                                       snapshot_every_ops=1 << 62)
        self.loop = asyncio.new_event_loop()
        self.aborted: list[TxnId] = []
        self.ledgers, self.part = self.loop.run_until_complete(self._open())

    async def _open(self) -> tuple[Any, Partition]:
        ledgers = open_ledger_factory(self.url)
        part = await Partition.open(ledgers, self.name, "persistent://t/ns/tb", self.settings, Notifier())
        return ledgers, part

    def abort(self, n: int) -> None:
        """``n`` more aborted ids, a snapshot after every 7th."""
        async def go() -> None:
            for _ in range(n):
                txn = TxnId(1, len(self.aborted))
                self.aborted.append(txn)
                marker = Position(self.part.ledger.ledger_id, 1000 + 2 * len(self.aborted))
                self.part.tb.add_aborted(txn, marker)
                if len(self.aborted) % 7 == 0:
                    await self.part.take_snapshot()

        self.loop.run_until_complete(go())

    def restart(self) -> None:
        async def go() -> None:
            await self.part.take_snapshot()  # the ids since the last one (no partition entries to replay)
            await self._close()
            self.ledgers, self.part = await self._open()

        self.loop.run_until_complete(go())

    async def _close(self) -> None:
        await self.part.close()
        await self.ledgers.close()

    def close(self) -> None:
        self.loop.run_until_complete(self._close())
        self.loop.close()


def _txn_log(root: Path) -> tuple[str, TxnTable, int]:
    """A transaction log of coordinator 0 (10% left open; duplicates, a trim): its state, its end."""
    name = "txnlog/c1/0"
    rng = random.Random(3)
    recs = synth.txn_log_records(0, 1200, rng, open_share=0.1)
    live = synth.write_ledger(str(root), name, list(synth.entries_of(recs, rng, max_batch=64)),
                              segment_bytes=50_000, chaos=synth.Chaos(duplicate=0.05, trim_fraction=0.05))
    expected = TxnTable(0)
    lid = ledger_id_for(name)
    replay_entries([Entry(Position(lid, e), p) for e, p in live], None,
                   lambda p, i, n, raw: expected.apply(tc.LogRef(p, i, n), tc.decode(raw)))
    return name, expected, live[-1][0] + 1


def test_compaction_commits_atomically_and_owners_adopt_it(spark: Any, tmp_path: Path) -> None:
    """One store, one job run per step: a coordinator's log and a running broker's snapshot ledger.

    Each ``compact.run`` compacts both logs at once (as in production), so each
    step is asserted for both owners: a run that dies before its commit point
    changes nothing; a committed one is read as base then tail by a restarted
    coordinator, and adopted by the running broker after its next snapshot and
    read back when it restarts; a second run starts from the bases in force.
    """
    url = f"file://{tmp_path}"
    name, expected, end = _txn_log(tmp_path)
    snap = "tbsnapshot/t/ns/tb-partition-0"
    broker = _Broker(url)
    try:
        broker.abort(300)
        by_log = {r.ledger: r for r in compact.run(spark, url, commit=False)}  # dies before its commit
        assert set(by_log) == {name, snap}
        assert by_log[name].generation == 0 and by_log[name].records_after < by_log[name].records_before
        assert asyncio.run(_manifest(url)) == {}

        by_log = {r.ledger: r for r in compact.run(spark, url)}
        report, tb = by_log[name], by_log[snap]
        assert report.generation == 0 and report.cut == end
        assert report.records_after < report.records_before / 5
        assert report.bytes_after < report.bytes_before / 5
        assert asyncio.run(_manifest(url))[name].records == report.records_after
        # The snapshot ledger keeps the newest index and its 58 segments; superseded indexes go.
        assert tb.generation == 0 and tb.records_after == 59 < tb.records_before
        assert tb.bytes_after < tb.bytes_before / 3

        async def recover_and_append() -> None:
            state, txlog = await _recover(url)
            assert state == _state(expected)
            assert txlog.adopted_base == 0
            left = await txlog._ledger.read(None, 10)
            assert all(e.position.entry_id >= report.cut for e in left)  # adopted: trimmed below the cut
            segments = sorted((tmp_path / "txnlog%2Fc1%2F0").glob("*.seg"))
            assert int(segments[0].stem) > 0  # whole segments below the cut are gone
            for k in range(50):  # the tail grows past the cut (each reservation supersedes the last)
                await txlog.append(tc.ReserveIds(10**6 + k))
            await txlog.close()
            state, txlog = await _recover(url)  # base, then the tail
            assert state == (_state(expected)[0], 10**6 + 49)
            await txlog.close()

        asyncio.run(recover_and_append())
        # The broker, while it runs: its next snapshot adopts the base (trims below the cut).
        broker.part.compaction.check_every_s = 0
        broker.abort(20)
        assert broker.part.compaction.generation == 0
        assert broker.part.snap.first_position().entry_id >= tb.cut  # type: ignore[union-attr]
        broker.restart()  # recovery reads base then ledger; the partition ledger is empty
        assert sorted(broker.part.tb.aborted) == sorted(broker.aborted)

        # A second compaction starts from the bases in force.
        by_log = {r.ledger: r for r in compact.run(spark, url)}
        second, tb2 = by_log[name], by_log[snap]
        assert second.compacted and tb2.compacted, (second, tb2)
        assert second.generation == 1 and second.records_before == report.records_after + 50
        assert second.records_after < second.records_before and second.bytes_after < second.bytes_before
        assert tb2.generation == 1 and tb2.records_after <= tb2.records_before

        async def recover_again() -> None:
            state, txlog = await _recover(url)
            assert state == (_state(expected)[0], 10**6 + 49) and txlog.adopted_base == 1
            await txlog.close()

        asyncio.run(recover_again())
        broker.restart()
        assert sorted(broker.part.tb.aborted) == sorted(broker.aborted)
        assert broker.part.compaction.generation == 1
    finally:
        broker.close()


async def _manifest(url: str) -> dict[str, compacted.BaseInfo]:
    factory = open_ledger_factory(url)
    try:
        return await compacted.read_manifest(factory)
    finally:
        await factory.close()
