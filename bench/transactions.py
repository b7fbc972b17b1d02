"""Benchmark of transactional produce (``make bench-txn``).

1. The whole suite (coordinator, broker, pending-ack store) as processes on
   the file backend (fsync before every ack). Through the SDK over REST:
   ``--producers`` concurrent producer tasks (default 16) send 200-byte
   messages, one per request, each task to its own partition. Two modes with
   the same client concurrency, alternated in ``--rounds`` rounds of
   ``--duration`` seconds so that the noise of a shared machine falls on both:

   - plain: non-transactional sends;
   - txn: every task keeps sending into its current transaction, and a timer
     every ``--commit-ms`` (500) opens the next transaction, swaps it in,
     waits for the sends still in flight in the old one and commits it in the
     background (so sending never stops for a commit).

   A consumer (Exclusive, cumulative acks) records receive time minus the
   send time carried in each message: the produce-to-visible latency.
2. The recovery time of a partition whose transaction buffer holds 1,000,000
   aborted ids in segmented snapshots (built with the broker's own code, then
   a fresh partition's recovery timed: ``bench/txnbuffer_recovery.py``).

The LAST line is the summary:
``bench transactions: txn_vs_plain=<..> tb_recovery_s_1m_aborted=<..> e2e_p99_ms=<..>``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support; streamtx is installed

from tests.support.suite import Suite

from streamtx.client import Consumer, OutMessage, Producer, StreamtxClient, Transaction
from streamtx.client.names import partition_name

MESSAGE_BYTES = 200
_STAMP = 20  # the send time, as a zero-padded decimal of ns, at the start of each payload


def payload(sent_ns: int) -> bytes:
    head = str(sent_ns).zfill(_STAMP).encode()
    return head + b"x" * (MESSAGE_BYTES - len(head))


@dataclass
class RoundResult:
    mode: str
    messages: int
    seconds: float
    latencies_ms: list[float] = field(default_factory=list)
    commits: int = 0
    commit_ms: list[float] = field(default_factory=list)
    cpu_s: dict[str, float] = field(default_factory=dict)  # per process, over the round

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    def line(self) -> str:
        lat = sorted(self.latencies_ms)
        p50, p99 = (pct(lat, 50), pct(lat, 99)) if lat else (float("nan"), float("nan"))
        extra = f"  commits {self.commits}" if self.mode == "txn" else ""
        return (f"{self.mode:<5} {self.rate:>8.0f} msgs/s  ({self.messages} in {self.seconds:.1f} s)  "
                f"produce-to-visible p50 {p50:.1f} ms  p99 {p99:.1f} ms  (n={len(lat)}){extra}")


def pct(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, round(p / 100 * len(sorted_values)) - 1))
    return sorted_values[i]


class TxnSlot:
    """One producer task's current transaction, rotated by a timer."""

    def __init__(self, client: StreamtxClient, timeout_ms: int, partitions: list[str]) -> None:
        self.client = client
        self.partitions = partitions  # registered before the txn is swapped in
        self.timeout_ms = timeout_ms
        self.current: Transaction | None = None
        self.in_flight: dict[str, int] = {}
        self.drained: dict[str, asyncio.Event] = {}
        self.commits: list[asyncio.Task[None]] = []
        self.committed = 0
        self.failed = 0
        self.commit_ms: list[float] = []  # the coordinator's commit call alone

    async def _new(self) -> Transaction:
        txn = await self.client.new_transaction(self.timeout_ms)
        await txn.add_partitions(self.partitions)  # one TC call, off the senders' path
        return txn

    async def open(self) -> None:
        self.current = await self._new()

    def enter(self) -> Transaction:
        assert self.current is not None
        txn = self.current
        self.in_flight[txn.txn_id] = self.in_flight.get(txn.txn_id, 0) + 1
        return txn

    def leave(self, txn: Transaction) -> None:
        left = self.in_flight[txn.txn_id] = self.in_flight[txn.txn_id] - 1
        if left == 0 and txn.txn_id in self.drained:
            self.drained[txn.txn_id].set()

    async def rotate(self) -> None:
        """Swap in a new transaction; commit the old one once its sends are done."""
        nxt = await self._new()
        old, self.current = self.current, nxt
        if old is not None:
            self.commits.append(asyncio.create_task(self._commit(old)))

    async def _commit(self, txn: Transaction) -> None:
        if self.in_flight.get(txn.txn_id, 0):
            event = self.drained[txn.txn_id] = asyncio.Event()
            await event.wait()
        self.in_flight.pop(txn.txn_id, None)
        self.drained.pop(txn.txn_id, None)
        try:
            t0 = time.perf_counter()
            await txn.commit()
            self.commit_ms.append((time.perf_counter() - t0) * 1000)
            self.committed += 1
        except Exception as exc:  # counted and reported
            self.failed += 1
            print(f"  commit of {txn.txn_id} failed: {exc!r}", file=sys.stderr)

    async def finish(self) -> None:
        old, self.current = self.current, None
        if old is not None:
            self.commits.append(asyncio.create_task(self._commit(old)))
        await asyncio.gather(*self.commits)
        self.commits.clear()


