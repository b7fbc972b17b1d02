"""Scale-out benchmark (``make bench-scale``): what a second process buys, side by side.

``tc_x2``: ``POST /v1/transactions`` throughput of two coordinator replicas (one
Redis for their leases, four coordinator ids shared out two and two, file
ledgers with fsync before every answer) over one replica owning all four, in
the same run, rounds interleaved, best of each. The load is wrk with 64
connections in all: against the one replica, or 32 against each of the two (a
Kubernetes Service spreads connections the same way); creation is served by
the replica that receives it, so no request is redirected.

The Redis batch buffer, side by side in the same run (rounds interleaved, best
of each), both with four coordinator ids and four processes on file ledgers:

- ``redis``: ONE port served by ``STREAMTX_WORKERS=4`` workers, one id each.
  wrk's 64 keep-alive connections (four wrk processes of 16, as below) land on
  the workers as the kernel spreads them. The load is closed-loop per
  connection: create a transaction (served by the worker that receives it, on
  an id it owns), then abort one the thread created (on any id: 3 times in 4
  another worker owns it, and the call goes through that id's Redis mailbox),
  and so on.
- ``in-process``: four single-process replicas on four ports (leases in the
  same Redis), 16 connections each, every abort sent to the replica that
  created the transaction: four workers each batching alone, no forwarding.

``redis_records_per_entry``: log records per ledger entry written during the
``redis`` load (every transaction log read back after the run);
``redis_vs_inprocess``: the ``redis`` throughput (requests/s, creates and
aborts) over the ``in-process`` one.

``broker_x2``: produce+fetch(+ack) throughput of two broker replicas sharing the
eight partitions of ONE topic through leases (four and four) over one broker
owning all eight, same run, rounds interleaved, best of each (:mod:`scale_broker`
says how).

Last line:
``bench scale: tc_x2=<…> broker_x2=<…> redis_records_per_entry=<…> redis_vs_inprocess=<…>``
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support; streamtx is installed

import redis
from tests.support.procs import free_port, python_env, redis_server

from coordinator import _LUA, LoadResult, run_wrk
from scale_broker import measure_brokers, started, summed
from streamtx.batching.codec import decode_entry
from streamtx.coordinator.log import ledger_name
from streamtx.ledger import Position, open_ledger_factory
from streamtx.service.readiness import wait_ready

# Closed loop per connection: create, then abort a transaction the thread created (the
# abort's id is any of the four), create, ...
_CREATE_ABORT_LUA = """
local queue, head, tail = {}, 1, 0
wrk.headers["Content-Type"] = "application/json"
request = function()
  if head <= tail then
    local txn = queue[head]
    queue[head] = nil
    head = head + 1
    return wrk.format("POST", "/v1/transactions/" .. txn .. "/abort", nil, "")
  end
  return wrk.format("POST", "/v1/transactions", nil, '{"timeout_ms": 600000}')
end
response = function(status, headers, body)
  if status == 200 and not string.find(body, '"state"', 1, true) then
    local txn = string.match(body, '"txn_id":"([%d:]+)"')
    if txn then
      tail = tail + 1
      queue[tail] = txn
    end
  end
end
"""

COORDINATOR_IDS = "0,1,2,3"


def start_replica(data: Path, redis_url: str, name: str,
                  workers: int = 1) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        "STREAMTX_WORKERS": str(workers), "STREAMTX_FINISHED_RETENTION_MS": "600000",  # keep records to count
        **python_env(),
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
        return summed(name, list(pool.map(lambda u: run_wrk(name, f"{u}/v1/transactions", duration, script,
                                                            connections=per, threads=1), urls)))


def measure(replicas: int, work: Path, redis_url: str, duration: int, script: Path, run: int) -> LoadResult:
    data = work / f"tc{replicas}-{run}"
    data.mkdir()
    names = [f"r{i}" for i in range(replicas)]
    with started(lambda name: start_replica(data, redis_url, name), names) as urls:
        wait_spread(urls, 4 // replicas)
        return load(urls, duration, script, f"{replicas} replica{'s' if replicas > 1 else ''}")


def wait_workers(redis_url: str, cluster: str, workers: int) -> None:
    """Until the ids are leased to ``workers`` distinct members (each worker listens once ready)."""
    deadline = time.monotonic() + 60
    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        while time.monotonic() < deadline:
            holders = [r.get(f"streamtx:{cluster}:coordinator:lease:{cid}") for cid in range(4)]
            if None not in holders and len({str(h).rpartition("|")[0] for h in holders}) == workers:
                return
            time.sleep(0.2)
    raise TimeoutError(f"the coordinator ids did not spread over {workers} workers")


def records_per_entry(data: Path) -> float:
    """Records over entries of every coordinator's transaction log under ``data``."""
    async def count() -> tuple[int, int]:
        ledgers = open_ledger_factory(f"file://{data}")
        records = entries = 0
        try:
            for cid in range(4):
                ledger = await ledgers.open(ledger_name(data.name, cid), writer=False)
                start = ledger.first_position()
                while start is not None:
                    got = await ledger.read(start, 1000)
                    if not got:
                        break
                    entries += len(got)
                    records += sum(len(decode_entry(e.data)) for e in got)
                    last = got[-1].position
                    start = Position(last.ledger_id, last.entry_id + 1)
                await ledger.close()
        finally:
            await ledgers.close()
        return records, entries

    records, entries = asyncio.run(count())
    return records / max(entries, 1)


