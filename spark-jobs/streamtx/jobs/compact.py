"""The ``compact`` job: smaller transaction, pending-ack and TB snapshot logs, adopted by their owners.

Design (the formats and the owners' side are in
:mod:`streamtx.batching.compacted`): the job never writes to a log it does
not own. For each log it

1. plans the log as the histograms job does (:mod:`.reader`: fences,
   duplicates and trims judged by the ledger layer's rule); the **cut** is the
   log's end as planned, and nothing below it ever changes;
2. in Spark tasks of about equal size (a few logs each), replays the base in force (if any)
   and the log's entries from that base's cut up to the new cut, through the
   owner's cursor (its last persisted state: deleted records stay deleted) and
   the owner's own state machine (:mod:`.compaction`), and writes the records
   still needed, with their original places, to a new ledger
   ``<log>/base/<generation>``, sealed;
3. on the driver, once every task has finished, appends the new manifest to
   ``compaction/manifest``: **the commit point**. A job that dies before it
   changes nothing a service reads (the half-written base is never named, and
   the next run deletes it); after it, the owners read base then tail when
   they recover, and adopt the base while they run (trim the log below the cut
   once they have checked the base holds every record their state still
   needs). Bases two generations old are deleted.

Overlapping runs: a run locks each log before it reads the manifest
(:mod:`.compactlock`) and leaves the logs another run holds; it never deletes
a base a manifest names; its commit is a compare-and-set (each log goes in
only if the manifest in force still names what the run planned from).

Reports per log: records and bytes before (live records below the cut,
including the old base) and after (the new base), and the outcome: a log
whose base would not be smaller is left as it is (after = before).

Transaction-buffer snapshot ledgers (``tbsnapshot/<partition>``) go the same
way: no cursor, the records kept are the newest complete snapshot as the
broker's recovery picks it; the broker reads base then ledger, and adopts in
:class:`streamtx.broker.txnbuffer.snapshot.Adoption` (module docstring there).

Run: ``spark-submit spark-jobs/compact.py --ledgers file:///data``,
``streamtx jobs compact ...`` or ``make spark-compact``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from streamtx.batching import compacted
from streamtx.batching.replay import StateDeletions
from streamtx.cursor.state import CursorState
from streamtx.errors import LedgerError
from streamtx.jobs import compaction, outputs
from streamtx.jobs.common import add_input_args, names_of
from streamtx.jobs.compactlock import LogLocks
from streamtx.jobs.reader import live_entries, plan_tasks
from streamtx.jobs.session import get_session, missing_extra, slices
from streamtx.jobs.sources import (
    PENDINGACK,
    SNAPSHOT,
    TXNLOG,
    LedgerRef,
    NoLedgersError,
    Task,
    find_ledgers,
    read_cursor,
    require_ledgers,
)
from streamtx.ledger import ledger_id_for, open_ledger_factory

_kinds = frozenset({TXNLOG, PENDINGACK, SNAPSHOT})
# The coordinator's default (STREAMTX_FINISHED_RETENTION_MS); a run is told the deployment's.
finished_retention_ms = int(os.environ.get("STREAMTX_FINISHED_RETENTION_MS", "60000"))
COMPACTED = "compacted"
NOT_SMALLER = "left: a base would not be smaller"
HELD = "left: another compaction run holds it"
MOVED = "left: the manifest changed since it was planned"
LOST = "left: its compaction lease was lost"


@dataclass
class LogReport:
    """One log's compaction."""

    ledger: str
    kind: str
    generation: int
    cut: int
    records_before: int
    records_after: int
    bytes_before: int
    bytes_after: int
    cpu_s: float = 0.0  # the task's CPU time (wall time on a busy machine says little)
    write_cpu_s: float = 0.0  # of which encoding and writing the base
    outcome: str = COMPACTED  # or why the log was left as it is (no base written, or none committed)

    @property
    def compacted(self) -> bool:
        return self.outcome == COMPACTED

    def left(self, why: str) -> None:
        """Not committed: the log stays as it was (its size after is its size before)."""
        self.outcome, self.records_after, self.bytes_after = why, self.records_before, self.bytes_before


