"""The histograms job against ledgers the test wrote, checked against the records themselves."""

from __future__ import annotations

import bisect
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from streamtx.batching.codec import MAGIC, decode_entry
from streamtx.batching.metrics import RECORDS_BUCKETS, SIZE_BUCKETS_BYTES
from streamtx.jobs import histograms, synth
from streamtx.jobs.reader import live_entries, plan_tasks
from streamtx.jobs.sources import find_ledgers
from streamtx.records import txnlog as tc
from streamtx.records.txnstate import TxnState, latency_buckets


def _buckets(values: list[float], bounds: tuple[float, ...]) -> list[int]:
    counts = [0] * (len(bounds) + 1)
    for v in values:
        counts[bisect.bisect_left(bounds, v)] += 1
    return counts


def _workload(root: Path) -> dict[str, list[tuple[int, bytes]]]:
    rng = random.Random(7)
    chaos = synth.Chaos(duplicate=0.05, zombie=0.3, new_writer=0.02, trim_fraction=0.1)
    written = {}
    for cid in (0, 1):
        recs = synth.txn_log_records(cid, 700, rng)
        written[f"txnlog/c1/{cid}"] = synth.write_ledger(
            str(root), f"txnlog/c1/{cid}", list(synth.entries_of(recs, rng, max_batch=64)),
            segment_bytes=40_000, chaos=chaos, seed=cid)
    recs = synth.pending_ack_records(400, rng)
    written["pendingack/persistent://public/default/in/s"] = synth.write_ledger(
        str(root), "pendingack/persistent://public/default/in/s",
        list(synth.entries_of(recs, rng, max_batch=32, unbatched=0.2)),
        segment_bytes=30_000, chaos=chaos, seed=9)
    return written


def test_reader_sees_exactly_the_live_entries(spark: Any, tmp_path: Path) -> None:
    written = _workload(tmp_path)
    refs = find_ledgers(f"file://{tmp_path}")
    # 7 KB splits: segments are cut mid-entry, so tasks resynchronise on frame headers.
    tasks = plan_tasks(spark, refs, split_bytes=20_000)
    assert any(t.split.lo > 0 for t in tasks)
    got: dict[str, list[tuple[int, bytes]]] = {}
    for task in tasks:
        got.setdefault(task.split.ledger.name, []).extend(live_entries(task))
    assert {k: sorted(v) for k, v in got.items()} == written


def test_histograms_equal_the_written_records(spark: Any, tmp_path: Path) -> None:
    written = _workload(tmp_path / "ledgers")
    results = histograms.compute(spark, f"file://{tmp_path / 'ledgers'}", split_bytes=25_000)
    for cid in (0, 1):
        labels = (("cluster", "c1"), ("coordinator_id", str(cid)))
        entries = [p for _, p in written[f"txnlog/c1/{cid}"]]
        batched = [p for p in entries if p[:2] == MAGIC]
        h = results.histograms["tc_log_records_per_entry"][labels]
        assert h.counts == _buckets([len(decode_entry(p)) for p in batched], RECORDS_BUCKETS)
        assert h.total == sum(len(decode_entry(p)) for p in batched)
        assert results.histograms["tc_log_entry_size_bytes"][labels].counts == _buckets(
            [len(p) for p in batched], SIZE_BUCKETS_BYTES)
        # Durations and states, straight from the records.
        opened: dict[Any, int] = {}
        final: dict[Any, tuple[TxnState, int]] = {}
        for p in entries:
            for raw in decode_entry(p):
                r = tc.decode(raw)
                if isinstance(r, tc.NewTxn):
                    opened.setdefault(r.txn, r.opened_at_ms)
                elif isinstance(r, tc.StatusChange) and r.state.is_final:
                    final.setdefault(r.txn, (r.state, r.at_ms))
        for state, outcome in ((TxnState.COMMITTED, "committed"), (TxnState.ABORTED, "aborted"),
                               (TxnState.TIMEOUT, "timeout")):
            durations = [(at - opened[t]) / 1000 for t, (s, at) in final.items()
                         if s is state and t in opened]
            got = results.histograms["txn_duration_seconds"][(*labels, ("outcome", outcome))]
            assert got.counts == _buckets(durations, tuple(latency_buckets))
            assert results.gauges["txns"][(*labels, ("state", state.name))] == len(durations)
        still_open = [t for t in opened if t not in final]
        assert results.gauges["txns"].get((*labels, ("state", "OPEN")), 0) + results.gauges["txns"].get(
            (*labels, ("state", "ENDING")), 0) == len(still_open)
    pa_labels = (("topic", "persistent://public/default/in"), ("partition", "persistent://public/default/in"),
                 ("subscription", "s"))
    pa_batched = [p for _, p in written["pendingack/persistent://public/default/in/s"] if p[:2] == MAGIC]
    assert results.histograms["pending_ack_log_records_per_entry"][pa_labels].counts == _buckets(
        [len(decode_entry(p)) for p in pa_batched], RECORDS_BUCKETS)
    unbatched = Counter(p[:2] == MAGIC for _, p in written["pendingack/persistent://public/default/in/s"])
    assert unbatched[False] > 0
    assert results.gauges["log_unbatched_entries"][(("log", "pending_ack"), *pa_labels)] == unbatched[False]

    out = tmp_path / "out"
    histograms.write(results, str(out), None, None)
    prom = (out / "streamtx_spark_histograms.prom").read_text()
    assert 'streamtx_spark_tc_log_records_per_entry_bucket{cluster="c1",coordinator_id="0",le="+Inf"}' in prom
    assert "streamtx_spark_job_last_success_timestamp_seconds" in prom
    summary = json.loads((out / "summary.json").read_text())
    assert summary["histograms"]["txn_duration_seconds"]
    assert (out / "charts" / "tc_log_records_per_entry.png").stat().st_size > 1000
    table = pq.read_table(out / "histograms.parquet").to_pylist()
    assert sum(r["count"] for r in table if r["metric"] == "tc_log_records_per_entry") == sum(
        h.count for h in results.histograms["tc_log_records_per_entry"].values())


def test_time_range_and_pattern_filter(spark: Any, tmp_path: Path) -> None:
    written = _workload(tmp_path)
    since = 1_700_000_000_000 + 10_000
    results = histograms.compute(spark, f"file://{tmp_path}", pattern="txnlog/c1/1", since_ms=since)
    only = (("cluster", "c1"), ("coordinator_id", "1"))
    assert set(results.histograms["tc_log_records_per_entry"]) == {only}
    assert "pending_ack_log_records_per_entry" not in results.histograms
    opened = {}
    for _, p in written["txnlog/c1/1"]:
        for raw in decode_entry(p):
            r = tc.decode(raw)
            if isinstance(r, tc.NewTxn):
                opened.setdefault(r.txn, r.opened_at_ms)
    in_range = sum(t >= since for t in opened.values())
    assert 0 < in_range < len(opened)
    assert sum(results.gauges["txns"].values()) == in_range
