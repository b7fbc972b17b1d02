"""Exactly-once resharding, streamtx against Kafka, side by side (``make bench-peer``).

The same job twice (see ``bench/peer_kafka.py`` for the Kafka side and why it is
the same job): on streamtx, the demo's own supervisor and workers (file ledgers);
on the ``tansu`` Kafka-protocol broker with confluent-kafka's transactions. Two
modes each:

- **backlog** (throughput): ``--backlog`` records (1,000,000) are written first, then
  the two workers start; MB/s is the records' bytes over the time from the first
  transaction opened to the last commit;
- **live** (latency): ``--live-rate`` records/s for ``--live-duration`` s while the
  job runs; end-to-end latency is from a record's send time to a read-committed
  follower of the destination receiving it.

``--rounds`` (3) rounds, each running both modes on both systems, the systems
interleaved (which goes first alternates by round). Every round prints its figures
and the CPU seconds each process spent from the job's start (workers up, the group
formed) until the follower had seen every record, per record; the end prints the
medians. Each Kafka run gets a fresh tansu, as each streamtx run gets fresh services.
``--diagnose`` adds a read_uncommitted follower beside the read_committed one on the
Kafka side and prints both followers' p99 per tenth of the run and the LSO's lag
behind the high watermark over time (docs/benchmarks.md, "bench-peer").

The demo's checker runs on every output; any anomaly fails the bench. Last line
(medians of the rounds): ``bench peer: backlog_ratio=<…> streamtx_mb_per_s=<…>
kafka_mb_per_s=<…> live_p99_ms=<…> kafka_live_p99_ms=<…> streamtx_cpu_us_per_record=<…>
kafka_cpu_us_per_record=<…>`` (one line; the CPU figures are the backlog mode's).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import peer_kafka
import peer_report as pr
from streamtx.demo.checker import Report
from streamtx.demo.layout import RunConfig, worker_logs
from streamtx.demo.procs import child_env, cpu_seconds
from streamtx.demo.stats import percentile
from streamtx.demo.supervisor import Demo, Options

KAFKA = [sys.executable, str(Path(__file__).with_name("peer_kafka.py"))]


@dataclass
class Run:
    """One mode on one system."""

    system: str
    mode: str
    records: int
    seconds: float
    e2e_ms: list[float]
    report: Report
    usage: pr.Usage

    @property
    def mb_per_s(self) -> float:
        return self.records * 200 / 1e6 / self.seconds if self.seconds > 0 else 0.0

    @property
    def p99_ms(self) -> float:
        return percentile(self.e2e_ms, 0.99)

    def row(self) -> str:
        return (f"{self.system:<9} {self.mode:<8} {self.records:>8} {self.seconds:>8.1f} "
                f"{self.mb_per_s:>8.2f} {percentile(self.e2e_ms, 0.5):>9.0f} {self.p99_ms:>9.0f} "
                f"{self.usage.us_per_record():>9.1f}  {'OK' if self.report.ok else 'ANOMALIES'}")


run_head = (f"{'system':<9} {'mode':<8} {'records':>8} {'seconds':>8} {'MB/s':>8} "
            f"{'e2e p50':>9} {'e2e p99':>9} {'µs/rec':>9}")


class MeteredDemo(Demo):
    """The demo, with every process's CPU seconds noted once the workers are up (the job's
    start: the backlog is written, and the services' and workers' start-up is behind)."""

    cpu_start: dict[str, float]

    def cpu_now(self) -> dict[str, float]:
        # The probe follows the destination inside this process (the supervisor's).
        return {**{c.name: c.cpu_s() for c in [*self.services.values(), *self.workers]},
                "probe": cpu_seconds(os.getpid())}

    async def start_workers(self) -> None:
        await super().start_workers()
        self.cpu_start = self.cpu_now()


def streamtx_run(args: argparse.Namespace, *, backlog: int) -> Run:
    opts = Options(workers=args.workers, commit_interval_ms=args.commit_interval_ms, quiet=True,
                   backlog=backlog, rate=args.live_rate, duration_s=args.live_duration)
    demo = MeteredDemo(opts)
    try:
        result, report = asyncio.run(demo.run())
        seconds = result.seconds
        if backlog:
            # Timed as the Kafka side is: the demo's own figure runs from the workers' start
            # until the probe, polling every 0.5 s, saw the last record.
            first, last = peer_kafka.job_window(worker_logs(demo.run_dir))
            seconds = last - first
            print(f"streamtx backlog: job window {seconds:.1f} s, {result.seconds:.1f} s from the "
                  "workers' start until the probe had seen every record", flush=True)
    finally:
        demo.shutdown()
        shutil.rmtree(demo.run_dir, ignore_errors=True)
    # demo.cpu: taken once the probe had seen every record, before the workers stop.
    end = {("probe" if k == "supervisor" else k): v for k, v in demo.cpu.items() if k != "generator"}
    mode = "backlog" if backlog else "live"
    usage = pr.Usage("streamtx", mode, result.records, pr.cpu_delta(demo.cpu_start, end))
    return Run("streamtx", mode, result.records, seconds, list(result.e2e_ms), report, usage)


def _wait(what: str, done: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout_s:.0f} s")
        time.sleep(0.02)


def kafka_run(args: argparse.Namespace, *, backlog: int) -> Run:
    run_dir = Path(tempfile.mkdtemp(prefix="streamtx-peer-"))
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(role: str, *extra: str) -> subprocess.Popen[bytes]:
        procs.append(subprocess.Popen([*KAFKA, role, "--bootstrap", broker.bootstrap,
                                       "--run-dir", str(run_dir), *extra], env=child_env({})))
        return procs[-1]

    mode = "backlog" if backlog else "live"
    count = backlog or int(args.live_rate * args.live_duration)
    stats = ["--stats-ms", "1000"] if args.diagnose else []
    try:
        with peer_kafka.tansu() as broker:
            cfg = RunConfig.new(uuid.uuid4().hex[:6])
            cfg.save(run_dir)
            peer_kafka.create_topics(broker.bootstrap, cfg)
            gen_args = ["--count", str(count), "--seed", "1"]
            if backlog:
                spawn("generate", *gen_args).wait()
            workers = [spawn("worker", "--index", str(i), "--commit-interval-ms",
                             str(args.commit_interval_ms), *stats) for i in range(args.workers)]
            logs = [run_dir / f"kworker-{i}.jsonl" for i in range(args.workers)]
            _wait("the Kafka workers' consumer group",
                  lambda: peer_kafka.group_formed(logs, cfg.source_partitions), 60)
            followers = ["follower", *(["uncommitted"] if args.diagnose else [])]
            isolation = {"follower": "read_committed", "uncommitted": "read_uncommitted"}
            finishing = [spawn("follow", "--name", name, "--count", str(count), "--give-up-s",
                               str(args.give_up_s), "--isolation", isolation[name], *stats)
                         for name in followers]
            for name in followers:
                _wait(f"{name} ready", peer_kafka.follower_files(run_dir, name)[0].exists, 60)
            cpu = {"tansu": broker.cpu_s, **{f"kworker-{i}": (lambda w=w: cpu_seconds(w.pid))
                                            for i, w in enumerate(workers)}}
            before = {name: f() for name, f in cpu.items()}
            sampler = CpuSampler(broker.cpu_s) if args.diagnose else None
            (run_dir / "go").touch()
            started = time.monotonic()
            if not backlog:
                finishing.append(spawn("generate", *gen_args, "--rate", str(args.live_rate)))
            _wait("the follower's read", peer_kafka.follower_files(run_dir, "follower")[1].exists,
                  args.give_up_s + 60)
            seconds = time.monotonic() - started
            after = {name: f() for name, f in cpu.items()}
            if sampler is not None:
                print(f"kafka {mode} tansu: % of a core, second by second: {sampler.stop()}", flush=True)
            for p in finishing:
                p.wait()  # the followers (and the live generator) finish by themselves
            for w in workers:
                w.send_signal(signal.SIGTERM)
                w.wait(30)
        written = peer_kafka.load_written(run_dir)
        visible = peer_kafka.load_visible(run_dir, "follower")
        report = peer_kafka.verify(cfg, written, visible, logs)
        # A worker that died (a failed commit ends it, exit 3) or a follower read error is
        # shown, never folded into the figures silently.
        for i, w in enumerate(workers):
            if w.returncode not in (0, -signal.SIGTERM):
                print(f"kafka worker {i} exited with {w.returncode}", flush=True)
        for err in visible.errors[:5]:
            print(f"kafka follower read error: {err}", flush=True)
        txns = peer_kafka.outcomes(logs)
        print(f"kafka {mode}: {txns['committed']} transactions committed, {txns['aborted']} aborted, "
              "0 records skipped as aborted (nothing is filtered)", flush=True)
        if args.diagnose:
            diagnose(run_dir, followers, mode)
        if backlog:
            first, last = peer_kafka.job_window(logs)
            seconds = last - first
        cpu_s = {**pr.cpu_delta(before, after), "follower": visible.cpu_s}
        usage = pr.Usage("kafka", mode, len(written), cpu_s)
        return Run("kafka", mode, len(written), seconds, visible.e2e_ms, report, usage)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(run_dir, ignore_errors=True)


class CpuSampler:
    """A process's CPU use, sampled every second in a thread (``--diagnose``: does the broker's
    cost per second grow during a run at a steady offered rate?)."""

    def __init__(self, cpu_s: Callable[[], float]) -> None:
        self.cpu_s = cpu_s
        self.samples: list[float] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        last = self.cpu_s()
        while not self.done.wait(1.0):
            now = self.cpu_s()
            self.samples.append(now - last)
            last = now

    def stop(self) -> str:
        self.done.set()
        self.thread.join()
        return " ".join(f"{100 * x:.0f}" for x in self.samples)


def diagnose(run_dir: Path, followers: list[str], mode: str) -> None:
    """Each follower's p99 per tenth of the records (in send order), then the read_committed
    follower's LSO lag behind the high watermark and its own lag behind the LSO over time."""
    for name in followers:
        v = peer_kafka.load_visible(run_dir, name)
        tenths = " ".join(f"{x:.0f}" for x in pr.p99_by_tenth(v.sent_ms, v.e2e_ms))
        print(f"kafka {mode} {name}: p99 ms per tenth of the run: {tenths}", flush=True)
    workers = [p.stem.removesuffix("-stats") for p in sorted(run_dir.glob("kworker-*-stats.jsonl"))]
    for name in [*followers, *workers]:
        samples = peer_kafka.lso_lag(run_dir / f"{name}-stats.jsonl")
        if samples:
            t0 = samples[0][0]
            line = " ".join(f"{t - t0:.0f}s:{hi_ls}/{ls_app}" for t, hi_ls, ls_app in samples)
            print(f"kafka {mode} {name}: records hi-LSO/LSO-position over time: {line}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backlog", type=int, default=1_000_000,
                        help="records of the throughput mode (1000000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both modes on both systems (3)")
    parser.add_argument("--live-rate", type=float, default=1000.0,
                        help="records/s of the latency mode (1000)")
    parser.add_argument("--live-duration", type=float, default=60.0, help="seconds of the latency mode (60)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--commit-interval-ms", type=int, default=500)
    parser.add_argument("--give-up-s", type=float, default=600.0,
                        help="a Kafka run whose follower has not seen every record by then (600)")
    parser.add_argument("--diagnose", action="store_true",
                        help="Kafka side: a read_uncommitted follower too, p99 per tenth, LSO lag over time")
    parser.add_argument("--only", choices=("streamtx", "kafka"), help="run one system only (diagnosis)")
    args = parser.parse_args()
    runners = {"streamtx": streamtx_run, "kafka": kafka_run}
    systems = [s for s in runners if args.only in (None, s)]
    rounds: list[list[Run]] = []
    for i in range(args.rounds):
        order = systems if i % 2 == 0 else systems[::-1]  # interleaved, the first alternating
        runs = []
        print(f"\nround {i + 1} of {args.rounds}\n{run_head}", flush=True)
        for backlog in (args.backlog, 0):
            for system in order:
                runs.append(runners[system](args, backlog=backlog))
                print(runs[-1].row(), flush=True)
        print(pr.cpu_table([r.usage for r in runs]), flush=True)
        for r in runs:
            if not r.report.ok:
                print(f"\n{r.system} {r.mode}:\n{r.report.render()}", flush=True)
        rounds.append(runs)
    figures = [round_figures(runs) for runs in rounds]
    print(f"\n{pr.figures_head}")
    for i, f in enumerate(figures):
        print(f.row(f"{i + 1}"))
    median = pr.median_figures(figures)
    print(median.row("median"))
    print(f"\nmedian of {args.rounds} rounds, CPU per record of each process:")
    print(pr.cpu_table(pr.median_usages([[r.usage for r in runs] for runs in rounds])))
    print(pr.last_line(median), flush=True)
    if not all(r.report.ok for runs in rounds for r in runs):
        sys.exit(1)


def round_figures(runs: list[Run]) -> pr.Figures:
    """One round's figures (a system not run is NaN)."""
    def pick(system: str, mode: str) -> Run | None:
        return next((r for r in runs if (r.system, r.mode) == (system, mode)), None)

    def get(system: str, mode: str, f: Callable[[Run], float]) -> float:
        r = pick(system, mode)
        return f(r) if r is not None else float("nan")

    return pr.Figures.of_round(
        get("streamtx", "backlog", lambda r: r.mb_per_s), get("kafka", "backlog", lambda r: r.mb_per_s),
        get("streamtx", "live", lambda r: r.p99_ms), get("kafka", "live", lambda r: r.p99_ms),
        get("streamtx", "backlog", lambda r: r.usage.us_per_record()),
        get("kafka", "backlog", lambda r: r.usage.us_per_record()))


if __name__ == "__main__":
    main()
