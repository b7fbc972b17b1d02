"""Whole ``compact`` runs, in-process (the job's own code; Spark's map/collect done inline).

Overlapping runs (issue 22 item 3): a log another run holds is left alone; a
run that planned before another committed neither deletes that base (which an
owner adopted) nor commits its older cut. Retention (item 4): a transaction
finished within the coordinators' ``finished_retention_ms`` stays in the base.
Size (item 6): a log whose base would not be smaller is left as it is, and
each log's size before and after is reported.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from streamtx.batching import compacted
from streamtx.batching.settings import BatchingSettings
from streamtx.contracts.txnid import TxnId
from streamtx.coordinator.log import TransactionLog
from streamtx.jobs import compact, synth
from streamtx.jobs.compactlock import LogLocks
from streamtx.ledger import open_ledger_factory
from streamtx.records import txnlog as tc
from streamtx.records.txnstate import EndReason, TxnState
from streamtx.records.txntable import TxnTable

NAME = "txnlog/c1/0"


class _Rdd:
    def __init__(self, items: Iterable[Any]) -> None:
        self.items = list(items)

    def map(self, f: Callable[[Any], Any]) -> _Rdd:
        return _Rdd(f(x) for x in self.items)

    def flatMap(self, f: Callable[[Any], Iterable[Any]]) -> _Rdd:
        return _Rdd(y for x in self.items for y in f(x))

    def collect(self) -> list[Any]:
        return self.items


class _Context:
    defaultParallelism = 1

    def parallelize(self, items: Iterable[Any], n: int = 1) -> _Rdd:
        return _Rdd(items)


class InlineSpark:
    """Enough of a SparkSession for the jobs: every task runs here, in order."""

    sparkContext = _Context()


spark = InlineSpark()


def _txn_log(root: Path, n: int = 300) -> None:
    rng = random.Random(5)
    recs = synth.txn_log_records(0, n, rng, open_share=0.1)
    synth.write_ledger(str(root), NAME, list(synth.entries_of(recs, rng, max_batch=16)))


def _coordinator_log(url: str, *records: tc.Record, needed: bool = False) -> dict[TxnId, TxnState]:
    """Append ``records`` as coordinator 0 (after replaying; adopting a base when ``needed``); its states."""
    async def go() -> dict[TxnId, TxnState]:
        factory = open_ledger_factory(url)
        txlog = await TransactionLog.open(factory, cluster="c1", coordinator_id=0,
                                          batching=BatchingSettings())
        table = TxnTable(0)
        try:
            # As a coordinator would once its housekeeping deleted what its retention let go:
            # what it needs is what is not final, or finished within a minute.
            cutoff = int(time.time() * 1000) - 60_000
            await txlog.replay(table.apply, (lambda: [
                r for m in table.txns.values() if not m.state.is_final or m.ended_at_ms >= cutoff
                for r in m.refs
            ] + ([table.reserve_ref] if table.reserve_ref else [])) if needed else None)
            for record in records:
                table.apply(await txlog.append(record), record)
            return {t: m.state for t, m in table.txns.items()}
        finally:
            await txlog.close()
            await factory.close()

    return asyncio.run(go())


def _manifest(url: str) -> dict[str, compacted.BaseInfo]:
    return compact._read_manifest(url)


def _base_txns(url: str) -> set[TxnId]:
    async def go() -> set[TxnId]:
        factory = open_ledger_factory(url)
        try:
            loaded = await compacted.load_base(factory, NAME)
            assert loaded is not None
            out = set()
            for *_, raw in loaded[1]:
                record = tc.decode(raw)
                if isinstance(record, tc.NewTxn):
                    out.add(record.txn)
            return out
        finally:
            await factory.close()

    return asyncio.run(go())


def test_a_log_another_run_holds_is_left_alone(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    _txn_log(tmp_path)
    other = LogLocks(url)  # another run, planning now
    assert other.acquire(NAME)
    try:
        reports = compact.run(spark, url)
        (report,) = reports
        assert report.outcome == compact.HELD and not report.compacted
        assert "compact_bytes" not in compact.results_of(reports, 1.0).gauges  # not read: no size
        assert _manifest(url) == {} and not (tmp_path / "txnlog%2Fc1%2F0%2Fbase%2F0").exists()
    finally:
        other.close()
    (report,) = compact.run(spark, url)
    assert report.compacted and _manifest(url)[NAME].generation == 0


@pytest.mark.parametrize("phase", ["plan", "tasks"])
def test_a_run_planned_before_another_committed_deletes_and_commits_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, phase: str) -> None:
    """Without a lock (a store with none: Kafka without Redis): run 1 commits after run 2 planned
    (``plan``: before run 2 writes its base, ``tasks``: after). The base run 1 committed is never
    deleted, and run 2's commit (a compare-and-set on the manifest) does not go in."""
    url = f"file://{tmp_path}"
    _txn_log(tmp_path)

    class NoLocks(LogLocks):
        def acquire(self, name: str) -> bool:
            return True

        def held(self, name: str) -> bool:
            return True

    monkeypatch.setattr(compact, "LogLocks", NoLocks)
    late = TxnId.of(0, 5000)
    ran: list[compact.LogReport] = []

    def meanwhile(now: str) -> None:
        if now != phase:
            return
        # Run 2 planned its cut. A transaction opens after it; run 1 cuts later and commits;
        # the coordinator restarts and adopts run 1's base (its log trimmed below that cut).
        _coordinator_log(url, tc.ReserveIds(6000), tc.NewTxn(late, 3_600_000, int(time.time() * 1000)))
        ran.extend(compact.run(spark, url))
        _coordinator_log(url, needed=True)

    (second,) = compact.run(spark, url, on_phase=meanwhile)
    (first,) = ran
    assert first.compacted and first.generation == 0
    assert second.outcome == compact.MOVED and second.bytes_after == second.bytes_before
    assert _manifest(url)[NAME].cut == first.cut  # run 1's cut, not run 2's older one
    states = _coordinator_log(url)
    assert states[late] is TxnState.OPEN  # nothing lost; its id is not handed out again
    assert _coordinator_log(url, needed=True)[late] is TxnState.OPEN


