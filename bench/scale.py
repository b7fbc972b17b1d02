"""Scale-out benchmark (``make bench-scale``): what a second process buys, side by side.

``tc_x2``: ``POST /v1/transactions`` throughput of two coordinator replicas (one
Redis for their leases, four coordinator ids shared out two and two, file
ledgers with fsync before every answer) over one replica owning all four, in
the same run, rounds interleaved, best of each. The load is wrk with 64
connections in all: against the one replica, or 32 against each of the two (a
Kubernetes Service spreads connections the same way); creation is served by
the replica that receives it, so no request is redirected.

The other figures of the issue's line (``broker_x2``, ``redis_records_per_entry``,
``redis_vs_inprocess``) need partition ownership and the Redis batch buffer,
which are not built yet: they print as ``n/a`` rather than as a made-up number.

Last line:
``bench scale: tc_x2=<…> broker_x2=n/a redis_records_per_entry=n/a redis_vs_inprocess=n/a``
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / p) for p in ("shared", "services", ".")]

from tests.support.procs import free_port, redis_server  # noqa: E402

from coordinator import _LUA, LoadResult, run_wrk  # noqa: E402
from streamtx.service.readiness import wait_ready  # noqa: E402

COORDINATOR_IDS = "0,1,2,3"


def start_replica(data: Path, redis_url: str, name: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ, "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("shared", "services", ".")),
        "STREAMTX_HOST": "127.0.0.1", "STREAMTX_PORT": str(port), "STREAMTX_LEDGER_URL": f"file://{data}",
        "STREAMTX_REDIS_URL": redis_url, "STREAMTX_COORDINATOR_IDS": COORDINATOR_IDS,
        "STREAMTX_LEASE_TTL_MS": "2000", "STREAMTX_ADVERTISED_URL": url, "STREAMTX_MEMBER": name,
        "STREAMTX_CLUSTER": data.name,
        # wrk is one client creating transactions it never ends: lift the per-client limit.
        "STREAMTX_MAX_OPEN_TXNS_PER_CLIENT": str(10**9),
    }
    with (data.parent / f"{data.name}-{name}.log").open("ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "streamtx.coordinator"], env=env, stdout=log,
                                stderr=log)
    wait_ready(url, proc, timeout_s=60)
    return proc, url


def wait_spread(urls: list[str], per_replica: int) -> None:
    """Until every replica serves its share (the ids move by handover after a join)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        served = [sum(httpx.get(f"{u}/lookup/v2/coordinator/{cid}").json()["servedHere"]
                      for cid in range(4)) for u in urls]
        if served == [per_replica] * len(urls):
            return
        time.sleep(0.2)
    raise TimeoutError(f"the coordinator ids did not spread over {urls}")


def load(urls: list[str], duration: int, script: Path, name: str) -> LoadResult:
    per = 64 // len(urls)
    with ThreadPoolExecutor(len(urls)) as pool:
        parts = list(pool.map(lambda u: run_wrk(name, f"{u}/v1/transactions", duration, script,
                                                connections=per, threads=1), urls))
    return LoadResult(name, sum(p.requests_per_s for p in parts), max(p.p50_ms for p in parts),
                      max(p.p99_ms for p in parts), sum(p.errors for p in parts))


def measure(replicas: int, work: Path, redis_url: str, duration: int, script: Path, run: int) -> LoadResult:
    data = work / f"tc{replicas}-{run}"
    data.mkdir()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        urls = []
        for i in range(replicas):
            proc, url = start_replica(data, redis_url, f"r{i}")
            procs.append(proc)
            urls.append(url)
        wait_spread(urls, 4 // replicas)
        return load(urls, duration, script, f"{replicas} replica{'s' if replicas > 1 else ''}")
    finally:
        for p in procs:
            p.send_signal(signal.SIGINT)
        for p in procs:
            p.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=10, help="seconds per load run (10)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="interleaved rounds; the best of each counts (2)")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk not found: run `make setup`")
    work = Path(tempfile.mkdtemp(prefix="streamtx-bench-scale-"))
    script = work / "post.lua"
    script.write_text(_LUA)
    best: dict[int, LoadResult] = {}
    try:
        with redis_server() as redis_url:
            for run in range(args.rounds):
                for replicas in (1, 2):
                    r = measure(replicas, work, redis_url, args.duration, script, run)
                    print(r.line(), flush=True)
                    if replicas not in best or r.requests_per_s > best[replicas].requests_per_s:
                        best[replicas] = r
    finally:
        shutil.rmtree(work, ignore_errors=True)
    tc_x2 = best[2].requests_per_s / best[1].requests_per_s
    print(f"bench scale: tc_x2={tc_x2:.2f} broker_x2=n/a redis_records_per_entry=n/a redis_vs_inprocess=n/a",
          flush=True)


if __name__ == "__main__":
    main()
