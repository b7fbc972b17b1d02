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


async def test_a_400_to_an_end_is_a_reported_violation_never_retried_for_ever(
    file_url: str, tc_factory: TcFactory, client_factory: ClientFactory, participant: Participant
) -> None:
    """Issue 21 item 4: a participant that cannot end what was registered (400) would refuse every
    retry; the transaction sat in COMMITTING for ever and its messages held the partition back."""
    tc = client_factory(tc_factory(file_url))
    txn = await tc.create()
    await tc.add_partitions(txn, [P0, P1])
    participant.malformed.add(P1)

    answer = await asyncio.wait_for(tc.commit(txn, expect=409), 30)
    assert "protocol violation" in answer["message"]
    assert (await tc.get(txn))["state"] == "COMMITTED"
    assert participant.count("partitions/end", txn, status=400) == 1  # asked once: no retries
    assert participant.actions(txn) == {("partition", P0): "commit"}
    seen = await tc.admin("protocolViolations")
    assert [v["participant"] for v in seen[txn]["violations"]] == [f"partition {P1}"]
    assert seen[txn]["violations"][0]["answer"].startswith("400 malformed")


async def test_a_topic_name_is_refused_where_a_partition_name_belongs(
    file_url: str, tc_factory: TcFactory, client_factory: ClientFactory, participant: Participant
) -> None:
    """Issue 21 item 4: registered, a topic's name could never be ended (the broker ends partitions)."""
    tc = client_factory(tc_factory(file_url))
    txn = await tc.create()
    for wrong in (TOPIC, f"{TOPIC}-partition-", f"{TOPIC}-partition-01", f"{TOPIC}-partition-x"):
        answer = await tc.add_partitions(txn, [P0, wrong], expect=400)
        assert answer["error"] == "malformed" and "partition" in answer["message"], answer
    assert (await tc.get(txn))["partitions"] == []  # nothing of a refused request was registered
    await tc.add_partitions(txn, [P0])
    # Subscriptions may name the topic (the acks and their end go to the topic's name).
    await tc.add_subscriptions(txn, [(TOPIC, "s")])
    assert (await tc.commit(txn))["state"] == "COMMITTED"
    assert participant.actions(txn) == {("partition", P0): "commit", ("subscription", f"{TOPIC}|s"): "commit"}


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
