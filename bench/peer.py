"""Exactly-once resharding, streamtx against Kafka, side by side in one run (``make bench-peer``).

The same job twice (see ``bench/peer_kafka.py`` for the Kafka side and why it is
the same job): on streamtx, the demo's own supervisor and workers (file ledgers);
on the ``tansu`` Kafka-protocol broker with confluent-kafka's transactions. Two
modes each:

- **backlog** (throughput): ``--backlog`` records are written first, then the two
  workers start; MB/s is the records' bytes over the time from the first
  transaction opened to the last commit;
- **live** (latency): ``--live-rate`` records/s for ``--live-duration`` s while the
  job runs; end-to-end latency is from a record's send time to a read-committed
  follower of the destination receiving it.

The demo's checker runs on every output; any anomaly fails the bench. Last line:
``bench peer: backlog_ratio=<…> streamtx_mb_per_s=<…> kafka_mb_per_s=<…> live_p99_ms=<…>
kafka_live_p99_ms=<…>`` (one line).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support; streamtx is installed

from tests.support.procs import stop, tansu_broker

import peer_kafka
from streamtx.demo.checker import Report
from streamtx.demo.layout import RunConfig
from streamtx.demo.procs import child_env
from streamtx.demo.stats import percentile
from streamtx.demo.supervisor import Demo, Options


@dataclass
class Run:
    """One mode on one system."""

    system: str
    mode: str
    records: int
    seconds: float
    e2e_ms: list[float]
    report: Report

    @property
    def mb_per_s(self) -> float:
        return self.records * 200 / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def row(self) -> str:
        p50, p99 = (percentile(self.e2e_ms, q) for q in (0.5, 0.99))
        return (f"{self.system:<9} {self.mode:<8} {self.records:>8} {self.seconds:>8.1f} "
                f"{self.mb_per_s:>8.2f} {p50:>9.0f} {p99:>9.0f}  {'OK' if self.report.ok else 'ANOMALIES'}")


def streamtx_run(args: argparse.Namespace, *, backlog: int) -> Run:
    opts = Options(workers=args.workers, commit_interval_ms=args.commit_interval_ms, quiet=True,
                   backlog=backlog, rate=args.live_rate, duration_s=args.live_duration)
    demo = Demo(opts)
    try:
        result, report = asyncio.run(demo.run())
    finally:
        demo.shutdown()
        shutil.rmtree(demo.run_dir, ignore_errors=True)
    return Run("streamtx", "backlog" if backlog else "live", result.records, result.seconds,
               list(result.e2e_ms), report)


def kafka_run(args: argparse.Namespace, bootstrap: str, *, backlog: int) -> Run:
    run_dir = Path(tempfile.mkdtemp(prefix="streamtx-peer-"))
    cfg = RunConfig.new(uuid.uuid4().hex[:6])
    cfg.save(run_dir)
    peer_kafka.create_topics(bootstrap, cfg)
    generated = peer_kafka.Generated()
    count = backlog or int(args.live_rate * args.live_duration)
    gen_args = {"count": count, "rate": None if backlog else args.live_rate, "seed": 1, "out": generated}
    if backlog:
        peer_kafka.generate(bootstrap, cfg, **gen_args)
    workers = [subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("peer_kafka.py")), "worker", "--bootstrap", bootstrap,
         "--run-dir", str(run_dir), "--index", str(i), "--commit-interval-ms", str(args.commit_interval_ms)],
        env=child_env({})) for i in range(args.workers)]
    logs = [run_dir / f"kworker-{i}.jsonl" for i in range(args.workers)]
    deadline = time.monotonic() + 60
    while not peer_kafka.group_formed(logs, cfg.source_partitions):
        if time.monotonic() > deadline:
            raise TimeoutError("the Kafka workers' consumer group did not form in 60 s")
        time.sleep(0.1)
    (run_dir / "go").touch()
    follower = peer_kafka.Follower(bootstrap, cfg)
    gen = None
    if not backlog:
        gen = threading.Thread(target=peer_kafka.generate, args=(bootstrap, cfg), kwargs=gen_args,
                               daemon=True)
        gen.start()
    started = time.monotonic()
    try:
        visible = follower.run(
            idle_s=3.0, until=lambda seen: seen >= count or time.monotonic() - started > args.give_up_s)
    finally:
        for w in workers:
            stop(w, timeout=30)
    if gen is not None:
        gen.join()
    report = peer_kafka.verify(cfg, generated.written, visible, logs)
    # A worker that died (a failed commit ends it, exit 3) or a follower read error is
    # shown, never folded into the figures silently.
    for i, w in enumerate(workers):
        if w.returncode not in (0, -signal.SIGTERM):
            print(f"kafka worker {i} exited with {w.returncode}", flush=True)
    for err in follower.errors[:5]:
        print(f"kafka follower read error: {err}", flush=True)
    txns = peer_kafka.outcomes(logs)
    print(f"kafka {'backlog' if backlog else 'live'}: {txns['committed']} transactions committed, "
          f"{txns['aborted']} aborted, 0 records skipped as aborted (nothing is filtered)", flush=True)
    first, last = peer_kafka.job_window(logs)
    seconds = last - first if backlog else time.monotonic() - started
    shutil.rmtree(run_dir, ignore_errors=True)
    return Run("kafka", "backlog" if backlog else "live", len(generated.written), seconds,
               visible.e2e_ms, report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backlog", type=int, default=300_000,
                        help="records of the throughput mode (300000)")
    parser.add_argument("--live-rate", type=float, default=1000.0,
                        help="records/s of the latency mode (1000)")
    parser.add_argument("--live-duration", type=float, default=60.0, help="seconds of the latency mode (60)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--commit-interval-ms", type=int, default=500)
    parser.add_argument("--give-up-s", type=float, default=180.0,
                        help="a Kafka run whose follower has not seen every record by then (180)")
    args = parser.parse_args()
    runs: list[Run] = []
    with tansu_broker() as bootstrap:
        for backlog in (args.backlog, 0):
            runs.append(streamtx_run(args, backlog=backlog))
            print(runs[-1].row(), flush=True)
            runs.append(kafka_run(args, bootstrap, backlog=backlog))
            print(runs[-1].row(), flush=True)
    print(f"\n{'system':<9} {'mode':<8} {'records':>8} {'seconds':>8} {'MB/s':>8} "
          f"{'e2e p50':>9} {'e2e p99':>9}")
    for r in runs:
        print(r.row())
    for r in runs:
        if not r.report.ok:
            print(f"\n{r.system} {r.mode}:\n{r.report.render()}")
    st_b, k_b, st_l, k_l = runs
    print(f"bench peer: backlog_ratio={st_b.mb_per_s / k_b.mb_per_s:.2f} "
          f"streamtx_mb_per_s={st_b.mb_per_s:.2f} kafka_mb_per_s={k_b.mb_per_s:.2f} "
          f"live_p99_ms={percentile(st_l.e2e_ms, 0.99):.0f} "
          f"kafka_live_p99_ms={percentile(k_l.e2e_ms, 0.99):.0f}", flush=True)
    if not all(r.report.ok for r in runs):
        sys.exit(1)


if __name__ == "__main__":
    main()
