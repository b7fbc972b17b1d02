"""The compact job on file ledgers, and the coordinator's log reading the base it wrote."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

from streamtx.batching import compacted
from streamtx.batching.replay import replay_entries
from streamtx.batching.settings import BatchingSettings
from streamtx.coordinator import records as tc
from streamtx.coordinator.log import TransactionLog
from streamtx.coordinator.table import TxnTable
from streamtx.jobs import compact, synth
from streamtx.ledger import Entry, Position, ledger_id_for, open_ledger_factory


def _state(table: TxnTable) -> Any:
    return ({m.txn: (m.state, list(m.partitions), list(m.subscriptions)) for m in table.unfinished()},
            table.next_counter)


async def _recover(url: str) -> tuple[Any, TransactionLog]:
    """What a restarted coordinator 0 of cluster c1 rebuilds (its log stays open: the caller closes it)."""
    factory = open_ledger_factory(url)
    txlog = await TransactionLog.open(factory, cluster="c1", coordinator_id=0, batching=BatchingSettings())
    table = TxnTable(0)
    await txlog.replay(table.apply)
    return _state(table), txlog


def test_compaction_commits_atomically_and_recovery_reads_base_then_tail(spark: Any, tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    name = "txnlog/c1/0"
    rng = random.Random(3)
    recs = synth.txn_log_records(0, 1200, rng, open_share=0.1)
    live = synth.write_ledger(str(tmp_path), name, list(synth.entries_of(recs, rng, max_batch=64)),
                              segment_bytes=50_000, chaos=synth.Chaos(duplicate=0.05, trim_fraction=0.05))
    expected = TxnTable(0)
    lid = ledger_id_for(name)
    replay_entries([Entry(Position(lid, e), p) for e, p in live], None,
                   lambda p, i, n, raw: expected.apply(tc.LogRef(p, i, n), tc.decode(raw)))

    # A run that dies before its commit point: a base is written, nothing names it.
    (dead,) = compact.run(spark, url, pattern="txnlog/*", commit=False)
    assert dead.generation == 0 and dead.records_after < dead.records_before
    assert asyncio.run(_manifest(url)) == {}

    (report,) = compact.run(spark, url, pattern="txnlog/*")
    assert report.generation == 0 and report.cut == live[-1][0] + 1
    assert report.records_after < report.records_before / 5
    assert report.bytes_after < report.bytes_before / 5
    assert asyncio.run(_manifest(url))[name].records == report.records_after

    async def recover_and_append() -> None:
        state, txlog = await _recover(url)
        assert state == _state(expected)
        assert txlog.adopted_base == 0
        left = await txlog._ledger.read(None, 10)
        assert all(e.position.entry_id >= report.cut for e in left)  # adopted: trimmed below the cut
        segments = sorted((tmp_path / "txnlog%2Fc1%2F0").glob("*.seg"))
        assert int(segments[0].stem) > 0  # whole segments below the cut are gone
        await txlog.append(tc.ReserveIds(10**6))  # the tail grows past the cut
        await txlog.close()
        state, txlog = await _recover(url)  # base, then the tail
        assert state == (_state(expected)[0], 10**6)
        await txlog.close()

    asyncio.run(recover_and_append())
    # A second compaction starts from the base in force.
    (second,) = compact.run(spark, url, pattern="txnlog/*")
    assert second.generation == 1 and second.records_before == report.records_after + 1
    assert second.records_after <= second.records_before

    async def recover_again() -> None:
        state, txlog = await _recover(url)
        assert state == (_state(expected)[0], 10**6) and txlog.adopted_base == 1
        await txlog.close()

    asyncio.run(recover_again())


async def _manifest(url: str) -> dict[str, compacted.BaseInfo]:
    factory = open_ledger_factory(url)
    try:
        return await compacted.read_manifest(factory)
    finally:
        await factory.close()
