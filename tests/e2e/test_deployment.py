"""The whole deployment scaled out, judged by the resharding demo's checker.

Three coordinators, two brokers and two pending-ack stores as processes, every
log on the tansu Kafka-protocol broker, leases in a real redis-server. The
workload is the demo's resharding job (``streamtx demo reshard --url``: its
generator, two workers and probe against this deployment, through the entry
replica of each kind, which redirects to the owners); the demo's checker judges
the destination after each run. One deployment serves both cases, in order:

1. scale up: one coordinator owns all six ids while the job runs; two more
   join; the ids hand over (the owner flushes and releases) and end two by two,
   and the job sees only latency: no transaction aborted, nothing lost, checker clean;
2. kill -9, one kind after the other, the replica that owns the job's logs (the
   coordinator whose ids hold the job's transactions, the broker of the source
   topic, the pending-ack store of its subscription): each one's logs move to a
   survivor within the lease time (printed), then the killed ones restart and
   rejoin; every transaction the job asked to commit ends committed, the checker
   finds nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from streamtx.demo.layout import RunConfig, read_jsonl, worker_logs
from streamtx.demo.rest import full_name
from streamtx.demo.stats import DemoResult
from streamtx.demo.supervisor import Demo, Options
from streamtx.demo.verify import load_workers
from streamtx.transport.redirect import send_to_owner
from tests.conftest import kafka_url
from tests.support.replicas import COORDINATOR_IDS, Replicas
from tests.support.services import ServiceProcess
from tests.support.suite import eventually

# The default: on this shared 2-core machine a busy replica can miss renewals of a shorter lease
# (1.5 s lost the first coordinator every id under the job's load, load average ~25).
ttl_ms = 5000
# What the demo gives the suite it starts (supervisor.Demo), for this deployment's services.
ENV = {
    "STREAMTX_ACK_TIMEOUT_MS": "5000",
    "STREAMTX_TIMEOUT_CHECK_INTERVAL_MS": "200",
    "STREAMTX_STUCK_TXN_AFTER_S": "30",
    "STREAMTX_STUCK_TXN_INTERVAL_S": "2",
    "STREAMTX_FANOUT_MAX_BACKOFF_MS": "300",
    # The kill case asks every transaction's end once the job is over: with three kills and
    # restarts under load that can be minutes after the first ones ended, past the default
    # 60 s after which a coordinator forgets a finished transaction (it answers 404).
    "STREAMTX_FINISHED_RETENTION_MS": "900000",
}


@pytest.fixture(scope="module")
def deployment(kafka_bootstrap: str, redis_url: str,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    """Both brokers and pending-ack stores, and the first coordinator only (the scale-up starts
    the others)."""
    r = Replicas(kafka_url(kafka_bootstrap), redis_url, tmp_path_factory.mktemp("deployment"),
                 coordinators=3, brokers=2, pendingacks=2, ttl_ms=ttl_ms, env=ENV)
    try:
        for p in [*r.brokers, *r.pendingacks, r.tcs[0]]:
            p.start(60)
        yield r
    finally:
        r.stop()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10.0) as client:
        yield client


class Job:
    """The demo's job running against the deployment, in this test's event loop."""

    def __init__(self, demo: Demo) -> None:
        self.demo = demo
        self.task = asyncio.create_task(demo.run())

    @classmethod
    async def start(cls, r: Replicas, run_dir: Path, duration_s: float) -> Job:
        opts = Options(duration_s=duration_s, rate=300, workers=2, commit_interval_ms=300,
                       txn_timeout_ms=10_000, run_dir=run_dir, quiet=True, users=1000,
                       drain_timeout_s=60, url=r.tcs[0].url)
        job = cls(await asyncio.to_thread(Demo, opts))
        await eventually(job.flowing, timeout_s=60, what="the job's records to reach the destination")
        return job

    async def flowing(self) -> bool:
        if self.task.done():
            self.task.result()  # the run failed: say why
        return len(self.demo.probe.seen) > 0

    @property
    def cfg(self) -> RunConfig:
        return self.demo.cfg

    async def finish(self) -> DemoResult:
        """Wait for the run; the checker must find nothing, and the job must have caught up."""
        result, report = await self.task
        assert report.ok, report.render()
        assert self.demo.caught_up and len(self.demo.probe.seen) == self.demo.gen.written > 0
        return result


async def spread_is(http: httpx.AsyncClient, r: Replicas, expected: list[int]) -> bool:
    """Whether each coordinator owns as many ids as ``expected`` says (the first one's lookup)."""
    owners = [await _lookup(http, r.tcs[0].url, f"coordinator/{cid}") for cid in COORDINATOR_IDS]
    return [owners.count(tc.url) for tc in r.tcs] == expected


async def test_scale_up_from_one_to_three_coordinators_under_load(
        deployment: Replicas, http: httpx.AsyncClient, tmp_path: Path) -> None:
    r = deployment
    await eventually(lambda: spread_is(http, r, [6, 0, 0]), timeout_s=20,
                     what="the first coordinator to own all six ids")
    job = await Job.start(r, tmp_path, duration_s=18)
    # Both workers in the consumer group first: a worker joining late takes partitions over from
    # the other, whose transaction then conflicts on them and aborts (the consumer group's
    # rebalance, seen once in CI on a busy machine: the second transaction of the first worker).
    await eventually(lambda: all_committed(tmp_path, 2), timeout_s=60, what="both workers to commit")
    scale_from = time.time()
    await asyncio.gather(*(asyncio.to_thread(tc.start, 60) for tc in r.tcs[1:]))
    await eventually(lambda: spread_is(http, r, [2, 2, 2]), timeout_s=30,
                     what="the ids to end two by two over the three coordinators")
    await job.finish()
    # Only latency: a handover answers 307 or 503 not_owner, which the job's calls wait out.
    lines = [line for p in worker_logs(tmp_path) for line in read_jsonl(p)]
    opened = {line["txn"]: line["t"] for line in lines if line["o"] == "open"}
    ended_badly = [f"{line['txn']} {line['o']}: {line.get('why')}" for line in lines
                   if line["o"] in ("aborted", "refused") and opened.get(line["txn"], 0.0) >= scale_from]
    assert not ended_badly, "\n".join(ended_badly)


async def all_committed(run_dir: Path, workers: int) -> bool:
    """Whether each of the job's ``workers`` has committed a transaction."""
    logs = worker_logs(run_dir)
    return len(logs) == workers and all(
        any(line["o"] == "committed" for line in read_jsonl(p)) for p in logs)


async def test_kill_an_owner_of_each_kind_under_load(
        deployment: Replicas, http: httpx.AsyncClient, tmp_path: Path) -> None:
    r = deployment
    for tc in r.tcs:  # the scale-up case left them running, unless it failed
        if tc.proc is None or tc.proc.poll() is not None:
            await asyncio.to_thread(tc.start, 60)
    await eventually(lambda: spread_is(http, r, [2, 2, 2]), timeout_s=30, what="an even spread")
    job = await Job.start(r, tmp_path, duration_s=25)
    source = full_name(job.cfg.source_topic).replace("://", "/")
    # New transactions are made on the replica that receives them: the entry coordinator's ids.
    ids = [f"coordinator/{cid}" for cid in COORDINATOR_IDS
           if await _lookup(http, r.tcs[1].url, f"coordinator/{cid}") == r.tcs[0].url]
    topic = f"topic/{source}-partition-0"  # a partition is leased (and looked up) on its own
    sub = f"subscription/{source}/{job.cfg.subscription}-failover"
    # One kind after the other: with every kind's entry replica down at once, a move waits on
    # the others' (a broker taking a topic asks the pending-ack store what its subscriptions hold).
    await kill_and_move(http, r.tcs, r.tcs[0], ids)
    await kill_and_move(http, r.brokers, await owner_of(http, r.brokers, topic), [topic])
    await kill_and_move(http, r.pendingacks, await owner_of(http, r.pendingacks, sub), [sub])
    await job.finish()
    # Every transaction the job asked to commit ended (on whichever replica owns it now) as the
    # job was told: committed, or aborted where the commit was refused (it timed out meanwhile).
    history = load_workers(tmp_path)
    asked = sorted({line["txn"] for p in worker_logs(tmp_path) for line in read_jsonl(p)
                    if line["o"] == "committing"})
    states = {txn: await _state(http, r.tcs[1].url, txn) for txn in asked}
    told = {txn: "COMMITTED" if history.last[txn] == "committed" else "ABORTED" for txn in asked}
    assert history.committed > 0 and states == told


async def kill_and_move(http: httpx.AsyncClient, replicas: list[ServiceProcess], victim: ServiceProcess,
                        paths: list[str]) -> None:
    """kill -9 ``victim``; its ``paths`` (lookups) must move to a survivor; then it restarts."""
    assert paths, f"{victim.module} {victim.url} owns none of the job's logs"
    survivor = next(p for p in replicas if p is not victim)
    killed_at = time.monotonic()
    victim.kill9()

    async def moved() -> bool:
        owners = [await _lookup(http, survivor.url, p) for p in paths]
        return all(o is not None and o != victim.url for o in owners)

    await eventually(moved, timeout_s=30, what=f"{paths} to move off the killed {victim.module}")
    print(f"{victim.module}: {paths} moved {time.monotonic() - killed_at:.1f}s after kill -9 "
          f"(lease {ttl_ms} ms)")
    await asyncio.to_thread(victim.start, 60)


async def owner_of(http: httpx.AsyncClient, replicas: list[ServiceProcess], path: str) -> ServiceProcess:
    found: list[ServiceProcess] = []

    async def known() -> bool:
        owner = await _lookup(http, replicas[0].url, path)
        found[:] = [p for p in replicas if p.url == owner]
        return bool(found)

    await eventually(known, timeout_s=20, what=f"an owner of {path}")
    return found[0]


async def _lookup(http: httpx.AsyncClient, via: str, path: str) -> str | None:
    r = await http.get(f"{via}/lookup/v2/{path}")
    if r.status_code == 503:  # moving
        return None
    assert r.status_code == 200, r.text
    body = r.json()
    return body.get("owner") or body.get("httpUrl")


async def _state(http: httpx.AsyncClient, via: str, txn: str) -> str:
    got: list[str] = []

    async def ended() -> bool:
        r = await send_to_owner(http, "GET", f"{via}/v1/transactions/{txn}")
        assert r.status_code != 404, f"{txn} is unknown to its coordinator: {r.text}"
        got[:] = [r.json().get("state", r.text) if r.status_code == 200 else r.text]
        return got[0] in ("COMMITTED", "ABORTED", "TIMEOUT")

    try:
        await eventually(ended, timeout_s=30, what=f"transaction {txn} to end")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: it is {got[0] if got else 'unknown'}") from None
    return "ABORTED" if got[0] == "TIMEOUT" else got[0]  # aborted for outliving its timeout