def test_a_transaction_finished_within_retention_stays_in_the_base(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    _txn_log(tmp_path)
    now = int(time.time() * 1000)
    done = TxnId.of(0, 5000)
    _coordinator_log(url, tc.ReserveIds(6000), tc.NewTxn(done, 10_000, now),
                     tc.StatusChange(done, TxnState.COMMITTING, EndReason.CLIENT, now),
                     tc.StatusChange(done, TxnState.COMMITTED, EndReason.CLIENT, now))
    (report,) = compact.run(spark, url, finished_retention_ms=60_000)
    assert report.compacted and report.records_after < report.records_before / 3
    assert done in _base_txns(url)
    assert _coordinator_log(url, needed=True)[done] is TxnState.COMMITTED  # adopted, then read from the base
    assert _coordinator_log(url, needed=True)[done] is TxnState.COMMITTED


def test_a_log_whose_base_would_not_be_smaller_is_left_as_it_is(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    _coordinator_log(url, tc.ReserveIds(10))  # a few dozen bytes, all still needed
    reports = compact.run(spark, url)
    (report,) = reports
    assert report.outcome == compact.NOT_SMALLER and not report.compacted
    assert report.bytes_after == report.bytes_before > 0
    assert _manifest(url) == {}
    assert not [p for p in tmp_path.iterdir() if "base" in p.name]
    labels = (("ledger", NAME), ("kind", report.kind))
    gauges = compact.results_of(reports, 1.0).gauges["compact_bytes"]
    before, after = gauges[(*labels, ("phase", "before"))], gauges[(*labels, ("phase", "after"))]
    assert before == after == report.bytes_before


def test_a_run_that_lost_its_lease_before_the_commit_commits_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38 mutation 4: a run whose lease on a log ran out while its tasks wrote the base (a
    Redis lease not renewed in time: another run may hold the log now) leaves the log as it is.
    Committing would name a base planned while another run also plans from the same manifest."""
    url = f"file://{tmp_path}"
    _txn_log(tmp_path)
    lost = False

    class ExpiringLocks(LogLocks):
        def held(self, name: str) -> bool:
            return not lost and super().held(name)

    def meanwhile(now: str) -> None:
        nonlocal lost
        lost = lost or now == "tasks"  # the lease runs out after the base was written

    monkeypatch.setattr(compact, "LogLocks", ExpiringLocks)
    (report,) = compact.run(spark, url, on_phase=meanwhile)
    assert report.outcome == compact.LOST and not report.compacted
    assert _manifest(url) == {}
    lost = False
    (again,) = compact.run(spark, url)  # the next run, holding its lease, commits
    assert again.compacted and _manifest(url)[NAME].generation == again.generation
