"""Benchmark of the Spark jobs (``make bench-spark``).

1. Generates ``--records`` (10,000,000) transaction-log and pending-ack records
   in file ledgers (not timed; kept in ``--dir`` and reused by later runs with
   the same parameters): 60% in ``--coordinators`` transaction logs (each
   transaction opens, adds a partition and a subscription, decides and ends;
   2% stay open), 40% in ``--subscriptions`` pending-ack logs (acks, prepare,
   end), grouped into entries as the buffered writer does (batched entries of
   1..512 records, one in ten entries unbatched), 64 MiB segments.
2. Times, on a ``--master`` (``local[2]``) session started beforehand (its
   start is not timed): the ``histograms`` job (computed and written: Parquet,
   JSON, PNGs, .prom) and the ``compact`` job (bases written and committed).

The LAST line is the summary:
``bench spark: records=<n> histograms_s=<..> compact_s=<..> records_per_s=<..>``
where records_per_s is the records both jobs read over the time both took
(``2 * records / (histograms_s + compact_s)``). Before it, a profile per phase
(plan, Spark tasks, writing the outputs / commit): wall seconds, CPU seconds of
the whole process tree (driver, Spark JVM, Python workers, from /proc) and the
load average, because wall time on a shared machine is mostly waiting.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from streamtx.jobs import compact, histograms, synth
from streamtx.jobs.session import get_session


def _txn_log(args: tuple[str, int, int]) -> int:
    root, cid, records = args
    rng = random.Random(cid)
    recs = synth.txn_log_records(cid, records // 4, rng, open_share=0.02)[:records]  # cut: some stay open
    synth.write_ledger(root, f"txnlog/bench/{cid}", list(synth.entries_of(recs, rng)))
    return len(recs)


def _pending_ack_log(args: tuple[str, int, int]) -> int:
    root, sub, records = args
    rng = random.Random(1000 + sub)
    recs = synth.pending_ack_records(records // 2, rng, open_share=0.02)[:records]
    synth.write_ledger(root, f"pendingack/persistent://public/default/bench/sub-{sub}", list(
        synth.entries_of(recs, rng)))
    return len(recs)


_tick = os.sysconf("SC_CLK_TCK")


def tree_cpu() -> float:
    """CPU seconds used so far by this process and its descendants (the Spark JVM and its workers)."""
    stats: dict[int, list[str]] = {}
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    raw = f.read()
            except OSError:
                continue
            fields = raw[raw.rindex(")") + 2 :].split()  # state, ppid, ... (proc(5), from field 3)
            stats[int(d)] = fields
            kids.setdefault(int(fields[1]), []).append(int(d))
    total, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        if pid in stats:  # utime, stime, and the reaped children's cutime, cstime
            total += sum(int(x) for x in stats[pid][11:15])
        todo += kids.get(pid, [])
    return total / _tick


class Phases:
    """Wall and process-tree CPU seconds between marks, with the load average at each mark."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float, float]] = []
        self.reset()

    def reset(self) -> None:
        self._wall, self._cpu = time.monotonic(), tree_cpu()

    def of(self, job: str):  # type: ignore[no-untyped-def]
        return lambda phase: self.mark(f"{job} {phase}")

    def mark(self, name: str) -> None:
        wall, cpu = time.monotonic(), tree_cpu()
        self.rows.append((name, wall - self._wall, cpu - self._cpu, os.getloadavg()[0]))
        self._wall, self._cpu = wall, cpu

    def print(self) -> None:
        print(f"{'phase':<22} {'wall_s':>8} {'cpu_s':>8} {'load1':>6}")
        for name, wall, cpu, load in self.rows:
            print(f"{name:<22} {wall:>8.1f} {cpu:>8.1f} {load:>6.1f}")


