"""Bounded resources (issue 9, items 9-12), measured on real service processes.

Prints, for the tree it runs from:

* made-up names: a pending-ack store's open file descriptors and threads
  before and after ``GET /v1/pendingack/held`` with N subscription names nobody
  created (``/proc/<pid>/fd``, ``/proc/<pid>/task``);
* a big body: the broker's answer to a produce request with a B MiB body, and
  its peak memory (VmHWM) after it;
* Ctrl-C: how long the broker takes to exit on SIGINT while a fetch long-polls,
  what that fetch got, and whether its log holds a traceback;
* producer snapshot: the snapshot JSON of one producer's table after 40
  requests of 500 messages, and with 20,000 producer names (memory ledger).

To compare with an older commit, run the same file from a checkout of it::

    git worktree add /tmp/old <commit>
    cd /tmp/old && PYTHONPATH=shared:services:. python /path/to/bench/bounded.py

(it only talks HTTP to the services and uses the broker's partition and
snapshot capture, which both versions have).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support; streamtx is installed

from tests.support.services import ServiceProcess


def usage(proc: ServiceProcess) -> tuple[int, int]:
    assert proc.proc is not None
    pid = proc.proc.pid
    return len(os.listdir(f"/proc/{pid}/fd")), len(os.listdir(f"/proc/{pid}/task"))


def peak_rss_mib(proc: ServiceProcess) -> float:
    assert proc.proc is not None
    with open(f"/proc/{proc.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def made_up_names(tmp: str, names: int) -> str:
    proc = ServiceProcess("pendingack", {"STREAMTX_LEDGER_URL": f"file://{tmp}/pa",
                                         "STREAMTX_TEST_LOG_DIR": tmp}).start()
    try:
        with httpx.Client(base_url=proc.url, timeout=60) as c:
            c.get("/metrics")
            before = usage(proc)
            statuses: dict[int, int] = {}
            for i in range(names):
                r = c.get("/v1/pendingack/held",
                          params={"topic": "persistent://t/n/x-partition-0", "subscription": f"made-up-{i}"})
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            after = usage(proc)
    finally:
        proc.stop()
    return (f"{names} made-up names: answers {statuses}; fds {before[0]} -> {after[0]}, "
            f"threads {before[1]} -> {after[1]}")


def big_body(tmp: str, mib: int) -> str:
    proc = ServiceProcess("broker", {"STREAMTX_LEDGER_URL": f"file://{tmp}/big",
                                     "STREAMTX_TEST_LOG_DIR": tmp}).start()
    try:
        with httpx.Client(base_url=proc.url, timeout=120) as c:
            c.put("/admin/v2/persistent/t/n/big/partitions", json={"partitions": 1})
            rss0 = peak_rss_mib(proc)
            body = b'{"messages": [{"value": "' + b"A" * (mib << 20) + b'"}]}'
            t0 = time.perf_counter()
            r = c.post("/v1/topics/t/n/big/messages", content=body,
                       headers={"content-type": "application/json"})
            took = time.perf_counter() - t0
            rss1 = peak_rss_mib(proc)
    finally:
        proc.stop()
    return (f"{mib} MiB body: {r.status_code} {r.text[:90]!r} in {took:.2f} s; "
            f"broker peak RSS {rss0:.0f} -> {rss1:.0f} MiB")


def ctrl_c(tmp: str) -> str:
    proc = ServiceProcess("broker", {"STREAMTX_LEDGER_URL": f"file://{tmp}/cc",
                                     "STREAMTX_TEST_LOG_DIR": tmp}).start()
    got: dict[str, Any] = {}
    with httpx.Client(base_url=proc.url, timeout=60) as c:
        c.put("/admin/v2/persistent/t/n/cc/partitions", json={"partitions": 1})
        c.put("/v1/topics/t/n/cc/subscriptions/s", json={"initial_position": "earliest"})

    def fetch() -> None:
        try:
            r = httpx.get(f"{proc.url}/v1/topics/t/n/cc/subscriptions/s/messages",
                          params={"wait_ms": 25_000}, timeout=60)
            got["fetch"] = f"{r.status_code} {r.text}"
        except httpx.HTTPError as exc:
            got["fetch"] = repr(exc)

    thread = threading.Thread(target=fetch)
    thread.start()
    time.sleep(1.0)  # let the fetch start waiting (a figure, not a test)
    assert proc.proc is not None
    t0 = time.perf_counter()
    proc.proc.send_signal(signal.SIGINT)
    code = proc.proc.wait(60)
    took = time.perf_counter() - t0
    thread.join(60)
    tb = "Traceback" in proc.log_path.read_text(errors="replace")
    return (f"SIGINT with a fetch waiting: exit {code} after {took:.2f} s; fetch got {got.get('fetch')}; "
            f"traceback in log: {tb}")


async def producer_snapshot() -> str:
    from streamtx.broker.notify import Notifier
    from streamtx.broker.partition import Partition
    from streamtx.broker.settings import BrokerSettings
    from streamtx.broker.txnbuffer import snapshot as tbsnapshot
    from streamtx.records.partition import Message, ProducerInfo
    try:
        from streamtx.ledger import open_ledger_factory as open_ledger_factory
    except ImportError:  # an older tree
        from streamtx.ledger import open_ledger_factory  # type: ignore[attr-defined,no-redef]

    ledgers = open_ledger_factory("memory://")
    settings = BrokerSettings(snapshot_every_ops=10**9)  # type: ignore[call-arg]
    part = await Partition.open(ledgers, "persistent://t/n/x-partition-0", "persistent://t/n/x", settings,
                                Notifier())
    for seq in range(40):
        await part.produce([Message(b"v", request_index=i) for i in range(500)], None,
                           ProducerInfo("busy", 1, seq), None)
    _, ix = tbsnapshot.capture(part.tb, part.producers, 0)
    one = len(json.dumps(ix.producers, separators=(",", ":")))
    for i in range(20_000):
        await part.produce([Message(b"v")], None, ProducerInfo(f"p{i}", 1, 0), None)
    _, ix = tbsnapshot.capture(part.tb, part.producers, 0)
    many = len(json.dumps(ix.producers, separators=(",", ":")))
    return (f"producer snapshot JSON: one producer after 40 requests of 500 messages {one} bytes; "
            f"after 20,000 more names {len(part.producers.producers)} names, {many} bytes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--names", type=int, default=300)
    ap.add_argument("--body-mib", type=int, default=64)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(made_up_names(tmp, args.names), flush=True)
        print(big_body(tmp, args.body_mib), flush=True)
        print(ctrl_c(tmp), flush=True)
    print(asyncio.run(producer_snapshot()), flush=True)


if __name__ == "__main__":
    main()
