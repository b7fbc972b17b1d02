"""What the ``histograms`` job computes from decoded entries, per task and merged. Pure.

Per task (one split of one ledger), :func:`aggregate_task` turns the live
entries into ``(key, value)`` pairs that Spark adds up with ``reduceByKey``:

* ``("h", metric, labels, bucket)`` -> ``(count, sum)``: a histogram bucket.
  Buckets are the live metrics' own: PIP-160 records per entry and entry size
  (:mod:`streamtx.batching.metrics`; batched entries only, as the live
  histograms observe only batched flushes), the coordinator's latency buckets
  for transaction durations (:mod:`streamtx.records.txnstate`);
* ``("c", metric, labels)`` -> ``(count, 0)``: a counter (transactions per
  state, unbatched entries, messages and bytes per topic);
* ``("m", topic, minute_ms)`` -> ``(messages, bytes)``: per-minute traffic;
* ``("t", labels, txn)`` -> a partial transaction: a transaction whose open
  and end records fell in different splits is finished on the driver
  (:func:`merge_txn`, :func:`finish_txns`), in log order.

Entries count when they are live by the ledger rules (fences, duplicates,
trims: :mod:`.reader`); records a cursor deleted since still count: they
were written, and the histograms describe what was written.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from streamtx.batching.codec import MAGIC, decode_entry
from streamtx.batching.metrics import RECORDS_BUCKETS, SIZE_BUCKETS_BYTES
from streamtx.jobs.sources import PARTITION, PENDINGACK, TXNLOG, Task
from streamtx.records import partition as partition_codec
from streamtx.records import txnlog as tc_records
from streamtx.records.txnstate import TxnState, latency_buckets

Labels = tuple[tuple[str, str], ...]

BUCKETS: dict[str, tuple[float, ...]] = {
    "tc_log_records_per_entry": RECORDS_BUCKETS,
    "tc_log_entry_size_bytes": SIZE_BUCKETS_BYTES,
    "pending_ack_log_records_per_entry": RECORDS_BUCKETS,
    "pending_ack_log_entry_size_bytes": SIZE_BUCKETS_BYTES,
    "txn_duration_seconds": tuple(latency_buckets),
    "message_size_bytes": SIZE_BUCKETS_BYTES,
}
_outcome = {TxnState.COMMITTED: "committed", TxnState.ABORTED: "aborted", TxnState.TIMEOUT: "timeout"}
_final = frozenset(_outcome)
_ending = frozenset({TxnState.COMMITTING, TxnState.ABORTING})


class _Acc:
    def __init__(self) -> None:
        self.sums: defaultdict[tuple[Any, ...], list[float]] = defaultdict(lambda: [0, 0.0])

    def hist(self, metric: str, labels: Labels, value: float) -> None:
        cell = self.sums["h", metric, labels, bisect.bisect_left(BUCKETS[metric], value)]
        cell[0] += 1
        cell[1] += value

    def count(self, metric: str, labels: Labels, n: float = 1) -> None:
        self.sums["c", metric, labels][0] += n


def aggregate_task(task: Task, entries: Iterable[tuple[int, bytes]], since_ms: int | None,
                   until_ms: int | None) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """The pairs of one task (see the module docstring)."""
    ref = task.split.ledger
    acc = _Acc()
    if ref.kind == TXNLOG:
        yield from _txnlog(task, entries, acc, since_ms, until_ms)
    elif ref.kind == PENDINGACK:
        # No clock in pending-ack records: a file segment last written before the range is skipped.
        if since_ms is None or not task.split.mtime_ms or task.split.mtime_ms >= since_ms:
            _pendingack(ref.labels, entries, acc)
    elif ref.kind == PARTITION:
        _partition(ref.label("topic"), entries, acc, since_ms, until_ms)
    yield from acc.sums.items()


def _in_range(t: int | None, since_ms: int | None, until_ms: int | None) -> bool:
    return t is None or ((since_ms is None or t >= since_ms) and (until_ms is None or t < until_ms))


def _txnlog(task: Task, entries: Iterable[tuple[int, bytes]], acc: _Acc, since_ms: int | None,
            until_ms: int | None) -> Iterator[tuple[tuple[Any, ...], Any]]:
    labels = task.split.ledger.labels
    order = task.split.order
    txns: dict[tuple[int, int], list[Any]] = {}  # txn -> [opened_ms, final state, final at, ending seen]
    last_time: int | None = None
    txn_event = tc_records.txn_event
    for _, payload in entries:
        raws = decode_entry(payload)
        entry_time = None
        for raw in raws:
            event = txn_event(raw)
            if event is None:
                continue
            txn, at, state = event
            t = txns.setdefault(txn, [None, None, 0, False])
            if state is None:  # NEW: the transaction opened at ``at``
                if t[0] is None:
                    t[0] = at
            elif state in _final and t[1] is None:
                t[1], t[2] = state, at
            elif state in _ending:
                t[3] = True
            entry_time = at if entry_time is None else max(entry_time, at)
        last_time = entry_time if entry_time is not None else last_time
        if not _in_range(last_time, since_ms, until_ms):
            continue
        if payload[:2] == MAGIC:
            acc.hist("tc_log_records_per_entry", labels, len(raws))
            acc.hist("tc_log_entry_size_bytes", labels, len(payload))
        else:
            acc.count("log_unbatched_entries", (("log", "tc"), *labels))
    for txn, t in txns.items():
        if t[0] is not None and t[1] is not None:
            finish_txn(acc, labels, t, since_ms, until_ms)
        else:
            yield ("t", labels, txn), (order, *t)


def merge_txn(a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
    """Two partials of one transaction: the earlier split's open and end win (log order)."""
    lo, hi = (a, b) if a[0] <= b[0] else (b, a)
    final = lo if lo[2] is not None else hi
    return (lo[0], lo[1] if lo[1] is not None else hi[1], final[2], final[3], lo[4] or hi[4])