async def consume(
    consumer: Consumer, latencies: list[float], stop: asyncio.Event, expected: list[int],
) -> None:
    """Record produce-to-visible latencies until stopped and everything expected has arrived."""
    received = 0
    acking: asyncio.Task[None] | None = None  # one ack in flight, off the receive path
    while not (stop.is_set() and received >= expected[0]):
        msgs = await consumer.receive(max=1000, wait_ms=200)
        now = time.time_ns()
        if not msgs:
            continue
        received += len(msgs)
        for m in msgs:
            latencies.append((now - int(m.value[:_STAMP])) / 1e6)
        last: dict[int | None, str] = {}
        for m in msgs:
            last[m.partition] = m.message_id
        if acking is not None:
            await acking
        acking = asyncio.create_task(consumer.ack(list(last.values()), cumulative=True))
    if acking is not None:
        await acking


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """user+system CPU seconds of each process so far (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for name, pid in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[name] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            out[name] = float("nan")
    return out


def start_profiles(args: argparse.Namespace, mode: str, duration: float) -> list[subprocess.Popen[bytes]]:
    """py-spy on every service and on this client for one round (``--profile DIR``)."""
    if not args.profile:
        return []
    spy = shutil.which("py-spy") or os.environ.get("PY_SPY", "py-spy")
    out = Path(args.profile)
    out.mkdir(parents=True, exist_ok=True)
    targets = {**{n: p.proc.pid for n, p in args.services.items() if p.proc}, "client": os.getpid()}
    return [subprocess.Popen([spy, "record", "-p", str(pid), "-d", str(int(duration)), "-r", "100",
                              "-f", "raw", "--threads", "-o", str(out / f"{mode}-{name}.raw")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for name, pid in targets.items()]


def summarize_profile(path: Path, top: int = 12) -> None:
    """The event-loop thread's busiest functions (inclusive %), from a py-spy raw file."""
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not count.isdigit() or not any("Runner.run" in f or "run_until_complete" in f for f in frames):
            continue  # not the event loop's thread (idle pool workers, ...)
        total += int(count)
        for f in set(frames[1:]):
            incl[f] += int(count)
    print(f"  {path.name}: {total} samples of the event-loop thread at 100 Hz")
    skip = ("Runner.run", "run_until_complete", "run_forever", "_run_once", "Handle._run", "<module>",
            "main ", "_run_module", "_run_code", "asyncio_run", "serve ", "Server.", "run (uvicorn")
    shown = 0
    for f, n in incl.most_common():
        if any(k in f for k in skip):
            continue
        print(f"    {100 * n / max(total, 1):5.1f}%  {f[:120]}")
        shown += 1
        if shown >= top:
            break


