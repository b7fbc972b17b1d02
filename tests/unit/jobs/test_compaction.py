"""Property: replaying a compacted log gives the owner the state replaying the original gives.

Pure (no Spark): the job's per-log step (:mod:`streamtx.jobs.compaction`) over
generated logs - batched and unbatched entries, ids with gaps, records the
owner's cursor already deleted, a second compaction on top of the first -
and the owners' replay of base then tail (:mod:`streamtx.batching.replay`).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streamtx.batching.codec import encode_batch
from streamtx.batching.replay import StateDeletions, replay_entries, replay_records
from streamtx.broker.producers import ProducerTable
from streamtx.broker.txnbuffer import snapshot as tbsnapshot
from streamtx.broker.txnbuffer.buffer import TxnBufferState
from streamtx.contracts.txnid import TxnId
from streamtx.cursor.state import CursorState
from streamtx.jobs import compaction
from streamtx.ledger.base import Entry, Position
from streamtx.ledger.memory import MemoryLedgerFactory
from streamtx.records import pendingack as pa
from streamtx.records import tbsnapshot as snapshot_codec
from streamtx.records import txnlog as tc
from streamtx.records.pendingack_state import LogSlot, SubscriptionState
from streamtx.records.txnstate import EndReason, TxnState
from streamtx.records.txntable import TxnTable

LID = 77
CID = 3


def _entries(records: list[bytes], rng: random.Random) -> list[tuple[int, list[bytes]]]:
    """Records grouped into entries (some unbatched) with entry ids that have gaps."""
    out, i, eid = [], 0, 0
    while i < len(records):
        n = 1 if rng.random() < 0.3 else rng.randint(1, 6)
        out.append((eid, records[i : i + n]))
        i += n
        eid += rng.choice((1, 1, 1, 2))  # fences and dropped duplicates take ids too
    return out


def _payload(recs: list[bytes], rng: random.Random) -> bytes:
    return recs[0] if len(recs) == 1 and rng.random() < 0.7 else encode_batch(recs)


def _tc_log(rng: random.Random) -> list[bytes]:
    n = rng.randint(1, 25)
    txns = [TxnId.of(CID, c) for c in range(n)]
    plans: list[list[tc.Record]] = [[tc.ReserveIds(n + 1)]]
    for t in txns:
        plan: list[tc.Record] = [tc.NewTxn(t, 1000, rng.randint(0, 10**6)),
                                 tc.AddPartitions(t, (f"p{rng.randint(0, 3)}",)),
                                 tc.AddSubscriptions(t, (tc.Subscription("in", "s"),))]
        roll = rng.random()
        if roll < 0.7:
            ending, final, reason = rng.choice([(TxnState.COMMITTING, TxnState.COMMITTED, EndReason.CLIENT),
                                                (TxnState.ABORTING, TxnState.ABORTED, EndReason.CLIENT),
                                                (TxnState.ABORTING, TxnState.TIMEOUT, EndReason.TIMEOUT)])
            plan += [tc.StatusChange(t, ending, reason, 5), tc.StatusChange(t, final, reason, 9)]
            if rng.random() < 0.2:
                plan.append(tc.StatusChange(t, final, reason, 9))  # a repeat
        elif roll < 0.85:
            plan.append(tc.StatusChange(t, TxnState.COMMITTING, EndReason.CLIENT, 5))
        plans.append(plan)
    if rng.random() < 0.5:
        plans.append([tc.ReserveIds(n + 1)])  # moved forward (the old one becomes garbage)
    out: list[bytes] = []
    while any(plans):
        plan = rng.choice([p for p in plans if p])
        out.append(tc.encode(plan.pop(0)))
    return out


def _tc_state(table: TxnTable) -> Any:
    return ({m.txn: (m.state, m.timeout_ms, m.opened_at_ms, list(m.partitions), list(m.subscriptions))
             for m in table.unfinished()}, table.next_counter)


def _tc_apply(table: TxnTable):  # type: ignore[no-untyped-def]
    return lambda p, i, n, raw: table.apply(tc.LogRef(p, i, n), tc.decode(raw))


def _delete_some_finished(entries: list[Entry], rng: random.Random) -> CursorState:
    """The owner's cursor: records of some finished transactions deleted, as the coordinator does."""
    table = TxnTable(CID)
    replay_entries(entries, None, _tc_apply(table))
    cursor = CursorState()
    for meta in table.finished:
        if rng.random() < 0.5:
            for ref in meta.refs:
                if ref.batch_size <= 1:
                    cursor.delete(ref.position.entry_id)
                else:
                    cursor.delete_batch_index(ref.position.entry_id, ref.batch_index, ref.batch_size)
    return cursor