def measure_buffer(mode: str, work: Path, redis_url: str, duration: int, script: Path,
                   run: int) -> tuple[LoadResult, float]:
    """4 workers on one port with the Redis buffer, or 4 replicas on 4 ports; the load and
    the records per entry it wrote."""
    data = work / f"{mode}-{run}"
    data.mkdir()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        if mode == "redis":
            proc, url = start_replica(data, redis_url, "w", workers=4)
            procs.append(proc)
            wait_workers(redis_url, data.name, 4)
            # The same four wrk processes of 16 connections as the in-process case, all on the one port.
            result = load([url] * 4, duration, script, "4 workers+redis")
        else:
            urls = []
            for i in range(4):
                proc, url = start_replica(data, redis_url, f"r{i}")
                procs.append(proc)
                urls.append(url)
            wait_spread(urls, 1)
            result = load(urls, duration, script, "4 in-process")
    finally:
        for p in procs:
            p.send_signal(signal.SIGINT)
        for p in procs:
            p.wait(30)
    return result, records_per_entry(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=10, help="seconds per load run (10)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="interleaved rounds; the best of each counts (2)")
    parser.add_argument("--only", choices=("tc", "broker", "redis"), action="append",
                        help="run only these measures (repeatable); the others print n/a")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk not found: run `make setup`")
    work = Path(tempfile.mkdtemp(prefix="streamtx-bench-scale-"))
    script = work / "post.lua"
    script.write_text(_LUA)
    loop_script = work / "create-abort.lua"
    loop_script.write_text(_CREATE_ABORT_LUA)
    best: dict[int, LoadResult] = {}
    best_brokers: dict[int, LoadResult] = {}
    best_buffer: dict[str, tuple[LoadResult, float]] = {}
    only = set(args.only or ("tc", "broker", "redis"))
    try:
        with redis_server() as redis_url:
            for run in range(args.rounds):
                for replicas in (1, 2) if "tc" in only else ():
                    r = measure(replicas, work, redis_url, args.duration, script, run)
                    print(r.line(), flush=True)
                    if replicas not in best or r.requests_per_s > best[replicas].requests_per_s:
                        best[replicas] = r
                for replicas in (1, 2) if "broker" in only else ():
                    r = measure_brokers(replicas, work, redis_url, args.duration, run)
                    print(r.line(), flush=True)
                    if r.requests_per_s > best_brokers.get(replicas, r).requests_per_s or \
                            replicas not in best_brokers:
                        best_brokers[replicas] = r
                for mode in ("redis", "in-process") if "redis" in only else ():
                    r, per_entry = measure_buffer(mode, work, redis_url, args.duration, loop_script, run)
                    print(f"{r.line()}  records/entry {per_entry:.1f}", flush=True)
                    if mode not in best_buffer or r.requests_per_s > best_buffer[mode][0].requests_per_s:
                        best_buffer[mode] = (r, per_entry)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    def ratio(two: LoadResult | None, one: LoadResult | None) -> str:
        return f"{two.requests_per_s / one.requests_per_s:.2f}" if two and one else "n/a"

    tc_x2 = ratio(best.get(2), best.get(1))
    broker_x2 = ratio(best_brokers.get(2), best_brokers.get(1))
    buffered, per_entry = best_buffer.get("redis", (None, None))
    alone, _ = best_buffer.get("in-process", (None, None))
    entry = f"{per_entry:.1f}" if per_entry is not None else "n/a"
    print(f"bench scale: tc_x2={tc_x2} broker_x2={broker_x2} redis_records_per_entry={entry} "
          f"redis_vs_inprocess={ratio(buffered, alone)}", flush=True)


if __name__ == "__main__":
    main()
