"""Acks may name only messages dispatched to the subscription (issue 21 item 1), over real HTTP.

Each of these answered 200 on the code before the fix and lost or hid messages: an ack of an
id not yet written hid the message later written there, a cumulative ack past the end
swallowed what came next, and ids like ``L:-1`` or ``"L: 1"`` were taken as numbers.
"""

from __future__ import annotations

from tests.integration.broker.conftest import BrokerClient, values


def _ledger_and_entry(message_id: str) -> tuple[int, int]:
    ledger, entry = message_id.split(":")[:2]
    return int(ledger), int(entry)


def _start(broker: BrokerClient, topic: str) -> tuple[int, int]:
    """A topic with one message fetched (not acked): its ledger and entry id."""
    broker.create_topic(topic, 1)
    broker.subscribe(topic, "s")
    broker.produce(topic, ["m0"])
    got = broker.fetch(topic, "s")
    assert values(got) == ["m0"]
    broker.ack(topic, "s", [got[0]["message_id"]])
    return _ledger_and_entry(got[0]["message_id"])


def test_an_ack_of_an_id_not_yet_written_is_refused_and_its_message_delivered(broker: BrokerClient) -> None:
    ledger, entry = _start(broker, "future")
    refused = broker.ack("future", "s", [f"{ledger}:{entry + 3}"], expect=400)
    assert refused["error"] == "malformed" and "never delivered" in refused["message"]
    sent = [broker.produce("future", [f"m{k}"])["message_ids"][0] for k in range(1, 5)]
    assert _ledger_and_entry(sent[2]) == (ledger, entry + 3)  # the id the ack named now exists
    assert values(broker.fetch("future", "s", wait_ms=500)) == ["m1", "m2", "m3", "m4"]


def test_a_written_message_not_yet_dispatched_cannot_be_acked(broker: BrokerClient) -> None:
    _start(broker, "undispatched")
    later = broker.produce("undispatched", ["m1"])["message_ids"][0]
    broker.ack("undispatched", "s", [later], expect=400)  # nobody was handed it yet
    assert values(broker.fetch("undispatched", "s", wait_ms=500)) == ["m1"]
    broker.ack("undispatched", "s", [later])  # once handed out, it may be


def test_a_cumulative_ack_past_the_last_dispatched_id_swallows_nothing(broker: BrokerClient) -> None:
    ledger, entry = _start(broker, "cumulative")
    broker.ack("cumulative", "s", [f"{ledger}:{entry + 5}"], cumulative=True, expect=400)
    broker.produce("cumulative", [f"m{k}" for k in range(1, 8)])
    for k in range(1, 8):
        broker.produce("cumulative", [f"n{k}"])
    got = broker.fetch("cumulative", "s", wait_ms=500)
    assert values(got) == [f"m{k}" for k in range(1, 8)] + [f"n{k}" for k in range(1, 8)]
    broker.ack("cumulative", "s", [got[-1]["message_id"]], cumulative=True)  # the last one handed out
    assert broker.fetch("cumulative", "s", wait_ms=100) == []


def test_a_far_future_cumulative_ack_does_not_stop_delivery(broker: BrokerClient) -> None:
    ledger, _ = _start(broker, "far")
    broker.ack("far", "s", [f"{ledger}:1000000000000"], cumulative=True, expect=400)
    broker.ack("far", "s", [f"{ledger}:1000000000000"], expect=400)
    broker.produce("far", ["after"])
    assert values(broker.fetch("far", "s", wait_ms=500)) == ["after"]


def test_ids_that_are_not_unsigned_decimals_are_400(broker: BrokerClient) -> None:
    ledger, entry = _start(broker, "spelling")
    for bad in (f"{ledger}:-1", f"{ledger}:{entry}:-1", f"{ledger}: {entry}", f" {ledger}:{entry}",
                f"+{ledger}:{entry}", f"{ledger}:+{entry}", f"{ledger}:{entry} ", f"-{ledger}:{entry}"):
        for cumulative in (False, True):
            got = broker.ack("spelling", "s", [bad], cumulative=cumulative, expect=400)
            assert got["error"] == "malformed", bad
    broker.produce("spelling", ["after"])
    assert values(broker.fetch("spelling", "s", wait_ms=500)) == ["after"]
