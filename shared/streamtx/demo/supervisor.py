"""``streamtx demo reshard``: run the suite, the workload, the chaos; measure; check.

It starts the services (file ledgers in a temporary run directory; with ``--url``
it uses a running deployment instead, replicas and all, and starts none), creates the
topics, starts the workers and the generator as processes, follows the
destination with a probe subscription to measure end-to-end latency, and (with
``--chaos``) kill -9s and restarts a random process every ``--kill-every``
seconds; ``--zombie`` pauses a worker (SIGSTOP) past its transaction timeout
and resumes it. When the generator is done and the job has caught up, it stops
the workers, runs the checker and prints the table and the summary line.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
from tqdm import tqdm

from streamtx.demo.checker import Report
from streamtx.demo.layout import RunConfig, read_jsonl, worker_log
from streamtx.demo.procs import Child, child_env, cpu_seconds, free_port, redis_server
from streamtx.demo.recovery import Kill, RecoveryReport, analyse, kind_of, kinds, whole_since
from streamtx.demo.recovery import render as render_recovery
from streamtx.demo.replicas import front_urls, service_specs
from streamtx.demo.rest import Rest
from streamtx.demo.stats import DemoResult, render_table, summary_line
from streamtx.demo.verify import load_commits, load_workers, load_written, verify
from streamtx.errors import StreamtxError

services = ("broker", "pendingack", "coordinator")  # start order: participants first
workers_ready_timeout_s = 30.0  # the generator starts once the workers are up, or after this
recovery_wait_s = 120.0  # the recovery plan: wait this long for the job to be whole again, then go on
recovery_settle_s = 1.0  # ... and this long after it is, before the next kill


@dataclass
class Options:
    duration_s: float = 30.0
    rate: float = 2_000.0
    workers: int = 2
    commit_interval_ms: int = 500
    txn_timeout_ms: int = 10_000
    chaos: bool = False
    kill_every_s: float = 5.0
    zombie: bool = False
    run_dir: Path | None = None
    keep: bool = False
    drain_timeout_s: float = 60.0  # after the generator stopped: give up when no progress this long
    seed: int = 1
    ack_timeout_ms: int = 5_000
    quiet: bool = False
    users: int = 100_000  # user ids are drawn from [0, users)
    assignment: str = "failover"  # "shared": the naive job on one Shared subscription
    spare: tuple[str, ...] = ()  # processes chaos never kills
    backlog: int = 0  # > 0: write this many records first, then start the workers (throughput mode)
    loop: str = "uvloop"  # the workers' and the generator's event loop (procs.LOOPS)
    fetch_max: int = 10_000  # records per worker fetch
    service_env: dict[str, str] = field(default_factory=dict)  # more STREAMTX_* for the services
    url: str | None = None  # a running deployment (any service's URL): start no services, kill none
    # > 0: the recovery plan instead of random chaos: kill -9 each kind of process this many
    # times, one kill at a time, the next once the job is whole again; then stop the load.
    kills_per_kind: int = 0
    # > 1: that many brokers, pending-ack stores and coordinators (``broker-0`` ...), leased over
    # a redis-server the demo starts; callers are given replica 0's URLs (demo/replicas.py).
    replicas: int = 1
    lease_ttl_ms: int | None = None  # the replicas' lease TTL (None: the services' default)

    def __post_init__(self) -> None:
        # No worker would never process a record: the demo waited for them for good.
        if self.workers < 1:
            raise ValueError(f"--workers must be at least 1, not {self.workers}")
        if self.rate < 0:
            raise ValueError(f"--rate must be 0 or more, not {self.rate:g}")
        if self.replicas < 1:
            raise ValueError(f"--replicas must be at least 1, not {self.replicas}")


@dataclass
class Probe:
    """Follows the destination: end-to-end latency and what became visible."""

    e2e_ms: list[float] = field(default_factory=list)
    seen: set[tuple[int, int]] = field(default_factory=set)
    stopping: bool = False


@dataclass
class GeneratorStatus:
    cpu_s: float = 0.0
    written: int = 0
    bytes: int = 0
    done: bool = False


class Demo:
    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.rng = random.Random(opts.seed)
        self.run_dir = opts.run_dir or Path(tempfile.mkdtemp(prefix="streamtx-demo-"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "logs").mkdir(exist_ok=True)
        self.cfg = RunConfig.new(uuid.uuid4().hex[:6], user_space=opts.users)
        self.cfg.save(self.run_dir)
        self.redis_port = free_port() if opts.replicas > 1 and opts.url is None else None
        self.redis: subprocess.Popen[bytes] | None = None
        specs = [] if opts.url is not None else service_specs(
            services, opts.replicas, free_port, lease_ttl_ms=opts.lease_ttl_ms,
            redis_url=f"redis://127.0.0.1:{self.redis_port}/0" if self.redis_port else None)
        self.urls = deployment_urls(opts.url) if opts.url is not None else front_urls(specs)
        # Worker i begins its transactions at coordinator replica i (a balancing front would
        # spread them too): a replica begins on its own ids, so with every begin at replica 0
        # the others would own ids no transaction uses and their kills would prove nothing.
        coordinators = [s.url for s in specs if s.kind == "coordinator"] or [self.urls["coordinator"]]
        env = {
            "STREAMTX_LEDGER_URL": f"file://{self.run_dir / 'ledgers'}",
            "STREAMTX_CLUSTER": "demo",
            "STREAMTX_ACK_TIMEOUT_MS": str(opts.ack_timeout_ms),
            "STREAMTX_TIMEOUT_CHECK_INTERVAL_MS": "200",
            # Acks that reach the pending-ack store after the coordinator ended
            # their transaction (a zombie worker resumed while the broker was
            # down) hold their messages until the stuck-txn checkers ask the
            # coordinator. Their defaults suit 60 s transactions; the workers' are
            # shorter, and a hold of minutes reads as lost records here.
            "STREAMTX_STUCK_TXN_AFTER_S": str(max(5.0, 3 * opts.txn_timeout_ms / 1000)),
            "STREAMTX_STUCK_TXN_INTERVAL_S": "2",
            **{f"STREAMTX_{n.upper()}_URL": u for n, u in self.urls.items()},
            **opts.service_env,
        }
        self.services = {
            s.name: Child(s.name, f"streamtx.{s.kind}", [], {**env, **s.env},
                          self.run_dir / "logs" / f"{s.name}.log", ready_url=s.url)
            for s in specs
        }
        self.workers = [
            Child(f"worker-{i}", "streamtx.demo.worker", [
                "--run-dir", str(self.run_dir), "--coordinator", coordinators[i % len(coordinators)],
                "--broker", self.urls["broker"], "--index", str(i), "--workers", str(opts.workers),
                "--commit-interval-ms", str(opts.commit_interval_ms),
                "--txn-timeout-ms", str(opts.txn_timeout_ms), "--assignment", opts.assignment,
                "--loop", opts.loop, "--fetch-max", str(opts.fetch_max),
            ], {}, self.run_dir / "logs" / f"worker-{i}.log")
            for i in range(opts.workers)
        ]
        self.kills: list[str] = []
        self.kill_events: list[KillEvent] = []  # the same kills, timed
        self.recovery: RecoveryReport | None = None
        self.zombie_txns: list[str] = []  # transactions open while their worker was paused
        self.paused: set[str] = set()  # workers under SIGSTOP
        self.finishing = False  # workers being stopped: do not restart them
        self.cpu: dict[str, float] = {}
        self.caught_up = True  # the job processed everything before it stalled (if it did)
        self.probe = Probe()
        self.gen = GeneratorStatus()
        self.generators: list[subprocess.Popen[bytes]] = []  # stopped by shutdown if still running
        self.lock = asyncio.Lock()  # one chaos action at a time
        self.watching: set[asyncio.Task[None]] = set()  # restarted workers, until they are up
        (self.run_dir / "services.json").write_text(json.dumps(self.urls))

    def say(self, text: str) -> None:
        if not self.opts.quiet:
            tqdm.write(text)

    # -- set-up ---------------------------------------------------------------------
    async def setup(self, rest: Rest) -> None:
        if self.redis_port is not None:
            self.redis = await asyncio.to_thread(redis_server, self.redis_port)
        for child in self.services.values():
            await asyncio.to_thread(child.start)
        cfg = self.cfg
        await rest.create_topic(cfg.source_topic, cfg.source_partitions)
        await rest.create_topic(cfg.dest_topic, cfg.dest_partitions)
        await rest.create_topic(cfg.progress_topic, cfg.source_partitions)
        await rest.subscribe(cfg.dest_topic, "e2e-probe", "earliest")

    async def start_workers(self) -> None:
        offsets = [w.log_path.stat().st_size if w.log_path.exists() else 0 for w in self.workers]
        for w in self.workers:
            w.start()
        # The load starts once the job is up (each worker says what it owns): end-to-end
        # latency measures the pipeline, not how long the workers take to start.
        deadline = time.monotonic() + workers_ready_timeout_s
        waiting = list(zip(self.workers, offsets, strict=True))
        while waiting and time.monotonic() < deadline:
            waiting = [(w, off) for w, off in waiting if w.alive() and not _said_owns(w, off)]
            if waiting:
                await asyncio.sleep(0.05)

    # -- background tasks -----------------------------------------------------------
    async def follow(self, rest: Rest) -> None:
        # The ack of one batch runs while the next is fetched: a commit makes thousands
        # of records visible at once, and a fetch-ack-fetch loop would add its own
        # round trips to the latency it measures.
        acking: asyncio.Task[None] | None = None
        while not self.probe.stopping:
            try:
                # Values alone (and where each partition ends): the probe shares the two cores
                # with the job it measures, so it builds no message object per record.
                got = await rest.fetch_values(self.cfg.dest_topic, "e2e-probe", "probe", 10_000, 200)
            except StreamtxError:
                await asyncio.sleep(0.2)
                continue
            now_ms = time.time() * 1000
            seen, e2e = self.probe.seen, self.probe.e2e_ms
            for value in got.values:
                # Three fields by orjson, not the worker's full decode (the checker decodes
                # fully afterwards).
                d = orjson.loads(value)
                ident = (d["p"], d["s"])
                if ident not in seen:
                    seen.add(ident)
                    e2e.append(now_ms - d["t"])
            if got.last_ids:
                if acking is not None:
                    await acking  # one ack in flight: they stay in order
                # The probe is the subscription's only consumer and reads each partition in
                # order: a cumulative ack per partition covers all it was handed.
                acking = asyncio.create_task(self._probe_ack(rest, list(got.last_ids.values())))
        if acking is not None:
            await acking

    async def _probe_ack(self, rest: Rest, ids: list[str]) -> None:
        with contextlib.suppress(StreamtxError):
            await rest.ack(self.cfg.dest_topic, "e2e-probe", ids, cumulative=True)

    async def babysit(self) -> None:
        """Restart a worker that exited by itself (it does when it cannot learn an outcome)."""
        while not self.finishing:
            async with self.lock:
                for w in self.workers:
                    if self.finishing:
                        break
                    if w.proc is not None and not w.alive():
                        self.say(f"demo: {w.name} exited with {w.returncode()}; restarting")
                        w.start()
            await asyncio.sleep(0.5)

    async def chaos(self) -> None:
        """Every ``kill_every`` seconds (on a fixed schedule), kill -9 one random process and
        restart it; a paused (zombie) worker is left alone."""
        targets = self.targets()
        next_at = time.monotonic()
        while not self.gen.done:
            next_at += self.opts.kill_every_s
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if self.gen.done:
                break
            async with self.lock:
                await self.kill_and_restart(self.rng.choice([t for t in targets if t not in self.paused]))

    async def kill_and_restart(self, name: str) -> KillEvent:
        """kill -9 the process ``name`` and start it again (the caller holds the lock); the
        event notes when it was back: a service answering ``/readyz``, a worker saying what
        it owns (watched in the background)."""
        child = self.services.get(name) or next(w for w in self.workers if w.name == name)
        offset = child.log_path.stat().st_size if child.log_path.exists() else 0
        event = KillEvent(name, time.time())
        child.kill9()
        self.kills.append(name)
        self.kill_events.append(event)
        self.say(f"demo: kill -9 {name} (kill {len(self.kills)})")
        await asyncio.to_thread(child.start)
        if child.ready_url:
            event.ready_at = time.time()
        else:
            self.watching.add(asyncio.create_task(self._worker_ready(child, offset, event)))
        return event

    async def _worker_ready(self, w: Child, offset: int, event: KillEvent) -> None:
        deadline = time.monotonic() + recovery_wait_s
        while w.alive() and time.monotonic() < deadline:
            if _said_owns(w, offset):
                event.ready_at = time.time()
                return
            await asyncio.sleep(0.02)

    def targets(self) -> list[str]:
        return [t for t in (*self.services, *(w.name for w in self.workers)) if t not in self.opts.spare]

    async def recovery_plan(self, stop_load: Callable[[], None]) -> None:
        """Kill -9 each kind of process ``kills_per_kind`` times, kinds in turn and one kill at a
        time: the next only once the job is whole again (every source partition advanced by a
        transaction opened after the kill) and ``recovery_settle_s`` later; then stop the load."""
        targets = self.targets()
        order = [k for k in kinds if any(kind_of(t) == k for t in targets)]
        try:
            await self.wait_whole(time.time() - 3600)  # the job runs before the first kill
            for i in range(self.opts.kills_per_kind):
                for kind in order:
                    names = [t for t in targets if kind_of(t) == kind]
                    async with self.lock:
                        event = await self.kill_and_restart(names[i % len(names)])
                    await self.wait_whole(event.at)
                    await asyncio.sleep(recovery_settle_s)
            self.say(f"demo: recovery plan done ({len(self.kills)} kills); stopping the load")
        finally:
            stop_load()  # whatever happened: the load would otherwise run for good

    async def wait_whole(self, since: float) -> None:
        """Until every source partition has a commit of a transaction opened after ``since``
        (wall clock), at most ``recovery_wait_s``."""
        partitions = set(range(self.cfg.source_partitions))
        deadline = time.monotonic() + recovery_wait_s
        while time.monotonic() < deadline and not self.gen.done:
            commits = await asyncio.to_thread(load_commits, self.run_dir)
            if whole_since(since, commits) >= partitions:
                return
            await asyncio.sleep(0.2)

    def open_txn(self, worker: Child) -> str | None:
        """The transaction in which a worker has written but not asked to commit yet,
        from its log (None when it is anywhere else)."""
        index = self.workers.index(worker)
        last = None
        for line in read_jsonl(worker_log(self.run_dir, index)):
            last = line
        return last["txn"] if last is not None and last["o"] == "wrote" else None

    async def zombie(self) -> None:
        """Pause a worker (SIGSTOP) that has a transaction open, past the transaction's
        timeout, then resume it (SIGCONT): the coordinator aborts the transaction meanwhile,
        so whatever the worker does next in it must be refused and nothing of it visible."""
        pause_s = self.opts.txn_timeout_ms / 1000 + 2.0
        every_s = max(3 * self.opts.kill_every_s, pause_s + 3)
        while not self.gen.done:
            await asyncio.sleep(every_s)
            if self.gen.done:
                break
            w = self.rng.choice(self.workers)
            txn = None
            for _ in range(200):  # catch it inside a transaction it has not asked to commit yet
                async with self.lock:
                    if w.alive() and self.open_txn(w) is not None:
                        w.signal(signal.SIGSTOP)
                        w.wait_stopped()
                        # Stopped, it cannot write its log: is it still before the commit?
                        if (txn := self.open_txn(w)) is not None:
                            self.paused.add(w.name)
                            break
                        w.signal(signal.SIGCONT)
                await asyncio.sleep(0.05)
            if txn is None:
                continue
            self.say(f"demo: SIGSTOP {w.name} in txn {txn} for {pause_s:.0f}s (zombie)")
            await asyncio.sleep(pause_s)
            async with self.lock:
                w.signal(signal.SIGCONT)
                self.paused.discard(w.name)
                self.zombie_txns.append(txn)

    def spawn_generator(self, *, rate: float, duration_s: float, count: int = 0) -> subprocess.Popen[bytes]:
        with (self.run_dir / "logs" / "generator.log").open("ab") as log:  # the child keeps its copy
            proc = subprocess.Popen(
                [sys.executable, "-m", "streamtx.demo.generator", "--run-dir", str(self.run_dir),
                 "--broker", self.urls["broker"], "--rate", str(rate), "--duration", str(duration_s),
                 "--count", str(count), "--seed", str(self.opts.seed), "--loop", self.opts.loop],
                stdout=subprocess.PIPE, stderr=log, env=child_env({}),
            )
        self.generators.append(proc)
        return proc

    def read_generator(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            with contextlib.suppress(ValueError):
                d = json.loads(raw)
                if "written" in d:
                    self.gen.written, self.gen.bytes = int(d["written"]), int(d["bytes"])
                    self.gen.done = bool(d["done"])
                    self.gen.cpu_s = float(d.get("cpu_s", 0.0))

    @staticmethod
    async def reap(gen: subprocess.Popen[bytes], reader: threading.Thread) -> None:
        """The generator said it is done: wait for it to exit and close its pipe (a test runs the
        demo in its own process, which a left-over child or pipe would outlive)."""
        try:
            await asyncio.to_thread(gen.wait, 10)
        except subprocess.TimeoutExpired:
            gen.kill()
            await asyncio.to_thread(gen.wait)
        await asyncio.to_thread(reader.join, 5)
        if gen.stdout is not None and not reader.is_alive():
            gen.stdout.close()

    # -- the run --------------------------------------------------------------------
    async def run(self) -> tuple[DemoResult, Report]:
        opts = self.opts
        rest = Rest(self.urls["coordinator"], self.urls["broker"], timeout_s=10.0)
        try:
            await self.setup(rest)
            if opts.backlog:
                # Throughput from a backlog: every record is in the source before the job
                # starts, so the job's own pace is measured, not the generator's.
                gen = self.spawn_generator(rate=1e9, duration_s=3600.0, count=opts.backlog)
                await asyncio.to_thread(self.read_generator, gen)
                await asyncio.to_thread(gen.wait)
                self.gen.done = True
                self.say(f"demo: backlog of {self.gen.written} records written; starting the workers")
            await self.start_workers()
            self.say(f"demo: run dir {self.run_dir}; {opts.workers} workers, {opts.rate:.0f} records/s "
                     + (f"until {opts.kills_per_kind} kills of each kind" if opts.kills_per_kind
                        else f"for {opts.duration_s:.0f}s") + f", commit every {opts.commit_interval_ms} ms"
                     + (f", chaos every {opts.kill_every_s:g}s" if opts.chaos else "")
                     + (", zombies" if opts.zombie else ""))
            if not opts.backlog:
                # The recovery plan stops the load itself when its last kill is recovered from.
                gen = self.spawn_generator(rate=opts.rate,
                                           duration_s=1e9 if opts.kills_per_kind else opts.duration_s)
            reader = threading.Thread(target=self.read_generator, args=(gen,), daemon=True)
            reader.start()
            started = time.monotonic()
            tasks = [asyncio.create_task(self.follow(rest)), asyncio.create_task(self.babysit())]
            if opts.kills_per_kind:
                tasks.append(asyncio.create_task(self.recovery_plan(lambda: gen.send_signal(signal.SIGTERM))))
            elif opts.chaos:
                tasks.append(asyncio.create_task(self.chaos()))
            if opts.zombie:
                tasks.append(asyncio.create_task(self.zombie()))
            total = int(opts.rate * opts.duration_s)
            with tqdm(total=total, unit="rec", disable=opts.quiet, file=sys.stderr,
                      dynamic_ncols=True) as bar:
                seen_before, progress_at = 0, time.monotonic()
                while True:
                    await asyncio.sleep(0.5)
                    bar.total = max(total, self.gen.written)
                    bar.n = len(self.probe.seen)
                    bar.set_postfix_str(f"written={self.gen.written} kills={len(self.kills)}", refresh=False)
                    bar.refresh()
                    if gen.poll() is not None and not self.gen.done:
                        reader.join(2)
                        self.gen.done = True
                    if len(self.probe.seen) > seen_before:
                        seen_before, progress_at = len(self.probe.seen), time.monotonic()
                    if self.gen.done:
                        # Drain: wait while the job makes progress; stuck this long, give up.
                        if len(self.probe.seen) >= self.gen.written:
                            break
                        if time.monotonic() - progress_at > opts.drain_timeout_s:
                            self.caught_up = False
                            break
            elapsed = time.monotonic() - started
            await self.reap(gen, reader)
            # CPU seconds of each process (current lives only: a restarted one lost its past).
            self.cpu = {c.name: c.cpu_s() for c in [*self.services.values(), *self.workers]}
            self.cpu["generator"] = self.gen.cpu_s
            self.cpu["supervisor"] = cpu_seconds(os.getpid())
            async with self.lock:
                self.finishing = True
                for t in tasks[2:]:
                    t.cancel()
            for w in self.workers:
                w.signal(signal.SIGCONT)
            await asyncio.gather(*(asyncio.to_thread(w.stop) for w in self.workers))
            self.probe.stopping = True
            await asyncio.gather(*tasks[:2], return_exceptions=True)
            report = await verify(rest, self.run_dir)
            for t in self.watching:
                t.cancel()
            self.recovery = analyse([e.kill() for e in self.kill_events], load_commits(self.run_dir))
            # The kills on the workers' clock, to lay beside the services' logs (docs/recovery.md).
            (self.run_dir / "kills.jsonl").write_text("".join(
                json.dumps(dataclasses.asdict(e)) + "\n" for e in self.kill_events))
            result = self.result(elapsed, report)
            return result, report
        finally:
            await rest.aclose()
            if not opts.keep:
                self.shutdown()

    def result(self, elapsed: float, report: Report) -> DemoResult:
        written, write_ms = load_written(self.run_dir)
        workers = load_workers(self.run_dir)
        if self.opts.backlog and workers.window is not None:
            elapsed = workers.window[1] - workers.window[0]  # first transaction opened to last commit
        return DemoResult(
            records=len(written), bytes_written=len(written) * self.cfg.record_size, seconds=elapsed,
            commits=workers.committed, aborts=len(workers.aborted), kills=len(self.kills),
            write_ms=write_ms, e2e_ms=self.probe.e2e_ms,
            lost=report.lost.count, duplicate=report.duplicate.count,
            aborted_read=report.aborted_read.count, nonmonotonic=report.nonmonotonic.count,
        )

    def shutdown(self) -> None:
        for gen in self.generators:  # a run cut short (a failed test) leaves it writing
            if gen.poll() is None:
                gen.kill()
                gen.wait()
        for w in self.workers:
            w.stop()
        for child in reversed(self.services.values()):
            child.stop()
        if self.redis is not None and self.redis.poll() is None:
            self.redis.terminate()
            self.redis.wait()

    def cleanup(self) -> None:
        if self.opts.run_dir is None and not self.opts.keep:
            shutil.rmtree(self.run_dir, ignore_errors=True)


def run_demo(opts: Options, demo: Demo | None = None) -> int:
    """Run one demo (``demo``: made by the caller, who reads its results after); print the table,
    the recoveries from kills, the checker's report, and the summary line last.

    Ctrl-C or SIGTERM stops the run: every process it started is stopped, a temporary run
    directory removed, one line says so (no traceback), and the status is 130 or 143.
    """
    demo = demo or Demo(opts)
    try:
        result, report = asyncio.run(_stoppable(demo))
    except (KeyboardInterrupt, asyncio.CancelledError) as exc:
        # Again here: a service a worker thread was starting when the signal came is up only now.
        demo.shutdown()
        if opts.run_dir is None:
            shutil.rmtree(demo.run_dir, ignore_errors=True)
        how = "Ctrl-C" if isinstance(exc, KeyboardInterrupt) else "SIGTERM"
        print(f"demo: stopped by {how}; the services, workers and generator it started are stopped",
              file=sys.stderr, flush=True)
        return 130 if how == "Ctrl-C" else 143
    except BaseException:
        demo.shutdown()
        raise
    workers = load_workers(demo.run_dir)
    print(render_table(result))
    print(f"transactions: {workers.committed} committed, {len(workers.aborted)} aborted "
          f"({workers.refused} commits refused, {workers.orphans} orphans of killed workers ended); "
          f"kills: {', '.join(demo.kills) or 'none'}")
    if opts.zombie:
        outcomes = [f"{t} {workers.last.get(t, 'open')}" for t in demo.zombie_txns]
        print(f"zombies: {len(demo.zombie_txns)} paused past their txn timeout; their txns: "
              f"{', '.join(outcomes) or 'none'}")
    print("cpu seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in demo.cpu.items()))
    if demo.kills and demo.recovery is not None:
        print(render_recovery(demo.recovery))
    print(report.render())
    if not demo.caught_up:
        print(f"demo: the job made no progress for {opts.drain_timeout_s:.0f}s before it had caught up; "
              "what it had not processed counts as lost")
    if opts.keep:
        pids = " ".join(str(c.proc.pid) for c in demo.services.values() if c.proc is not None)
        print(f"demo: suite left running (stop it with: kill {pids}); "
              f"verify again with: streamtx verify --run-dir {demo.run_dir}")
    print(summary_line(result), flush=True)
    if report.ok or not report.written:  # a run that wrote nothing has nothing to look into
        demo.cleanup()
    return 0 if report.ok else 1


async def _stoppable(demo: Demo) -> tuple[DemoResult, Report]:
    """``demo.run()``, cancelled by SIGTERM as asyncio.run cancels it on Ctrl-C (its cleanup runs)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await demo.run()
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


@dataclass
class KillEvent:
    """One kill -9 as the supervisor saw it (wall clock); ``ready_at`` once it was back."""

    name: str
    at: float
    ready_at: float | None = None

    def kill(self) -> Kill:
        return Kill(self.name, self.at, self.ready_at)


def deployment_urls(url: str) -> dict[str, str]:
    """The coordinator's and the broker's URLs a running deployment advertises (``/v1/cluster``).
    With replicas they are one replica's each: it redirects the job to every log's owner. A
    service that does not advertise itself answers at ``url`` (as the SDK assumes)."""
    url = url.rstrip("/")
    advertised = httpx.get(f"{url}/v1/cluster", timeout=10.0).raise_for_status().json()["services"]
    return {name: str(advertised.get(name) or url).rstrip("/") for name in ("coordinator", "broker")}


def _said_owns(w: Child, offset: int) -> bool:
    """Whether worker ``w`` logged, past ``offset``, that it is up (``<name>: owns ...``)."""
    try:
        with w.log_path.open("rb") as f:
            f.seek(offset)
            return f"{w.name}: owns ".encode() in f.read()
    except OSError:
        return False
