"""A participant that ended a transaction the other way is reported, not retried forever (issue 9, item 4)."""

from __future__ import annotations

import asyncio

from streamtx.contracts import Action, TxnId
from streamtx.peers import CoordinatorLookup
from tests.integration.coordinator.conftest import TOPIC, ClientFactory, TcFactory
from tests.integration.coordinator.participant import Participant

P0, P1 = f"{TOPIC}-partition-0", f"{TOPIC}-partition-1"


async def test_a_409_to_an_end_is_a_reported_violation_and_the_txn_finishes(
    file_url: str, tc_factory: TcFactory, client_factory: ClientFactory, participant: Participant
) -> None:
    tc = client_factory(tc_factory(file_url))
    txn = await tc.create()
    await tc.add_partitions(txn, [P0, P1])
    participant.ended_other_way.add(txn)  # e.g. its stuck-txn checker aborted it

    answer = await asyncio.wait_for(tc.commit(txn, expect=409), 30)
    assert "protocol violation" in answer["message"]
    assert (await tc.get(txn))["state"] == "COMMITTED"  # the decision stands: a final state
    await tc.commit(txn, expect=409)  # a repeat says the same
    assert participant.count("partitions/end", txn, status=409) == 2  # once per partition: no retries

    seen = await tc.admin("protocolViolations")
    assert seen[txn]["status"] == "COMMITTED"
    assert sorted(v["participant"] for v in seen[txn]["violations"]) == [f"partition {P0}", f"partition {P1}"]
    assert {v["action"] for v in seen[txn]["violations"]} == {"commit"}
    metrics = (await tc.http.get("/metrics")).text
    assert 'streamtx_txn_protocol_violations_total{cluster="standalone",coordinator_id="0"} 2.0' in metrics

    # A fenced participant (409 "fenced") is retried: its successor will answer.
    other = await tc.create()
    await tc.add_partitions(other, [P0])
    participant.fenced_ends = 2
    assert (await tc.commit(other))["state"] == "COMMITTED"
    assert participant.count("partitions/end", other, status=409) == 2
    assert participant.actions(other) == {("partition", P0): "commit"}
    assert other not in await tc.admin("protocolViolations")


async def test_the_broker_checker_does_not_read_not_served_here_as_abort(
    file_url: str, tc_factory: TcFactory, client_factory: ClientFactory
) -> None:
    """The coordinator's "unknown here" is an abort; "this coordinator id is not served here"
    is no verdict at all (the transaction may well be committing elsewhere)."""
    tc = client_factory(tc_factory(file_url))
    txn = await tc.create()
    await tc.add_partitions(txn, [P0])
    await tc.commit(txn)
    lookup = CoordinatorLookup(tc.proc.url, token=None)  # the broker's checker asks through it
    try:
        assert await lookup(TxnId(0, 999_999)) is Action.ABORT
        assert await lookup(TxnId(5 << 48, 0)) is None  # told apart by the code "not_served"
        assert await lookup(TxnId.parse(txn)) is Action.COMMIT
    finally:
        await lookup.aclose()
