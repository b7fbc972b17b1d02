"""What docs/internal-api.md promises about the end fan-out, retention and recovery."""

from __future__ import annotations

import asyncio

import httpx

from tests.integration.coordinator.conftest import TOPIC, ClientFactory, TcFactory
from tests.integration.coordinator.participant import Participant
from tests.support.procs import free_port, tansu_broker

P0, P1 = f"{TOPIC}-partition-0", f"{TOPIC}-partition-1"


async def test_a_participant_404_ends_the_retrying(
    file_url: str, tc_factory: TcFactory, client_factory: ClientFactory, participant: Participant
) -> None:
    tc = client_factory(tc_factory(file_url))
    for end in ("commit", "abort"):
        txn = await tc.create()
        await tc.add_partitions(txn, [P0, P1])
        participant.gone.add(P1)  # "nothing of this transaction here": the end counts as done
        expected = "COMMITTED" if end == "commit" else "ABORTED"
        assert (await tc.call("POST", f"/v1/transactions/{txn}/{end}"))["state"] == expected
        assert participant.count("partitions/end", txn, 404) == 1  # asked once, never again
        assert participant.actions(txn) == {("partition", P0): end}


async def test_a_participant_slower_than_the_request_timeout_is_asked_again(
    file_url: str, tc_factory: TcFactory, client_factory: ClientFactory, participant: Participant
) -> None:
    tc = client_factory(tc_factory(file_url, fanout_request_timeout_ms=300))
    txn = await tc.create()
    await tc.add_partitions(txn, [P0])
    participant.slow_ends, participant.slow_s = 1, 20.0  # the first end hangs for 20 s
    assert (await tc.commit(txn))["state"] == "COMMITTED"
    # The commit was finished by a second call while the first one still hung.
    assert participant.count("partitions/end slow", txn, 0) == 1
    assert participant.count("partitions/end slow", txn, 503) == 0, "the TC waited for the slow call"
    assert participant.count("partitions/end", txn, 200) == 1
    assert participant.actions(txn) == {("partition", P0): "commit"}


async def test_a_finished_transaction_answers_for_its_retention_then_404(
    file_url: str, tc_factory: TcFactory, client_factory: ClientFactory, participant: Participant
) -> None:
    tc = client_factory(tc_factory(file_url, finished_retention_ms=3000))
    txn = await tc.create()
    await tc.add_partitions(txn, [P0])
    await tc.commit(txn)
    assert (await tc.get(txn))["state"] == "COMMITTED"  # still answered ...
    assert (await tc.commit(txn))["state"] == "COMMITTED"  # ... and a repeated commit too
    deadline = asyncio.get_running_loop().time() + 30
    while (body := await tc.get(txn, expect=None)).get("state") == "COMMITTED":  # type: ignore[arg-type]
        assert asyncio.get_running_loop().time() < deadline, "never forgotten"
        await asyncio.sleep(0.1)
    assert body["error"] == "not_found", body  # ... then forgotten


async def test_503_while_a_coordinator_replays_then_ready(
    tc_factory: TcFactory, client_factory: ClientFactory, participant: Participant
) -> None:
    """Its log unreachable, the coordinator keeps replaying: healthy, not ready, 503 for its ids
    (404 for ids it does not own); once the log is there, it answers."""
    port = free_port()
    url = f"kafka://127.0.0.1:{port}?idempotence=false&delete_records=false&topic_prefix=replay."
    proc = tc_factory(url, ready=False)
    async with httpx.AsyncClient(base_url=proc.url, timeout=30) as http:
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            try:
                if (await http.get("/healthz")).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert asyncio.get_running_loop().time() < deadline, proc.log_tail()
            await asyncio.sleep(0.1)
        assert (await http.get("/readyz")).status_code == 503
        created = await http.post("/v1/transactions", json={})
        assert created.status_code == 503 and created.json()["error"] == "unavailable"
        assert (await http.get("/v1/transactions/0:7")).status_code == 503
        not_ours = f"{9 << 48}:7"  # coordinator 9's (the top 16 bits of "most")
        assert (await http.get(f"/v1/transactions/{not_ours}")).status_code == 404  # no waiting helps
        with tansu_broker(port=port):
            proc.wait_ready(60)
            tc = client_factory(proc)
            txn = await tc.create()
            assert (await tc.get(txn))["state"] == "OPEN"
            proc.stop()
