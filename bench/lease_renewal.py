"""Leases a replica loses while its event loop is busy: renewed on the loop, or on their own thread.

One replica holds 16 items with a 1.5 s lease (the multi-process tests' TTL) over
a real redis-server, while ``--tasks`` handlers of ``--chunk-ms`` CPU each stay
ready on its event loop (a service under load). Side by side in one run:

- ``on_loop``: a task on the service's loop renews every ``ttl / 3`` (one
  heartbeat, one pipelined renewal: what the loop did before the thread);
- ``thread``: :class:`~streamtx.ownership.renewer.Renewer`, as a started
  :class:`~streamtx.ownership.Ownership` runs it.

Each lost lease is an item closed and taken again (a replay, 503s meanwhile).
Last line: ``bench lease: on_loop_lost=<n> thread_lost=<n> (of <items> leases, <s> s, ...)``.

    make bench-lease     # or: .venv/bin/python bench/lease_renewal.py --tasks 10 --chunk-ms 20
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support; streamtx is installed

from tests.support.procs import redis_server

from streamtx.ownership import Lease, LeaseStore, Ownership

ITEMS = 16
TTL_MS = 1500


async def _busy(stop: asyncio.Event, chunk_ms: float) -> None:
    while not stop.is_set():
        end = time.perf_counter() + chunk_ms / 1000
        while time.perf_counter() < end:
            pass
        await asyncio.sleep(0)


async def _renew_on_loop(o: Ownership) -> None:
    while True:
        await o.keepalive()
        await asyncio.sleep(o.interval_s)


async def lost_leases(url: str, *, thread: bool, tasks: int, chunk_ms: float, seconds: float) -> int:
    leases = LeaseStore.from_url(url, cluster=f"bench{uuid.uuid4().hex[:6]}", service="pendingack")
    lost: list[str] = []

    async def acquire(item: str, lease: Lease) -> None:
        pass

    async def release(item: str, was_lost: bool) -> None:
        if was_lost:
            lost.append(item)

    o = Ownership(leases, member="a", url="http://a", items=[str(i) for i in range(ITEMS)], ttl_ms=TTL_MS,
                  on_acquire=acquire, on_release=release)
    renewing: asyncio.Task[None] | None = None
    if thread:
        o.start()
        await o.balanced.wait()
    else:
        await o.tick()
        renewing = asyncio.create_task(_renew_on_loop(o))
    stop = asyncio.Event()
    load = [asyncio.create_task(_busy(stop, chunk_ms)) for _ in range(tasks)]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not thread:
            await o.balance()  # the items lost are taken again, as the balance loop would
        await asyncio.sleep(o.interval_s)
    stop.set()
    await asyncio.gather(*load)
    if renewing is not None:
        renewing.cancel()
    await o.stop()
    await leases.aclose()
    return len(lost)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=5, help="handlers always ready on the loop")
    parser.add_argument("--chunk-ms", type=float, default=10.0, help="CPU each takes per turn")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)  # a lost lease logs an error: counted instead
    with redis_server() as url:
        on_loop = await lost_leases(url, thread=False, tasks=args.tasks, chunk_ms=args.chunk_ms,
                                    seconds=args.seconds)
        thread = await lost_leases(url, thread=True, tasks=args.tasks, chunk_ms=args.chunk_ms,
                                   seconds=args.seconds)
    print(f"bench lease: on_loop_lost={on_loop} thread_lost={thread} (of {ITEMS} leases, {args.seconds:g} s, "
          f"ttl {TTL_MS} ms, {args.tasks} handlers x {args.chunk_ms:g} ms on the loop)")


if __name__ == "__main__":
    asyncio.run(main())
