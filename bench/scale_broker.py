"""``broker_x2`` of ``make bench-scale``: produce+fetch throughput of two broker replicas over one.

ONE hot topic of eight partitions with a Shared subscription, on file ledgers
(fsync before every answer); the brokers lease its PARTITIONS in one Redis (even
the single one, so both cases pay the same), so the one topic spreads four and
four over two brokers. The load is wrk, closed loop per connection: produce 10
messages of 100 bytes to a partition (its own name, ``bench-partition-N``, as the
SDK sends), fetch up to 10 from the subscription on that partition (no wait),
acknowledge what came, next partition, ... (wrk's Lua state is per thread: the
acks of a fetch go out on the thread's next request). Each connection talks to
the owner of its partitions, as the SDK does once it has cached the owners: 64
connections to the one broker over the eight partitions, or 32 to each of the
two over the four partitions each owns. Throughput is requests per second
(produces, fetches and acks).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support; streamtx is installed

from tests.support.procs import free_port, python_env

from coordinator import LoadResult, run_wrk
from streamtx.broker.partition import partition_ledger_name
from streamtx.ledger import ledger_id_for
from streamtx.service.readiness import wait_ready

TOPIC = "t/n/bench"
PARTITIONS = 8
TOPICS = [f"{TOPIC}-partition-{i}" for i in range(PARTITIONS)]  # each partition's own name

# {TOPICS}: a Lua list of the partition paths this wrk process loads; {LEDGERS}: a table of
# their ledger ids (a message id's first part) to the path. wrk keeps
# one Lua state per thread, shared by its connections, so what a fetch answered is
# queued (its acks go out on the next request of any connection), not kept per connection.
_PRODUCE_FETCH_LUA = """
local topics = {TOPICS}
local ledgers = {LEDGERS}
local value = string.rep("A", 136)  -- 100 bytes, base64
local one = '{"value":"' .. value .. '"}'
local body = '{"messages":[' .. string.rep(one .. ',', 9) .. one .. ']}'
local json = {["Content-Type"] = "application/json"}
local n, acks, head, tail = 0, {}, 1, 0
request = function()
  if head <= tail then
    local ack = acks[head]
    acks[head] = nil
    head = head + 1
    return wrk.format("POST", ack[1], json, ack[2])
  end
  n = n + 1
  local t = topics[(math.floor(n / 2) % #topics) + 1]
  if n % 2 == 0 then
    return wrk.format("POST", "/v1/topics/" .. t .. "/messages", json, body)
  end
  return wrk.format("GET", "/v1/topics/" .. t .. "/subscriptions/bench/messages?max=10&wait_ms=0")
end
response = function(status, headers, body)
  local ids, ledger = {}, nil
  for id in string.gmatch(body, '"message_id":"([^"]+)"') do
    ids[#ids + 1] = '"' .. id .. '"'
    ledger = ledger or string.match(id, "^(%d+):")
  end
  if ledger and not string.find(body, '"message_ids"', 1, true) then  -- a fetch's answer
    tail = tail + 1
    acks[tail] = {"/v1/topics/" .. ledgers[ledger] .. "/subscriptions/bench/acks",
                  '{"message_ids":[' .. table.concat(ids, ",") .. ']}'}
  end
end
"""


def ledger_of(partition: str) -> int:
    """The ledger id in the message ids of ``partition`` (``t/n/x-partition-N``)."""
    return ledger_id_for(partition_ledger_name(f"persistent://{partition}"))


def start_broker(data: Path, redis_url: str, name: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **python_env(),
        "STREAMTX_HOST": "127.0.0.1", "STREAMTX_PORT": str(port), "STREAMTX_LEDGER_URL": f"file://{data}",
        "STREAMTX_REDIS_URL": redis_url, "STREAMTX_LEASE_TTL_MS": "2000", "STREAMTX_ADVERTISED_URL": url,
        "STREAMTX_MEMBER": name, "STREAMTX_CLUSTER": data.name,
    }
    with (data.parent / f"{data.name}-{name}.log").open("ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "streamtx.broker"], env=env, stdout=log, stderr=log)
    wait_ready(url, proc, timeout_s=60)
    return proc, url


def owned(urls: list[str]) -> dict[str, list[str]]:
    """Each broker's partitions, once every partition and its subscription is open at its owner
    and each broker has its share."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out: dict[str, list[str]] = {u: [] for u in urls}
        for t in TOPICS:
            r = httpx.get(f"{urls[0]}/lookup/v2/topic/persistent/{t}")
            if r.status_code == 200 and r.json()["httpUrl"] in out:
                out[r.json()["httpUrl"]].append(t)
        opened = all(httpx.get(f"{u}/v1/topics/{t}/subscriptions/bench/stats").status_code == 200
                     for u, ts in out.items() for t in ts)
        if sum(map(len, out.values())) == len(TOPICS) and opened and \
                all(len(ts) == len(TOPICS) // len(urls) for ts in out.values()):
            return out
        time.sleep(0.2)
    raise TimeoutError(f"the partitions did not spread over {urls}")


Start = Callable[[str], tuple[subprocess.Popen[bytes], str]]


@contextlib.contextmanager
def started(start: Start, names: list[str]) -> Iterator[list[str]]:
    """The URLs of processes ``start(name)`` started, stopped (SIGINT) on the way out."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        urls = []
        for name in names:
            proc, url = start(name)
            procs.append(proc)
            urls.append(url)
        yield urls
    finally:
        for p in procs:
            p.send_signal(signal.SIGINT)
        for p in procs:
            p.wait(30)


def summed(name: str, parts: list[LoadResult]) -> LoadResult:
    """Loads run side by side as one: throughputs and errors added, the worst latencies."""
    return LoadResult(name, sum(p.requests_per_s for p in parts), max(p.p50_ms for p in parts),
                      max(p.p99_ms for p in parts), sum(p.errors for p in parts))


def measure_brokers(replicas: int, work: Path, redis_url: str, duration: int, run: int) -> LoadResult:
    data = work / f"broker{replicas}-{run}"
    data.mkdir()
    names = [f"b{i}" for i in range(replicas)]
    with started(lambda name: start_broker(data, redis_url, name), names) as urls:
        r = httpx.put(f"{urls[0]}/admin/v2/persistent/{TOPIC}/partitions", json={"partitions": PARTITIONS},
                      timeout=30)
        r.raise_for_status()
        # Recorded by whichever broker receives it; each owner opens it on its partitions.
        r = httpx.put(f"{urls[0]}/v1/topics/{TOPIC}/subscriptions/bench",
                      json={"initial_position": "earliest", "type": "Shared"}, timeout=30)
        r.raise_for_status()
        placed = owned(urls)
        name = f"{replicas} broker{'s' if replicas > 1 else ''}"
        per = 64 // replicas

        def one(u: str) -> LoadResult:
            script = data / f"load-{u.rsplit(':', 1)[1]}.lua"
            ledgers = ", ".join(f'["{ledger_of(t)}"] = "{t}"' for t in placed[u])
            script.write_text(_PRODUCE_FETCH_LUA.replace(
                "{TOPICS}", "{" + ", ".join(f'"{t}"' for t in placed[u]) + "}").replace(
                "{LEDGERS}", "{" + ledgers + "}"))
            return run_wrk(name, u, duration, script, connections=per, threads=1)

        with ThreadPoolExecutor(replicas) as pool:
            return summed(name, list(pool.map(one, urls)))
