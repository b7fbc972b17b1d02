"""Benchmark of geo-replication and replicated-subscription failover (``make bench-repl``).

Two clusters ``a`` and ``b`` on this machine, each the whole suite as processes
on the file backend (tests/support/geo.py), namespace ``bench/geo`` replicated
between them, replicated-subscription snapshots at their default frequency (1 s).

1. Capacity: ``--producers`` closed-loop tasks send requests of ``--batch``
   200-byte messages to a topic of ``a`` that is not replicated, for
   ``--probe-s`` seconds: what one cluster carries (messages/s).
2. Steady: a producer in ``a`` at half that rate for ``--duration`` seconds into
   the replicated topic. A consumer in ``b`` records, per message, the time it
   became visible there minus its publish time in ``a`` (carried in the payload):
   the replication lag. A consumer in ``a`` on the replicated subscription ``s``
   consumes and acknowledges (individually, in order) as it goes.
3. Failover: at 60% of the run that consumer stops (the process "dies"); the
   producer goes on to the end; then, one snapshot interval later, a consumer of
   ``s`` in ``b`` reads everything it is given. Lost = produced but neither
   acknowledged in ``a`` nor received in ``b``; duplicates = acknowledged in ``a``
   and received again in ``b``.

Before it: the sync interval the duplicates compare against (the snapshot
frequency, at the rate the producer reached: PIP-33 repeats at most about that
much plus one snapshot round trip) and a's snapshot figures (started,
completed, mean time from request to complete, updates written).

The LAST line is the summary:
``bench replication: msgs_per_s=<..> lag_p99_ms=<..> failover_lost=<n> failover_duplicates=<n>``
(msgs_per_s: messages replicated to ``b`` per second during the steady phase).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support; streamtx is installed

from tests.support.geo import Geo

from streamtx.replication.settings import ReplicationSettings

MESSAGE_BYTES = 200
TOPIC = "bench/geo/x"


def payload(seq: int) -> str:
    head = f"{time.time_ns():020d}:{seq:09d}:".encode()
    return base64.b64encode(head + b"x" * (MESSAGE_BYTES - len(head))).decode()


def parse(value_b64: str) -> tuple[int, int]:
    sent_ns, seq, _ = base64.b64decode(value_b64).split(b":", 2)
    return int(sent_ns), int(seq)


async def capacity(url: str, producers: int, batch: int, seconds: float) -> float:
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        r = await http.put("/admin/v2/persistent/bench/local/probe/partitions", json={"partitions": 1})
        assert r.status_code == 200, r.text
        sent = 0
        end = time.monotonic() + seconds

        async def task() -> None:
            nonlocal sent
            while time.monotonic() < end:
                body = {"messages": [{"value": payload(0)} for _ in range(batch)]}
                r = await http.post("/v1/topics/bench/local/probe/messages", json=body)
                assert r.status_code == 200, r.text
                sent += batch

        t0 = time.monotonic()
        await asyncio.gather(*(task() for _ in range(producers)))
        return sent / (time.monotonic() - t0)


async def produce(url: str, rate: float, batch: int, seconds: float, out: list[int], tasks: int) -> None:
    """Requests of ``batch`` messages paced to ``rate`` messages/s over ``tasks`` concurrent senders
    (one sender cannot reach the rate: a request waits for its fsync); sequence numbers in ``out``."""
    counter = iter(range(0, 1 << 40, batch))
    t0 = time.monotonic()

    async def sender(http: httpx.AsyncClient) -> None:
        j = 0
        while (now := time.monotonic()) < t0 + seconds:
            due = t0 + j * batch * tasks / rate
            if due > now:
                await asyncio.sleep(due - now)
            seq = next(counter)
            body = {"messages": [{"value": payload(seq + i)} for i in range(batch)]}
            r = await http.post(f"/v1/topics/{TOPIC}/messages", json=body)
            assert r.status_code == 200, r.text
            out.extend(range(seq, seq + batch))
            j += 1

    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        await asyncio.gather(*(sender(http) for _ in range(tasks)))


async def consume(url: str, sub: str, stop: asyncio.Event, *, ack: bool,
                  seen: list[tuple[int, int]]) -> None:
    """(sequence, visible_ns) of every message until ``stop``, acking each batch when asked."""
    base = f"/v1/topics/{TOPIC}/subscriptions/{sub}"
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        while not stop.is_set():
            msgs: list[dict[str, Any]] = (await http.get(f"{base}/messages", params={
                "max": 500, "wait_ms": 200, "consumer": "bench"})).json()["messages"]
            now = time.time_ns()
            if not msgs:
                continue
            if ack and not stop.is_set():
                r = await http.post(f"{base}/acks", json={"message_ids": [m["message_id"] for m in msgs]})
                assert r.status_code == 200, r.text
            elif stop.is_set():
                return  # died before acking these
            for m in msgs:
                sent_ns, seq = parse(m["value"])
                seen.append((seq, now - sent_ns if not ack else now))


async def run(geo: Geo, args: argparse.Namespace) -> str:
    a, b = geo.url("a"), geo.url("b")
    async with httpx.AsyncClient(timeout=30) as http:
        for url in (a, b):
            r = await http.post(f"{url}/admin/v2/namespaces/bench/geo/replication", json=["a", "b"])
            assert r.status_code == 200, r.text
        r = await http.put(f"{a}/admin/v2/persistent/{TOPIC}/partitions", json={"partitions": 1})
        assert r.status_code == 200
        r = await http.put(f"{a}/v1/topics/{TOPIC}/subscriptions/s",
                           json={"initial_position": "earliest", "replicated": True})
        assert r.status_code == 200
        for _ in range(600):  # the topic is created in b by a's replicator (slow on a loaded machine)
            r = await http.put(f"{b}/v1/topics/{TOPIC}/subscriptions/lag",
                               json={"initial_position": "earliest"})
            if r.status_code == 200:
                break
            await asyncio.sleep(0.1)
        assert r.status_code == 200, r.text

    cap = await capacity(a, args.producers, args.batch, args.probe_s)
    rate = cap / 2
    print(f"one cluster carries {cap:,.0f} msgs/s ({args.producers} producers x {args.batch}-message "
          f"requests); steady producer at {rate:,.0f} msgs/s for {args.duration:.0f} s", flush=True)
    produced: list[int] = []
    lagged: list[tuple[int, int]] = []  # (seq, lag ns) in b
    acked: list[tuple[int, int]] = []  # (seq, time) acked in a
    stop_lag, stop_a = asyncio.Event(), asyncio.Event()
    lag_task = asyncio.create_task(consume(b, "lag", stop_lag, ack=False, seen=lagged))
    a_task = asyncio.create_task(consume(a, "s", stop_a, ack=True, seen=acked))
    prod = asyncio.create_task(produce(a, rate, args.batch, args.duration, produced, args.producers))
    t0 = time.monotonic()
    await asyncio.sleep(args.duration * 0.6)
    stop_a.set()  # the consumer in a dies (what it fetched last is not acked)
    await a_task
    await prod
    steady_s = time.monotonic() - t0
    for _ in range(300):  # the rest reaches b
        if len({s for s, _ in lagged}) >= len(produced):
            break
        await asyncio.sleep(0.1)
    stop_lag.set()
    await lag_task
    replicated = len({s for s, _ in lagged})
    await asyncio.sleep(args.sync_wait_s)  # one snapshot interval: the position reaches b
    in_b: list[tuple[int, int]] = []
    stop_b = asyncio.Event()
    b_task = asyncio.create_task(consume(b, "s", stop_b, ack=True, seen=in_b))
    acked_set = {s for s, _ in acked}
    expected = set(produced)
    for _ in range(300):  # until everything not acked in a arrived in b (or 30 s: lost)
        if not expected - acked_set - {s for s, _ in in_b}:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)  # anything more b would hand out (duplicates) arrives now
    stop_b.set()
    await b_task
    got_b = {s for s, _ in in_b}
    lost = len(expected - acked_set - got_b)
    duplicates = len(acked_set & got_b)
    lags_ms = sorted(ns / 1e6 for _, ns in lagged)
    p50 = statistics.median(lags_ms)
    p99 = lags_ms[min(len(lags_ms) - 1, int(len(lags_ms) * 0.99))]
    msgs_per_s = replicated / steady_s
    print(f"steady: {len(produced):,} produced in a ({len(produced) / args.duration:,.0f} msgs/s), "
          f"{replicated:,} visible in b; lag p50 {p50:.1f} ms, p99 {p99:.1f} ms", flush=True)
    interval_ms = ReplicationSettings.model_fields["replicated_subscriptions_snapshot_frequency_ms"].default
    produced_rate = len(produced) / args.duration  # what the paced producer reached, not its target
    worth = produced_rate * interval_ms / 1000
    print(f"failover a->b: {len(acked_set):,} acked in a before the consumer died, {len(got_b):,} received "
          f"in b after; lost {lost}, duplicates {duplicates} "
          f"= {duplicates / produced_rate * 1000:,.0f} ms of messages", flush=True)
    print(f"sync interval (snapshot frequency) {interval_ms} ms: one interval's worth at "
          f"{produced_rate:,.0f} msgs/s is {worth:,.0f} messages; duplicates / that = "
          f"{duplicates / worth:.2f}", flush=True)
    print(await snapshot_figures(geo), flush=True)
    return (f"bench replication: msgs_per_s={msgs_per_s:.0f} lag_p99_ms={p99:.1f} failover_lost={lost} "
            f"failover_duplicates={duplicates}")


async def snapshot_figures(geo: Geo) -> str:
    """What a's controller did for the replicated subscription: snapshots, their time, updates."""
    url = geo["a"].replication.url
    async with httpx.AsyncClient(timeout=30) as http:
        status = (await http.get(f"{url}/admin/v2/replication/status")).json()
        metrics = (await http.get(f"{url}/metrics")).text
    mine = [s for s in status["replicatedSubscriptions"] if s["topic"] == f"persistent://{TOPIC}"]
    got = {k: float(v) for k, v in re.findall(
        r'^pulsar_replicated_subscriptions_snapshot_ms_(sum|count)\{[^}]*\} (\S+)$', metrics, re.M)}
    took = got.get("sum", 0.0) / got["count"] if got.get("count") else float("nan")
    s = mine[0] if mine else {}
    return (f"snapshots in a: {s.get('requests')} started, {s.get('completedSnapshots')} completed "
            f"(mean {took:,.0f} ms from request to complete), {s.get('updates')} updates written")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=10.0, help="steady phase, s (10)")
    parser.add_argument("--probe-s", type=float, default=3.0, help="capacity probe, s (3)")
    parser.add_argument("--producers", type=int, default=4, help="closed-loop producers of the probe (4)")
    parser.add_argument("--batch", type=int, default=10, help="messages per produce request (10)")
    parser.add_argument("--sync-wait-s", type=float, default=1.5, help="wait before failing over, s (1.5)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-repl-") as tmp, Geo(Path(tmp), ("a", "b")) as geo:
        line = asyncio.run(run(geo, args))
    print(line, flush=True)


if __name__ == "__main__":
    main()