@dataclass
class _Work:
    ref: LedgerRef
    tasks: list[Task]
    cut: int
    cursor: bytes | None
    old: compacted.BaseInfo | None
    generation: int
    finished_since_ms: int = 0  # transaction logs: keep what finished since (now - finished retention)


def compact_log(work: _Work) -> LogReport:
    """Executor: replay one log below its cut and write the new base ledger."""
    cpu0 = time.process_time()
    ref = work.ref
    deletions = StateDeletions(CursorState.decode(work.cursor)) if work.cursor else None
    base: list[compacted.BaseRecord] = []
    old_cut = 0
    if work.old is not None:
        loaded = asyncio.run(_load(ref.url, ref.name))
        if loaded is None or loaded[0].generation != work.old.generation:
            raise RuntimeError(f"{ref.name}: the manifest changed while the job ran")
        base, old_cut = loaded[1], loaded[0].cut
    entries = ((eid, p) for task in work.tasks for eid, p in live_entries(task) if old_cut <= eid < work.cut)
    lid = ledger_id_for(ref.name)
    if ref.kind == TXNLOG:
        kept = compaction.compact_txn_log(int(ref.label("coordinator_id")), lid, deletions, base, entries,
                                          finished_since_ms=work.finished_since_ms)
    elif ref.kind == SNAPSHOT:
        kept = compaction.compact_snapshot_log(lid, base, entries)
    else:
        kept = compaction.compact_pending_ack_log(lid, deletions, base, entries)
    kept.bytes_before += sum(len(r[3]) + 16 for r in base)
    cpu1 = time.process_time()
    data = compacted.encode_base(kept.records, work.cut)
    after = sum(map(len, data))
    if after >= kept.bytes_before:  # a small log's base (with its seal) can outweigh it
        left = LogReport(ref.name, ref.kind, work.generation, work.cut, kept.records_before,
                         len(kept.records), kept.bytes_before, after, time.process_time() - cpu0)
        left.left(NOT_SMALLER)
        return left
    written = asyncio.run(_write_base(ref.url, ref.name, work.generation, data))
    cpu2 = time.process_time()
    report = LogReport(ref.name, ref.kind, work.generation, work.cut, kept.records_before, len(kept.records),
                       kept.bytes_before, after, cpu2 - cpu0, cpu2 - cpu1)
    if not written:
        report.left(MOVED)
    return report


async def _load(url: str, name: str) -> tuple[compacted.BaseInfo, list[compacted.BaseRecord]] | None:
    factory = open_ledger_factory(url)
    try:
        return await compacted.load_base(factory, name)
    finally:
        await factory.close()


async def _write_base(url: str, log_name: str, generation: int, entries: list[bytes]) -> bool:
    """Write base ``generation`` of ``log_name``; False (nothing touched) when a manifest names it already."""
    factory = open_ledger_factory(url)
    name = compacted.base_ledger(log_name, generation)
    try:
        # A base of this generation is one a dead run left half written, unless a
        # manifest names it: then another run committed it (and its owner may have
        # adopted it), and it is never touched.
        named = (await compacted.read_manifest(factory)).get(log_name)
        if named is not None and named.generation >= generation:
            return False  # another compaction run committed meanwhile
        with contextlib.suppress(LedgerError):
            await factory.delete(name)
        ledger = await factory.open(name, writer=True)
        await asyncio.gather(*(ledger.append(e) for e in entries))  # group-committed, in order
        return True
    finally:
        await factory.close()


async def _commit(url: str, reports: list[LogReport], planned: dict[str, compacted.BaseInfo],
                  held: Callable[[str], bool]) -> None:
    """Driver: append the new manifest (the commit point), then drop what it superseded.

    A compare-and-set: the manifest ledger is opened as its writer (fencing any
    other run's commit in progress), and each log goes in only if the manifest
    in force still names what the run planned from and the run still holds the
    log's lock; the append fails if another run opened the manifest since.
    """
    factory = open_ledger_factory(url)
    try:
        ledger = await factory.open(compacted.manifest_ledger, writer=True)
        try:
            last = ledger.last_position()
            current = compacted.decode_manifest((await ledger.read(last, 1))[0].data) if last else {}
            new = dict(current)
            for r in (r for r in reports if r.compacted):
                if current.get(r.ledger) != planned.get(r.ledger):
                    r.left(MOVED)
                elif not held(r.ledger):
                    r.left(LOST)
                else:
                    new[r.ledger] = compacted.BaseInfo(r.generation, r.cut, r.records_after)
            committed = [r for r in reports if r.compacted]
            if committed:
                position = await ledger.append(compacted.encode_manifest(new))
                await ledger.trim(position)
        finally:
            await ledger.close()
        for r in committed:
            if r.generation >= 2:
                await factory.delete(compacted.base_ledger(r.ledger, r.generation - 2))
    finally:
        await factory.close()


