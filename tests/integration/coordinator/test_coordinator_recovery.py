"""Recovery of a killed coordinator: decisions finished, timeouts from logged open
times, records deleted and trimmed, ids never reused."""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx

from tests.integration.coordinator.conftest import TOPIC, ClientFactory, TcFactory
from tests.integration.coordinator.participant import Participant

P0, P1 = f"{TOPIC}-partition-0", f"{TOPIC}-partition-1"
SUB = (TOPIC, "sub-a")


async def _wait_for(predicate: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def test_committing_and_aborting_finish_after_a_crash(
    backend_url: str, tc_factory: TcFactory, client_factory: ClientFactory, participant: Participant
) -> None:
    proc = tc_factory(backend_url)
    tc = client_factory(proc)
    committing, aborting = await tc.create(), await tc.create()
    for txn in (committing, aborting):
        await tc.add_partitions(txn, [P0, P1])
        await tc.add_subscriptions(txn, [SUB])

    participant.fail_ends = 10**9  # the decisions get logged, the fan-out cannot finish
    calls = [asyncio.create_task(tc.commit(committing, expect=None)),
             asyncio.create_task(tc.abort(aborting, expect=None))]
    await _wait_for(lambda: participant.count("partitions/end", committing, 503) >= 2
                    and participant.count("partitions/end", aborting, 503) >= 2)
    assert (await tc.get(committing))["state"] == "COMMITTING"
    assert (await tc.get(aborting))["state"] == "ABORTING"
    proc.kill9()
    for call in calls:
        with contextlib.suppress(httpx.HTTPError):
            await call
    participant.fail_ends = 0

    proc.start()  # recovery re-runs both fan-outs
    assert (await tc.wait_state(committing, {"COMMITTED"}))["partitions"] == [P0, P1]
    await tc.wait_state(aborting, {"ABORTED"})
    assert participant.actions(committing) == {
        ("partition", P0): "commit", ("partition", P1): "commit",
        ("subscription", f"{TOPIC}|sub-a"): "commit",
    }
    assert set(participant.actions(aborting).values()) == {"abort"}
    assert len(participant.actions(aborting)) == 3
    assert participant.violations == []
    assert await tc.commit(committing) == {"txn_id": committing, "state": "COMMITTED"}


async def test_timeouts_count_from_the_logged_open_time(
    backend_url: str, tc_factory: TcFactory, client_factory: ClientFactory, participant: Participant
) -> None:
    proc = tc_factory(backend_url)
    tc = client_factory(proc)
    short = await tc.create(timeout_ms=1000)
    await tc.add_partitions(short, [P0])
    long = await tc.create(timeout_ms=5000)
    opened_at = (await tc.get(long))["opened_at"]
    proc.kill9()
    await asyncio.sleep(1.5)  # the short one expires while no coordinator runs

    proc.start()
    restarted_ms = time.time() * 1000
    body = await tc.wait_state(short, {"TIMEOUT"}, timeout_s=5)
    assert body["partitions"] == [P0]
    assert participant.actions(short) == {("partition", P0): "abort"}
    await tc.commit(short, expect=409)
    assert (await tc.abort(short))["state"] == "TIMEOUT"
    # Expiry from the logged open time, not from the restart: the replay keeps it.
    assert (await tc.get(long))["opened_at"] == opened_at

    await tc.wait_state(long, {"TIMEOUT"}, timeout_s=10)
    # Counted from the restart it would expire 5 s after it; counted from the logged
    # open time, at least the 1.5 s the coordinator was down sooner.
    assert time.time() * 1000 < restarted_ms + 5000
    metrics = (await tc.http.get("/metrics")).text
    assert 'pulsar_txn_timeout_total{cluster="standalone",coordinator_id="0"} 2.0' in metrics


async def test_commit_past_the_timeout_is_refused(
    backend_url: str, tc_factory: TcFactory, client_factory: ClientFactory, participant: Participant
) -> None:
    tc = client_factory(tc_factory(backend_url))
    txn = await tc.create(timeout_ms=300)
    await tc.add_partitions(txn, [P0])
    await asyncio.sleep(0.4)
    await tc.add_partitions(txn, [P1], expect=409)
    err = await tc.commit(txn, expect=409)
    assert err["error"] == "conflict" and ("TIMEOUT" in err["message"] or "timed out" in err["message"])
    assert (await tc.get(txn))["state"] == "TIMEOUT"
    assert participant.actions(txn) == {("partition", P0): "abort"}


async def test_finished_records_are_deleted_and_ids_never_reused(
    tmp_path: object, tc_factory: TcFactory, client_factory: ClientFactory, participant: Participant
) -> None:
    url = f"file://{tmp_path}/ledgers?segment_bytes=2048"
    proc = tc_factory(url, finished_retention_ms=0, id_block_size=4)
    tc = client_factory(proc)
    seen: list[int] = []
    for _round in range(3):
        for i in range(12):
            txn = await tc.create()
            seen.append(int(txn.split(":")[1]))
            await tc.add_partitions(txn, [P0])
            await (tc.commit(txn) if i % 2 else tc.abort(txn))
        # Every finished transaction is forgotten and its records deleted ...
        await _wait_for_deleted(tc, f"0:{seen[-1]}")
        # ... and trimmed: only the last segment (which is never deleted) remains.
        deadline = time.monotonic() + 10
        while True:
            internal = (await tc.admin("coordinatorInternalStats/0"))["transactionLogStats"]
            if len(internal["ledgers"]) == 1:
                break
            assert time.monotonic() < deadline, internal
            await asyncio.sleep(0.05)
        assert internal["liveTransactions"] == 0
        proc.kill9()
        proc.start()
    txn = await tc.create()
    assert int(txn.split(":")[1]) > max(seen)
    assert len(set(seen)) == len(seen)
    assert participant.violations == []


async def _wait_for_deleted(tc: object, txn: str) -> None:
    deadline = time.monotonic() + 10
    while (await tc.get(txn, expect=None)).get("error") != "not_found":  # type: ignore[attr-defined]
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)


async def test_a_second_process_fences_the_first(
    file_url: str, tc_factory: TcFactory, client_factory: ClientFactory, participant: Participant
) -> None:
    first = client_factory(tc_factory(file_url))
    txn = await first.create()
    await first.add_partitions(txn, [P0])
    second = client_factory(tc_factory(file_url))  # same coordinator id, same log
    assert (await second.get(txn))["partitions"] == [P0]
    # The first one's next write hits the second one's fence: 503, never a split brain.
    err = await first.call("POST", "/v1/transactions", 503, json={})
    assert "lost its log" in err["message"]
    await first.commit(txn, expect=503)
    assert (await first.http.get("/readyz")).status_code == 503
    assert (await first.admin("coordinatorStats"))["0"]["state"] == "Fenced"
    assert (await second.commit(txn))["state"] == "COMMITTED"
    assert participant.actions(txn) == {("partition", P0): "commit"}
    new = await second.create()
    assert int(new.split(":")[1]) > int(txn.split(":")[1])
