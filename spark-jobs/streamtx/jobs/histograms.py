"""The ``histograms`` job: what the ledgers say about batching, transactions and traffic.

Reads transaction logs, pending-ack logs and partition ledgers (see
:mod:`.reader` for the rules) and computes (:mod:`.aggregate`):

* the PIP-160 histograms of the transaction logs (per coordinator) and the
  pending-ack logs (per subscription): records per entry and entry size, with
  the live metrics' buckets;
* transaction duration, open -> committed / aborted / timed out, per
  coordinator and outcome; transactions per state;
* messages and bytes per topic per minute, and message size, from partition
  ledgers.

Writes, under ``--out``: Parquet tables (``histograms.parquet``,
``gauges.parquet``, ``partition_minutes.parquet``: aggregates, small, written
by the driver with pyarrow), ``summary.json``, ``charts/<histogram>.png`` and the
Prometheus textfile (``--prom``, default ``<out>/streamtx_spark_histograms.prom``;
names in :mod:`.outputs`), and pushes to ``--pushgateway`` when given.

Run: ``spark-submit spark-jobs/histograms.py --ledgers file:///data --out out/``,
``streamtx jobs histograms ...`` or ``make spark-histograms``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from streamtx.jobs import aggregate, outputs
from streamtx.jobs.common import add_input_args, names_of, time_ms
from streamtx.jobs.reader import live_entries, plan_tasks
from streamtx.jobs.session import get_session, missing_extra, slices
from streamtx.jobs.sources import PARTITION, PENDINGACK, TXNLOG, NoLedgersError, Task, require_ledgers

_kinds = frozenset({TXNLOG, PENDINGACK, PARTITION})


def _run_task(since_ms: int | None, until_ms: int | None):  # type: ignore[no-untyped-def]
    def run(tasks: Iterator[Task]) -> Iterator[tuple[Any, Any]]:
        cpu0 = time.process_time()
        for task in tasks:
            yield from aggregate.aggregate_task(task, live_entries(task), since_ms, until_ms)
        yield ("cpu",), (time.process_time() - cpu0, 0.0)  # the tasks' CPU time, for the report

    return run


def _merge(a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
    # Partial transactions are 5-tuples, sums are (count, total) pairs.
    return aggregate.merge_txn(a, b) if len(a) == 5 else (a[0] + b[0], a[1] + b[1])


def compute(spark: Any, url: str, *, pattern: str = "*", names: list[str] | None = None,
            since_ms: int | None = None, until_ms: int | None = None,
            split_bytes: int = 32 << 20, split_entries: int = 50_000,
            on_phase: Callable[[str], None] | None = None) -> outputs.Results:
    """Run the job's Spark part; the results, not yet written anywhere.

    NoLedgersError when ``url`` holds no ledger the job reads (nothing to report
    is not a success). ``on_phase`` is called with ``plan`` and ``tasks`` as each ends (the bench's profile).
    """
    mark = on_phase or (lambda _: None)
    started = time.monotonic()
    refs = require_ledgers(url, pattern, names, _kinds)
    tasks = plan_tasks(spark, refs, split_bytes=split_bytes, split_entries=split_entries)
    mark("plan")
    results = outputs.Results("histograms")
    if tasks:
        pairs = spark.sparkContext.parallelize(tasks, slices(spark, len(tasks))).mapPartitions(
            _run_task(since_ms, until_ms))
        merged = pairs.reduceByKey(_merge, numPartitions=spark.sparkContext.defaultParallelism).collect()
        collected = {k: v for k, v in merged if k[0] not in ("t", "cpu")}
        cpu_s = sum(v[0] for k, v in merged if k[0] == "cpu")
        partials = [(k, v) for k, v in merged if k[0] == "t"]
        for key, (n, total) in aggregate.finish_txns(partials, since_ms, until_ms).items():
            old = collected.get(key, (0, 0.0))
            collected[key] = (old[0] + n, old[1] + total)
    else:
        collected, cpu_s = {}, 0.0
    mark("tasks")
    minutes = []
    for key, (n, total) in collected.items():
        if key[0] == "h":
            _, metric, labels, bucket = key
            bounds = aggregate.BUCKETS[metric]
            h = results.histograms.setdefault(metric, {}).setdefault(
                labels, outputs.Hist(bounds, [0] * (len(bounds) + 1)))
            h.counts[bucket] += int(n)
            h.total += total
        elif key[0] == "c":
            _, metric, labels = key
            results.gauges.setdefault(metric, {})[labels] = float(n)
        else:
            _, topic, minute = key
            minutes.append((topic, minute, int(n), int(total)))
    _minute_gauges(results, minutes)
    results.extra.update({
        "ledgers": sorted(r.name for r in refs),
        "tasks": len(tasks),
        "since_ms": since_ms, "until_ms": until_ms,
        "partition_minutes": sorted(minutes),
        "seconds": round(time.monotonic() - started, 3),
        "task_cpu_seconds": round(cpu_s, 3),
    })
    return results


def _minute_gauges(results: outputs.Results, minutes: list[tuple[str, int, int, int]]) -> None:
    """Per topic: the minutes with traffic and the busiest minute's messages and bytes (the
    mean per minute is ``partition_messages / partition_active_minutes``), for the dashboard;
    the minute-by-minute table is ``partition_minutes.parquet``."""
    for topic, _, n, size in minutes:
        labels = (("topic", topic),)
        active = results.gauges.setdefault("partition_active_minutes", {})
        active[labels] = active.get(labels, 0.0) + 1
        for name, value in (("partition_minute_messages_max", n), ("partition_minute_bytes_max", size)):
            peak = results.gauges.setdefault(name, {})
            peak[labels] = max(peak.get(labels, 0.0), float(value))


def write(results: outputs.Results, out: str, prom: str | None, pushgateway: str | None) -> None:
    """Parquet tables, JSON summary, charts, the .prom file, the push."""
    os.makedirs(out, exist_ok=True)
    job = (("job", results.job),)
    results.gauges["job_last_success_timestamp_seconds"] = {job: time.time()}
    results.gauges["job_duration_seconds"] = {job: results.extra["seconds"]}
    hist_rows = [
        (metric, outputs.summary_labels(labels), i, float(le), n, h.total)
        for metric, series in results.histograms.items() for labels, h in series.items()
        for i, (le, n) in enumerate(zip((*h.bounds, float("inf")), h.counts, strict=True))
    ]
    gauge_rows = [(name, outputs.summary_labels(labels), v)
                  for name, series in results.gauges.items() for labels, v in series.items()]
    outputs.write_parquet(os.path.join(out, "histograms.parquet"), hist_rows,
                          ["metric", "labels", "bucket", "le", "count", "sum"])
    outputs.write_parquet(os.path.join(out, "gauges.parquet"), gauge_rows, ["metric", "labels", "value"])
    outputs.write_parquet(os.path.join(out, "partition_minutes.parquet"), results.extra["partition_minutes"],
                          ["topic", "minute_ms", "messages", "bytes"])
    outputs.write_json(results, os.path.join(out, "summary.json"))
    outputs.write_charts(results, os.path.join(out, "charts"))
    outputs.write_prom(results, prom or os.path.join(out, "streamtx_spark_histograms.prom"))
    if pushgateway:
        outputs.push(results, pushgateway)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="histograms", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_input_args(p)
    p.add_argument("--since", type=time_ms, default=None, help="from this time (ISO-8601 or epoch ms)")
    p.add_argument("--until", type=time_ms, default=None, help="before this time (ISO-8601 or epoch ms)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--prom", default=None,
                   help="the .prom file (default <out>/streamtx_spark_histograms.prom)")
    p.add_argument("--pushgateway", default=None, help="push the metrics to this Pushgateway (host:port)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if (missing := missing_extra()) is not None:
        print(f"histograms: {missing}", file=sys.stderr)
        return 2
    try:
        require_ledgers(args.ledgers, args.pattern, names_of(args), _kinds)  # before Spark's start
        spark = get_session(args.master, "streamtx-histograms")
        results = compute(spark, args.ledgers, pattern=args.pattern, names=names_of(args),
                          since_ms=args.since, until_ms=args.until, split_bytes=args.split_mb << 20)
    except NoLedgersError as exc:  # nothing written, no success pushed: a staleness alert still fires
        print(f"histograms: {exc}", file=sys.stderr)
        return 2
    write(results, args.out, args.prom, args.pushgateway)
    print(f"histograms: {len(results.extra['ledgers'])} ledgers, {results.extra['tasks']} tasks, "
          f"{results.extra['seconds']} s -> {args.out}")
    return 0