@settings(max_examples=60, deadline=None)
@given(st.randoms(use_true_random=False))
def test_replaying_a_compacted_transaction_log_gives_the_same_coordinator_state(rng: random.Random) -> None:
    grouped = _entries(_tc_log(rng), rng)
    entries = [Entry(Position(LID, eid), _payload(recs, rng)) for eid, recs in grouped]
    deletions = StateDeletions(_delete_some_finished(entries, rng))
    original = TxnTable(CID)
    replay_entries(entries, deletions, _tc_apply(original))

    ids = [e.position.entry_id for e in entries] + [entries[-1].position.entry_id + 1]
    cut1 = rng.choice(ids)
    cut2 = rng.choice([i for i in ids if i >= cut1])
    below = [(e.position.entry_id, e.data) for e in entries if e.position.entry_id < cut1]
    kept1 = compaction.compact_txn_log(CID, LID, deletions, [], below)
    between = [(e.position.entry_id, e.data) for e in entries if cut1 <= e.position.entry_id < cut2]
    kept2 = compaction.compact_txn_log(CID, LID, deletions, kept1.records, between)  # a second run
    assert len(kept2.records) <= kept2.records_before
    for base, cut in ((kept1.records, cut1), (kept2.records, cut2)):
        table = TxnTable(CID)
        replay_records(base, LID, deletions, _tc_apply(table))
        replay_entries([e for e in entries if e.position.entry_id >= cut], deletions, _tc_apply(table))
        assert _tc_state(table) == _tc_state(original)


def _pa_log(rng: random.Random) -> tuple[list[bytes], list[pa.TxnId]]:
    txns = [pa.TxnId(1, i) for i in range(rng.randint(1, 20))]
    plans = []
    for n, t in enumerate(txns):
        plan: list[pa.Record] = [pa.PendingAck(t, (pa.MessageId(5, n * 10 + k),), False)
                                 for k in range(rng.randint(1, 3))]
        if rng.random() < 0.5:
            plan.append(pa.TxnMarker(pa.RecordKind.PREPARED, t))
        if rng.random() < 0.7:
            plan.append(pa.TxnMarker(rng.choice([pa.RecordKind.COMMITTED, pa.RecordKind.ABORTED]), t))
            if rng.random() < 0.3:
                plan.append(pa.PendingAck(t, (pa.MessageId(5, n * 10 + 9),), False))  # a late ack
        plans.append(plan)
    out: list[bytes] = []
    while any(plans):
        plan = rng.choice([p for p in plans if p])
        out.append(pa.encode(plan.pop(0)))
    return out, txns


def _pa_state(state: SubscriptionState, txns: list[pa.TxnId]) -> Any:
    return ({t: (sorted(a.ids), a.cumulative, a.phase) for t, a in state.txns.items()},
            {t: state.ended(t) for t in txns})


def _pa_apply(state: SubscriptionState):  # type: ignore[no-untyped-def]
    return lambda p, i, n, raw: state.apply(pa.decode(raw), LogSlot(p, i, n))