def _read_manifest(url: str) -> dict[str, compacted.BaseInfo]:
    async def go() -> dict[str, compacted.BaseInfo]:
        factory = open_ledger_factory(url)
        try:
            return await compacted.read_manifest(factory)
        finally:
            await factory.close()

    return asyncio.run(go())


def plan(spark: Any, url: str, *, pattern: str = "*", names: list[str] | None = None,
         split_bytes: int = 32 << 20, locks: LogLocks | None = None, finished_since_ms: int = 0,
         held: list[LogReport] | None = None) -> tuple[list[_Work], dict[str, compacted.BaseInfo]]:
    """Driver: the logs to compact, each cut at its end as planned now.

    With ``locks``, only the logs this run could lock (before it reads the
    manifest); the others go to ``held`` as reports.
    """
    refs = find_ledgers(url, pattern, names, _kinds)
    if locks is not None:
        taken = [ref for ref in refs if locks.acquire(ref.name)]
        if held is not None:
            held += [LogReport(r.name, r.kind, -1, 0, 0, 0, 0, 0, outcome=HELD)
                     for r in refs if r not in taken]
        refs = taken
    manifest = _read_manifest(url)
    # The cursor is read before the log is planned: deletions only grow, so the
    # job can only keep too much, never too little.
    cursors = {ref.name: read_cursor(ref) for ref in refs}
    tasks = plan_tasks(spark, refs, split_bytes=split_bytes)
    by_log: dict[str, list[Task]] = {}
    for t in tasks:
        by_log.setdefault(t.split.ledger.name, []).append(t)
    work = []
    for ref in refs:
        ts = sorted(by_log.get(ref.name, []), key=lambda t: t.split.order)
        cut = max((t.end_id for t in ts), default=0)
        old = manifest.get(ref.name)
        if old is not None and cut <= old.cut:
            continue  # nothing new since the last compaction
        state = cursors[ref.name]
        work.append(_Work(ref, ts, cut, state.encode() if state else None, old,
                          old.generation + 1 if old else 0, finished_since_ms))
    return work, manifest


def _compact_all(work: list[_Work]) -> list[LogReport]:
    return [compact_log(w) for w in work]


def _balance(work: list[_Work], n: int) -> list[list[_Work]]:
    """``work`` in ``n`` tasks of about equal bytes (largest first into the lightest task).

    A task per log costs a Python worker round trip each: a store with a
    snapshot ledger per partition has many tiny logs beside a few big ones.
    """
    def weight(w: _Work) -> int:
        return 1 + sum(t.split.hi - t.split.lo for t in w.tasks)

    sizes = [0] * max(1, n)
    bins: list[list[_Work]] = [[] for _ in sizes]
    for w in sorted(work, key=weight, reverse=True):
        i = sizes.index(min(sizes))
        bins[i].append(w)
        sizes[i] += weight(w)
    return [b for b in bins if b]


