"""Benchmark of the transaction coordinator (``make bench-tc``).

1. ``POST /v1/transactions`` on the TC (file backend, fsync before every ack),
   batched transaction-log writes on, then off; and the one POST endpoint of a
   bare FastAPI app returning a small JSON body (the HTTP limit of this stack),
   served by the same uvicorn runner; and, for reference, that endpoint on the
   service kit's ``create_app`` (HTTP metrics, error handlers). Load: wrk, 64
   connections, a Lua script that POSTs a JSON body; the four run interleaved
   for ``--rounds`` rounds and the best run of each counts.
2. The replay of a 1,000,000-record transaction log (file backend), timed
   through the coordinator's own recovery path (open, replay, recover), best of 3.

The LAST line is the summary:
``bench coordinator: tc_vs_bare=<..> batched_vs_unbatched=<..> replay_records_per_s=<..>``.

Options: ``--duration`` seconds per load run (default 10), ``--records`` for the
replay (default 1,000,000), ``--profile`` to cProfile the TC under load.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support; streamtx is installed

from tests.support.procs import free_port, python_env, wait_for_port

from streamtx.service.readiness import wait_ready

CONNECTIONS = 64
_LUA = """
wrk.method = "POST"
wrk.body = '{"timeout_ms": 600000}'
wrk.headers["Content-Type"] = "application/json"
"""


@dataclass
class LoadResult:
    name: str
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int

    def line(self) -> str:
        return (f"{self.name:<14} {self.requests_per_s:>9.0f} req/s  p50 {self.p50_ms:6.2f} ms  "
                f"p99 {self.p99_ms:6.2f} ms  non-2xx/errors {self.errors}")


# --- the bare app ------------------------------------------------------------------


def serve_bare(port: int, kit: bool) -> None:
    """The bare FastAPI app: one POST endpoint, the same body model, a small JSON answer.

    With ``kit``, the same endpoint on the service kit's app (``create_app``:
    error handlers, HTTP metrics, health routes): what every service pays.
    """
    import contextlib
    from collections.abc import AsyncIterator

    from fastapi import FastAPI
    from pydantic import BaseModel

    from streamtx.service import ServiceSettings, ServiceState, create_app
    from streamtx.service.serve import serve

    class TxnCreate(BaseModel):
        timeout_ms: int | None = None

    class TxnCreated(BaseModel):
        txn_id: str

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield

    state = ServiceState()
    state.ready = True
    app = (
        create_app(title="kit", settings=ServiceSettings(), lifespan=lifespan, state=state)  # type: ignore[call-arg]
        if kit else FastAPI()
    )
    counter = iter(range(1 << 62))

    @app.post("/v1/transactions", response_model=TxnCreated)
    async def create(body: TxnCreate | None = None) -> TxnCreated:
        return TxnCreated(txn_id=f"0:{next(counter)}")

    serve(app, "127.0.0.1", port)


# --- load --------------------------------------------------------------------------


def _ms(value: str, unit: str) -> float:
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def run_wrk(name: str, url: str, duration: int, script: Path, connections: int = CONNECTIONS,
            threads: int = 2) -> LoadResult:
    warm = subprocess.run(
        ["wrk", "-t", str(threads), "-c", str(connections), "-d", "2s", "-s", str(script), url],
        capture_output=True, text=True, check=True)
    del warm
    out = subprocess.run(
        ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{duration}s", "--latency", "-s",
         str(script), url], capture_output=True, text=True, check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    lat = dict(re.findall(r"^\s+(\d+)%\s+([\d.]+\w+)", out, re.M))

    def pct(p: str) -> float:
        m = re.match(r"([\d.]+)(\w+)", lat[p])
        assert m is not None
        return _ms(m.group(1), m.group(2))

    errors = 0
    if m := re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out):
        errors += int(m.group(1))
    if m := re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out):
        errors += sum(int(x) for x in m.groups())
    return LoadResult(name, rps, pct("50"), pct("99"), errors)



def load_tc(
    name: str, data: Path, duration: int, script: Path, batching: bool, profile: Path | None
) -> LoadResult:
    """Run the TC as its own process (``python -m streamtx.coordinator``) and load it."""
    port = free_port()
    env = {
        **python_env(),
        "STREAMTX_HOST": "127.0.0.1",
        "STREAMTX_PORT": str(port),
        "STREAMTX_LEDGER_URL": f"file://{data / name.replace(' ', '-')}",
        "STREAMTX_BATCHING__ENABLED": "true" if batching else "false",
        # wrk is one client creating transactions it never ends: lift the per-client limit.
        "STREAMTX_MAX_OPEN_TXNS_PER_CLIENT": str(10**9),
    }
    cmd = [sys.executable, "-m", "streamtx.coordinator"]
    if profile is not None:
        cmd = [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "streamtx.coordinator"]
    with (data / f"{name.replace(' ', '-')}.log").open("ab") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, timeout_s=60)
        return run_wrk(name, f"{url}/v1/transactions", duration, script)
    finally:
        # SIGINT: uvicorn shuts down and re-raises it as KeyboardInterrupt, so
        # cProfile still writes its file (SIGTERM would end the process first).
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


def print_profile(path: Path, top: int = 25) -> None:
    import pstats

    print(f"--- profile of the batched TC under load (top {top} by own time) ---")
    pstats.Stats(str(path)).sort_stats("tottime").print_stats(top)


def load_bare(duration: int, script: Path, kit: bool = False) -> LoadResult:
    port = free_port()
    env = python_env()
    flag = "--serve-kit" if kit else "--serve-bare"
    proc = subprocess.Popen([sys.executable, __file__, flag, str(port)], env=env)
    try:
        wait_for_port(port, proc=proc)
        name = "kit fastapi" if kit else "bare fastapi"
        return run_wrk(name, f"http://127.0.0.1:{port}/v1/transactions", duration, script)
    finally:
        proc.terminate()
        proc.wait(10)


# --- replay ------------------------------------------------------------------------


async def build_log(url: str, records: int) -> int:
    """Write a transaction log of ``records`` records in batched entries of 512; the count."""
    from streamtx.batching.codec import encode_batch
    from streamtx.contracts.txnid import TxnId
    from streamtx.coordinator.log import ledger_name
    from streamtx.ledger import open_ledger_factory
    from streamtx.records import txnlog as rec
    from streamtx.records.txnstate import EndReason, TxnState

    ledgers = open_ledger_factory(url)
    ledger = await ledgers.open(ledger_name("standalone", 0), writer=True)
    now = int(time.time() * 1000)
    written = 0
    batch: list[bytes] = []
    counter = 0
    # Per transaction: NEW, ADD_PARTITIONS (2), ADD_SUBSCRIPTIONS (1), COMMITTING,
    # COMMITTED; every tenth is left OPEN after its adds (a crash mid-run).
    while written < records:
        txn = TxnId.of(0, counter)
        counter += 1
        group: list[rec.Record] = [
            rec.NewTxn(txn, 600_000, now),
            rec.AddPartitions(txn, (f"persistent://t/n/topic-{counter % 97}-partition-0",
                                    f"persistent://t/n/topic-{counter % 89}-partition-1")),
            rec.AddSubscriptions(txn, (rec.Subscription(f"persistent://t/n/in-{counter % 13}", "sub"),)),
        ]
        if counter % 10:
            group += [rec.StatusChange(txn, TxnState.COMMITTING, EndReason.CLIENT, now),
                      rec.StatusChange(txn, TxnState.COMMITTED, EndReason.CLIENT, now)]
        for r in group[: records - written]:
            batch.append(rec.encode(r))
            written += 1
            if len(batch) == 512:
                await ledger.append(encode_batch(batch))
                batch = []
    if batch:
        await ledger.append(encode_batch(batch))
    await ledger.append(encode_batch([rec.encode(rec.ReserveIds(counter + 10_000))]))
    await ledgers.close()
    return written + 1


async def time_replay(url: str) -> tuple[int, float, float]:
    """Recover coordinator 0 from the log; (records replayed, seconds, CPU seconds of the process)."""
    from prometheus_client import CollectorRegistry

    from streamtx.batching.settings import BatchingSettings
    from streamtx.coordinator.coordinator import CoordinatorConfig, TransactionCoordinator
    from streamtx.coordinator.log import TransactionLog
    from streamtx.coordinator.metrics import CoordinatorMetrics
    from streamtx.coordinator.participants_client import Participants
    from streamtx.ledger import open_ledger_factory

    ledgers = open_ledger_factory(url)
    participants = Participants(None, None, backoff_s=0.05, max_backoff_s=1, timeout_s=1, prepare_attempts=1)
    start, cpu = time.perf_counter(), time.process_time()
    txn_log = await TransactionLog.open(ledgers, cluster="standalone", coordinator_id=0,
                                        batching=BatchingSettings())
    tc = TransactionCoordinator(0, txn_log, participants, CoordinatorMetrics("bench", 0, CollectorRegistry()),
                                CoordinatorConfig(finished_retention_ms=3_600_000))
    await tc.recover()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    replayed = tc.table.records
    await tc.close()
    await participants.aclose()
    await ledgers.close()
    return replayed, elapsed, cpu


# --- main --------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=int, default=8, help="seconds of load per run")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the best run counts")
    parser.add_argument("--records", type=int, default=1_000_000, help="records in the replayed log")
    parser.add_argument("--profile", action="store_true", help="cProfile the batched TC run")
    parser.add_argument("--serve-bare", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve-kit", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_bare or args.serve_kit:
        serve_bare(args.serve_bare or args.serve_kit, kit=bool(args.serve_kit))
        return
    if shutil.which("wrk") is None:
        sys.exit("wrk not found: apt-get install wrk (make setup does)")

    data = Path(tempfile.mkdtemp(prefix="bench-tc-"))
    try:
        script = data / "post.lua"
        script.write_text(_LUA)
        print(f"load: wrk, {CONNECTIONS} connections, {args.duration}s per run, {args.rounds} rounds "
              f"(interleaved, best kept), POST /v1/transactions", flush=True)
        profile = data / "tc.prof" if args.profile else None
        if profile is not None:
            load_tc("tc profiled", data, args.duration, script, True, profile)
            print_profile(profile)
        runs: dict[str, list[LoadResult]] = {}
        for r in range(args.rounds):
            # Interleaved rounds, best of each kept: on a shared machine the load
            # drifts, and one run after the other would compare different moments.
            for result in (
                load_tc(f"tc batched {r}", data, args.duration, script, True, None),
                load_tc(f"tc unbatched {r}", data, args.duration, script, False, None),
                load_bare(args.duration, script),
                load_bare(args.duration, script, kit=True),
            ):
                name = result.name.rsplit(" ", 1)[0] if result.name.startswith("tc") else result.name
                result.name = name
                runs.setdefault(name, []).append(result)
                print(f"  round {r}: {result.line()}", flush=True)
        batched, unbatched, bare, kit = (
            max(runs[n], key=lambda x: x.requests_per_s)
            for n in ("tc batched", "tc unbatched", "bare fastapi", "kit fastapi")
        )
        for result in (batched, unbatched, bare):
            print(result.line(), flush=True)
        print(f"{kit.line()}  (the bare endpoint on the service kit's create_app: middleware every"
              f" service pays; {kit.requests_per_s / bare.requests_per_s:.2f} of bare)", flush=True)

        url = f"file://{data / 'replay'}"
        written = asyncio.run(build_log(url, args.records))
        runs = [asyncio.run(time_replay(url)) for _ in range(3)]
        for replayed, _, _ in runs:
            assert replayed == written, (replayed, written)
        seconds, cpu = min((s, c) for _, s, c in runs)
        rate = written / seconds
        print(f"replay: {written:,} records in {seconds:.2f} s = {rate:,.0f} records/s, {cpu:.2f} CPU s "
              f"(best of {', '.join(f'{s:.2f}' for _, s, _ in runs)} s)", flush=True)
        print(
            f"bench coordinator: tc_vs_bare={batched.requests_per_s / bare.requests_per_s:.2f} "
            f"batched_vs_unbatched={batched.requests_per_s / unbatched.requests_per_s:.2f} "
            f"replay_records_per_s={rate:.0f}",
            flush=True,
        )
    finally:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