async def run_round(
    client: StreamtxClient, mode: str, args: argparse.Namespace, duration: float,
) -> RoundResult:
    producers, partitions, commit_ms = args.producers, args.partitions, args.commit_ms
    topic = f"persistent://bench/txn/{mode}-{uuid.uuid4().hex[:8]}"
    await client.create_topic(topic, partitions)
    consumer = await client.consumer(topic, "e2e", "earliest", "Exclusive")
    prods: list[Producer] = [await client.producer(topic) for _ in range(producers)]
    n_slots = (1 if args.txn_scope == "shared" else producers) if mode == "txn" else 0
    names = [partition_name(topic, p) for p in range(partitions)]
    slots = [TxnSlot(client, 60_000, names if n_slots == 1 else [names[i % partitions]])
             for i in range(n_slots)]
    for slot in slots:
        await slot.open()
    latencies: list[float] = []
    stop_consumer = asyncio.Event()
    expected = [0]
    reader = asyncio.create_task(consume(consumer, latencies, stop_consumer, expected))
    sent = [0] * producers
    end_at = time.monotonic() + duration

    async def produce(i: int) -> None:
        producer = prods[i]
        while time.monotonic() < end_at:
            msg = [OutMessage(payload(time.time_ns()), partition=i % partitions)]
            if mode == "txn":
                slot = slots[i % len(slots)]
                txn = slot.enter()
                try:
                    await producer.send_many(msg, txn=txn)
                finally:
                    slot.leave(txn)
            else:
                await producer.send_many(msg)
            sent[i] += 1

    async def rotator(slot: TxnSlot) -> None:
        while time.monotonic() < end_at:
            await asyncio.sleep(commit_ms / 1000)
            if time.monotonic() < end_at:
                await slot.rotate()

    spies = start_profiles(args, mode, duration) if duration >= 3 else []
    pids = {**{n: p.proc.pid for n, p in args.services.items() if p.proc}, "client": os.getpid()}
    cpu0 = cpu_seconds(pids)
    t0 = time.monotonic()
    timers = [asyncio.create_task(rotator(s)) for s in slots]
    await asyncio.gather(*(produce(i) for i in range(producers)))
    # The window: sends accepted from start to stop. The last transaction's commit
    # runs after it, as each earlier one ran on during the next 500 ms.
    took = time.monotonic() - t0
    for t in timers:
        t.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*timers)
    for slot in slots:
        await slot.finish()
    expected[0] = sum(sent)
    stop_consumer.set()
    try:
        await asyncio.wait_for(reader, timeout=30)
    except TimeoutError:
        print(f"  {mode}: consumer saw {len(latencies)} of {sum(sent)} within 30 s", file=sys.stderr)
    cpu1 = cpu_seconds(pids)
    for spy in spies:
        await asyncio.to_thread(spy.wait)
    result = RoundResult(mode, sum(sent), took, latencies, sum(s.committed for s in slots),
                         [x for s in slots for x in s.commit_ms], {n: cpu1[n] - cpu0[n] for n in pids})
    failed = sum(s.failed for s in slots)
    if failed:
        print(f"  {mode}: {failed} commits failed", file=sys.stderr)
    return result


async def load(url: str, args: argparse.Namespace) -> dict[str, list[RoundResult]]:
    results: dict[str, list[RoundResult]] = {"plain": [], "txn": []}
    async with StreamtxClient(url) as client:
        # Warm-up: both paths once, short.
        for mode in ("plain", "txn"):
            await run_round(client, mode, args, 1.0)
        for r in range(args.rounds):
            order = ("plain", "txn") if r % 2 == 0 else ("txn", "plain")
            for mode in order:
                res = await run_round(client, mode, args, args.duration)
                print(f"round {r + 1} {res.line()}", flush=True)
                results[mode].append(res)
    return results