def generate(root: Path, records: int, coordinators: int, subscriptions: int) -> int:
    """The ledgers (reused when a previous run made the same); the records written."""
    params = {"records": records, "coordinators": coordinators, "subscriptions": subscriptions, "v": 3}
    stamp = root / "params.json"
    if stamp.exists() and json.loads(stamp.read_text()).get("params") == params:
        return int(json.loads(stamp.read_text())["written"])
    shutil.rmtree(root, ignore_errors=True)
    (root / "ledgers").mkdir(parents=True)
    tc_each = records * 6 // 10 // coordinators
    pa_left = records - tc_each * coordinators
    pa_each = [pa_left // subscriptions + (s < pa_left % subscriptions) for s in range(subscriptions)]
    jobs = [(_txn_log, (str(root / "ledgers"), c, tc_each)) for c in range(coordinators)]
    jobs += [(_pending_ack_log, (str(root / "ledgers"), s, pa_each[s])) for s in range(subscriptions)]
    with ProcessPoolExecutor(max_workers=2) as pool:
        written = sum(f.result() for f in [pool.submit(fn, a) for fn, a in jobs])
    stamp.write_text(json.dumps({"params": params, "written": written}))
    return written


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=10_000_000)
    p.add_argument("--coordinators", type=int, default=4)
    p.add_argument("--subscriptions", type=int, default=8)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "streamtx-bench-spark"))
    args = p.parse_args()
    root = Path(args.dir)
    started = time.monotonic()
    n = generate(root, args.records, args.coordinators, args.subscriptions)
    gen_s = time.monotonic() - started
    print(f"load average before the timed part: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    spark = get_session(args.master, "streamtx-bench")
    url = f"file://{root / 'ledgers'}"
    # Every run compacts the same logs afresh: drop what an earlier run committed.
    for d in (root / "ledgers").iterdir():
        if "%2Fbase%2F" in d.name or d.name.startswith("compaction"):
            shutil.rmtree(d)
    size = sum(f.stat().st_size for f in (root / "ledgers").rglob("*.seg"))
    print(f"ledgers: {n} records, {size / 1e6:.0f} MB in {root / 'ledgers'} "
          f"(generated or reused in {gen_s:.1f} s, not timed)")

    phases = Phases()
    t0 = time.monotonic()
    results = histograms.compute(spark, url, on_phase=phases.of("histograms"))
    histograms.write(results, str(root / "out"), None, None)
    histograms_s = time.monotonic() - t0
    phases.mark("histograms outputs")
    entries = sum(h.count for h in results.histograms["tc_log_records_per_entry"].values())
    cpu = results.extra["task_cpu_seconds"]
    print(f"histograms: {histograms_s:.1f} s ({cpu:.1f} s of CPU in the tasks), "
          f"{results.extra['tasks']} tasks, {entries} batched txn-log entries, "
          f"charts in {root / 'out' / 'charts'}")

    t0 = time.monotonic()
    phases.reset()
    reports = compact.run(spark, url, on_phase=phases.of("compact"))
    compact_s = time.monotonic() - t0
    before = sum(r.records_before for r in reports)
    after = sum(r.records_after for r in reports)
    mb_before = sum(r.bytes_before for r in reports) / 1e6
    mb_after = sum(r.bytes_after for r in reports) / 1e6
    cpu = sum(r.cpu_s for r in reports)
    write_cpu = sum(r.write_cpu_s for r in reports)
    print(f"compact: {compact_s:.1f} s ({cpu:.1f} s of CPU in the tasks, {write_cpu:.1f} s of it "
          f"writing the bases), {len(reports)} logs, "
          f"records {before} -> {after}, "
          f"bytes {mb_before:.0f} MB -> {mb_after:.1f} MB")
    spark.stop()
    phases.print()
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    print(f"bench spark: records={n} histograms_s={histograms_s:.1f} compact_s={compact_s:.1f} "
          f"records_per_s={2 * n / (histograms_s + compact_s):.0f}")


if __name__ == "__main__":
    main()