def run(spark: Any, url: str, *, pattern: str = "*", names: list[str] | None = None,
        split_bytes: int = 32 << 20, commit: bool = True, redis_url: str | None = None,
        finished_retention_ms: int = finished_retention_ms,
        on_phase: Callable[[str], None] | None = None) -> list[LogReport]:
    """Lock, plan, write the bases on Spark, commit; the reports (``commit=False``: a run that dies there).

    One run per log at a time (:mod:`.compactlock`: a file lock, a Redis lease
    with ``redis_url``), and a compare-and-set at the commit either way.
    ``finished_retention_ms``: the coordinators' (a transaction finished within
    it is kept). ``on_phase`` is called with ``plan``, ``tasks`` and ``commit``
    as each ends (the bench's profile).
    """
    mark = on_phase or (lambda _: None)
    locks = LogLocks(url, redis_url=redis_url)
    try:
        held: list[LogReport] = []
        since = int(time.time() * 1000) - finished_retention_ms
        work, manifest = plan(spark, url, pattern=pattern, names=names, split_bytes=split_bytes, locks=locks,
                              finished_since_ms=since, held=held)
        mark("plan")
        if not work:
            return held
        bins = _balance(work, slices(spark, len(work)))
        sc = spark.sparkContext
        reports: list[LogReport] = sc.parallelize(bins, len(bins)).flatMap(_compact_all).collect()
        mark("tasks")
        if commit:
            asyncio.run(_commit(url, reports, manifest, locks.held))
        mark("commit")
        return reports + held
    finally:
        locks.close()


def results_of(reports: list[LogReport], seconds: float) -> outputs.Results:
    res = outputs.Results("compact")
    for r in reports:
        if r.outcome == HELD:
            continue  # another run's: not read, so no size to report
        for phase, recs, size in (("before", r.records_before, r.bytes_before),
                                  ("after", r.records_after, r.bytes_after)):
            labels = (("ledger", r.ledger), ("kind", r.kind), ("phase", phase))
            res.gauges.setdefault("compact_records", {})[labels] = recs
            res.gauges.setdefault("compact_bytes", {})[labels] = size
    job = (("job", "compact"),)
    res.gauges["job_last_success_timestamp_seconds"] = {job: time.time()}
    res.gauges["job_duration_seconds"] = {job: seconds}
    res.gauges["job_records_read"] = {job: sum(r.records_before for r in reports)}
    res.extra["logs"] = [asdict(r) for r in reports]
    return res


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="compact", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_input_args(p)
    p.add_argument("--out", default=None, help="write report.json and streamtx_spark_compact.prom here")
    p.add_argument("--prom", default=None, help="the .prom file (default <out>/streamtx_spark_compact.prom)")
    p.add_argument("--pushgateway", default=None, help="push the report's metrics to this Pushgateway")
    p.add_argument("--redis-url", default=os.environ.get("STREAMTX_REDIS_URL") or None,
                   help="take each log's compaction lease in this Redis (default $STREAMTX_REDIS_URL)")
    p.add_argument("--finished-retention-ms", type=int, default=finished_retention_ms,
                   help="the coordinators' finished_retention_ms: transactions finished within it are kept "
                        "(default $STREAMTX_FINISHED_RETENTION_MS or 60000)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if (missing := missing_extra()) is not None:
        print(f"compact: {missing}", file=sys.stderr)
        return 2
    try:  # nothing written, no success pushed: a staleness alert still fires
        require_ledgers(args.ledgers, args.pattern, names_of(args), _kinds)
    except NoLedgersError as exc:
        print(f"compact: {exc}", file=sys.stderr)
        return 2
    spark = get_session(args.master, "streamtx-compact")
    started = time.monotonic()
    reports = run(spark, args.ledgers, pattern=args.pattern, names=names_of(args),
                  split_bytes=args.split_mb << 20, redis_url=args.redis_url,
                  finished_retention_ms=args.finished_retention_ms)
    res = results_of(reports, time.monotonic() - started)
    print(f"{'ledger':<60} {'records':>21} {'bytes':>25}  outcome")
    for r in reports:
        print(f"{r.ledger:<60} {r.records_before:>10}->{r.records_after:<10} "
              f"{r.bytes_before:>12}->{r.bytes_after:<12}  {r.outcome}")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "report.json"), "w") as f:
            json.dump(outputs.summary(res), f, indent=2, sort_keys=True)
    if args.prom or args.out:
        outputs.write_prom(res, args.prom or os.path.join(args.out, "streamtx_spark_compact.prom"))
    if args.pushgateway:
        outputs.push(res, args.pushgateway)
    done = [r for r in reports if r.compacted]
    print(f"compact: {len(done)} of {len(reports)} logs compacted "
          f"({sum(r.bytes_before for r in done)} -> {sum(r.bytes_after for r in done)} bytes) "
          f"in {time.monotonic() - started:.1f} s")
    return 0