def recovery(aborted: int, segment_size: int) -> float:
    from bench.txnbuffer_recovery import measure

    with tempfile.TemporaryDirectory() as tmp:
        return asyncio.run(measure(f"file://{tmp}", aborted, segment_size))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--producers", type=int, default=16, help="concurrent producer tasks")
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per round and mode")
    parser.add_argument("--rounds", type=int, default=12, help="rounds, modes alternated")
    parser.add_argument("--partitions", type=int, default=4,
                        help="partitions of the topic (task i sends to i %% P)")
    parser.add_argument("--commit-ms", type=int, default=500, help="transaction rotation period")
    parser.add_argument("--txn-scope", choices=("shared", "per-producer"), default="shared",
                        help="one transaction for all tasks, or one per task (all rotated by timers)")
    parser.add_argument("--aborted", type=int, default=1_000_000)
    parser.add_argument("--segment-size", type=int, default=1000)
    parser.add_argument("--skip-load", action="store_true")
    parser.add_argument("--profile", metavar="DIR", help="py-spy every process in rounds >= 3 s")
    parser.add_argument("--skip-recovery", action="store_true")
    args = parser.parse_args()

    ratio = p99 = float("nan")
    if not args.skip_load:
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp)
            with Suite(f"file://{data / 'ledgers'}", data) as suite:
                args.services = suite.procs
                print(f"suite up: {suite.url} (file ledgers, fsync); {args.producers} producers, "
                      f"{args.partitions} partitions, {MESSAGE_BYTES}-byte messages, "
                      f"commit every {args.commit_ms} ms ({args.txn_scope} transactions)", flush=True)
                results = asyncio.run(load(suite.url, args))
        if args.profile:
            for raw in sorted(Path(args.profile).glob("*.raw")):
                summarize_profile(raw)
        plain = sum(r.messages for r in results["plain"]) / sum(r.seconds for r in results["plain"])
        txn = sum(r.messages for r in results["txn"]) / sum(r.seconds for r in results["txn"])
        ratio = txn / plain
        lat = sorted(x for r in results["txn"] for x in r.latencies_ms)
        plain_lat = sorted(x for r in results["plain"] for x in r.latencies_ms)
        p99 = pct(lat, 99)
        print(f"plain: {plain:.0f} msgs/s (rounds: {', '.join(f'{r.rate:.0f}' for r in results['plain'])})")
        print(f"txn:   {txn:.0f} msgs/s (rounds: {', '.join(f'{r.rate:.0f}' for r in results['txn'])})")
        print(f"txn produce-to-visible: p50 {pct(lat, 50):.1f} ms, p99 {p99:.1f} ms, max {lat[-1]:.1f} ms"
              if lat else "txn produce-to-visible: no samples")
        for mode in ("plain", "txn"):
            n = sum(r.messages for r in results[mode])
            per = {k: sum(r.cpu_s.get(k, 0.0) for r in results[mode]) * 1000 / max(n, 1)
                   for k in results[mode][0].cpu_s}
            print(f"{mode} CPU ms per message: " + ", ".join(f"{k} {v:.2f}" for k, v in per.items())
                  + f", all {sum(per.values()):.2f}")
        commit_ms = sorted(x for r in results["txn"] for x in r.commit_ms)
        if commit_ms:
            print(f"txn commit call: p50 {pct(commit_ms, 50):.1f} ms, p99 {pct(commit_ms, 99):.1f} ms "
                  f"({len(commit_ms)} commits)")
        if plain_lat:
            print(f"plain produce-to-visible: p50 {pct(plain_lat, 50):.1f} ms, "
                  f"p99 {pct(plain_lat, 99):.1f} ms")
        per_round = [t.rate / p.rate for t, p in zip(results["txn"], results["plain"], strict=True)]
        if per_round:
            print(f"txn_vs_plain {ratio:.3f} (per round: {', '.join(f'{x:.3f}' for x in per_round)}; "
                  f"median {statistics.median(per_round):.3f})")

    took = float("nan")
    if not args.skip_recovery:
        took = recovery(args.aborted, args.segment_size)
        print(f"TB recovery of a partition with {args.aborted} aborted ids "
              f"(segments of {args.segment_size}): {took:.3f} s", flush=True)
    print(f"bench transactions: txn_vs_plain={ratio:.3f} "
          f"tb_recovery_s_1m_aborted={took:.3f} e2e_p99_ms={p99:.1f}")


if __name__ == "__main__":
    main()