@settings(max_examples=60, deadline=None)
@given(st.randoms(use_true_random=False))
def test_replaying_a_compacted_pending_ack_log_gives_the_same_state(rng: random.Random) -> None:
    records, txns = _pa_log(rng)
    entries = [Entry(Position(LID, eid), _payload(recs, rng)) for eid, recs in _entries(records, rng)]
    original = SubscriptionState()
    replay_entries(entries, None, _pa_apply(original))
    ids = [e.position.entry_id for e in entries] + [entries[-1].position.entry_id + 1]
    cut = rng.choice(ids)
    kept = compaction.compact_pending_ack_log(
        LID, None, [], [(e.position.entry_id, e.data) for e in entries if e.position.entry_id < cut])
    state = SubscriptionState()
    replay_records(kept.records, LID, None, _pa_apply(state))
    replay_entries([e for e in entries if e.position.entry_id >= cut], None, _pa_apply(state))
    assert _pa_state(state, txns) == _pa_state(original, txns)


async def _snapshot_ledger(rng: random.Random) -> tuple[MemoryLedgerFactory, Any]:
    """A TB snapshot ledger written by the broker's own code: snapshots, some cut short, trims."""
    factory = MemoryLedgerFactory()
    ledger = await factory.open("tbsnapshot/t/p-partition-0")
    tb = TxnBufferState(segment_size=rng.randint(1, 4))
    for seq in range(rng.randint(1, 12)):
        for _ in range(rng.randint(0, 6)):
            n = len(tb.aborted)
            tb.add_aborted(TxnId.of(1, n), (9, 2 * n))
        if tb.sealed and rng.random() < 0.15:
            tb.trim(Position(9, tb.sealed[0].last_marker.entry_id + 1))  # the partition ledger trimmed
        segments, index = tbsnapshot.capture(tb, ProducerTable(), seq)
        if rng.random() < 0.2:  # a snapshot cut short: its segments written, its index not
            for seg in segments:
                if seg.ref is None:
                    seg.ref = await ledger.append(snapshot_codec.encode_segment(seg.segment_id, seg.ids))
            continue
        await tbsnapshot.write(ledger, segments, index)
    return factory, ledger


def _tb_state(loaded: tbsnapshot.Loaded | None) -> Any:
    if loaded is None:
        return None
    tb = TxnBufferState()
    tb.load_segments(loaded.segments, loaded.index.unsealed)
    return (loaded.position, loaded.index.sequence, dict(tb.aborted), tb.unsealed,
            [(s.segment_id, s.ids) for s in tb.sealed])


@settings(max_examples=60, deadline=None)
@given(st.randoms(use_true_random=False))
def test_recovering_from_a_compacted_snapshot_ledger_gives_the_same_buffer_state(rng: random.Random) -> None:
    async def go() -> None:
        factory, ledger = await _snapshot_ledger(rng)
        original = _tb_state(await tbsnapshot.load(ledger))
        entries = [(e.position.entry_id, e.data) for e in await ledger.read(None, 10_000)]
        ids = [e for e, _ in entries] + [ledger.next_entry_id(entries[-1][0]) if entries else 0]
        cut1 = rng.choice(ids)
        cut2 = rng.choice([i for i in ids if i >= cut1])
        lid = ledger.ledger_id
        kept1 = compaction.compact_snapshot_log(lid, [], [(e, p) for e, p in entries if e < cut1])
        between = [(e, p) for e, p in entries if cut1 <= e < cut2]
        kept2 = compaction.compact_snapshot_log(lid, kept1.records, between)
        assert len(kept2.records) <= kept2.records_before
        for kept, cut in ((kept1, cut1), (kept2, cut2)):
            if ledger.first_position() is not None and cut > ledger.first_position().entry_id:
                await ledger.trim(Position(lid, cut))  # adopted: only the base holds what is below the cut
            assert _tb_state(await tbsnapshot.load(ledger, kept.records)) == original
        await factory.close()

    asyncio.run(go())