def finish_txn(acc: _Acc, labels: Labels, t: list[Any] | tuple[Any, ...], since_ms: int | None,
               until_ms: int | None) -> None:
    """Count one transaction (``[opened, final, final_at, ending]``) whose open is known."""
    opened, final, at, ending = t
    if opened is None or not _in_range(opened, since_ms, until_ms):
        return
    if final is not None:
        acc.hist("txn_duration_seconds", (*labels, ("outcome", _outcome[final])), max(at - opened, 0) / 1000)
        state = final
    else:
        state = TxnState.COMMITTING if ending else TxnState.OPEN  # ENDING: COMMITTING or ABORTING
    acc.count("txns", (*labels, ("state", "ENDING" if state is TxnState.COMMITTING else state.name)))


def finish_txns(partials: Iterable[tuple[tuple[Any, ...], tuple[Any, ...]]], since_ms: int | None,
                until_ms: int | None) -> dict[tuple[Any, ...], list[float]]:
    """Driver: the merged partials' counts and buckets."""
    acc = _Acc()
    for (_, labels, _), value in partials:
        finish_txn(acc, labels, value[1:], since_ms, until_ms)
    return dict(acc.sums)


def _pendingack(labels: Labels, entries: Iterable[tuple[int, bytes]], acc: _Acc) -> None:
    for _, payload in entries:
        if payload[:2] == MAGIC:
            acc.hist("pending_ack_log_records_per_entry", labels, len(decode_entry(payload)))
            acc.hist("pending_ack_log_entry_size_bytes", labels, len(payload))
        else:
            acc.count("log_unbatched_entries", (("log", "pending_ack"), *labels))


def _partition(topic: str, entries: Iterable[tuple[int, bytes]], acc: _Acc, since_ms: int | None,
               until_ms: int | None) -> None:
    labels = (("topic", topic),)
    for _, payload in entries:
        head = partition_codec.decode_header(payload)
        if head.kind is not partition_codec.EntryKind.BATCH or not _in_range(
            head.publish_time_ms, since_ms, until_ms
        ):
            continue
        sizes = [len(m.value) for m in partition_codec.decode_messages(payload, head)]
        minute = head.publish_time_ms // 60_000 * 60_000
        cell = acc.sums["m", topic, minute]
        cell[0] += len(sizes)
        cell[1] += sum(sizes)
        acc.count("partition_messages", labels, len(sizes))
        acc.count("partition_bytes", labels, sum(sizes))
        for size in sizes:
            acc.hist("message_size_bytes", labels, size)
