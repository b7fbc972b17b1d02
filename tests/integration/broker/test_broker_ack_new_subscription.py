"""A subscription created after messages were written has dispatched none of them (issue 21 item 1,
found by the REST model test): an ack of one of them is refused and the message still delivered.

Everything readable when a subscription opens on a partition counts as dispatched after a broker
restart or a partition move (a previous process may have handed it out); a brand-new subscription
has no previous process. Before, its ``earliest`` cursor took the acks (200) of messages it never
delivered, individual or cumulative, and those were lost to it.
"""

from __future__ import annotations

from tests.integration.broker.conftest import BrokerClient, values


def test_a_new_subscription_refuses_acks_of_messages_written_before_it(broker: BrokerClient) -> None:
    broker.create_topic("late", 1)
    ids = [broker.produce("late", [f"m{k}"])["message_ids"][0] for k in range(3)]
    broker.subscribe("late", "s")
    assert broker.ack("late", "s", [ids[1]], expect=400)["error"] == "malformed"
    assert broker.ack("late", "s", [ids[2]], cumulative=True, expect=400)["error"] == "malformed"
    got = broker.fetch("late", "s", wait_ms=500)
    assert values(got) == ["m0", "m1", "m2"]
    broker.ack("late", "s", [got[-1]["message_id"]], cumulative=True)  # handed out: taken
    assert broker.fetch("late", "s", wait_ms=100) == []


def test_a_new_latest_subscription_takes_no_ack_of_what_came_before_it_either(broker: BrokerClient) -> None:
    broker.create_topic("latest", 1)
    before = broker.produce("latest", ["old"])["message_ids"][0]
    broker.subscribe("latest", "s", initial="latest")
    broker.produce("latest", ["new"])
    broker.ack("latest", "s", [before])  # before its start: acknowledged already (a no-op)
    assert values(broker.fetch("latest", "s", wait_ms=500)) == ["new"]


def test_a_fetch_stopped_by_its_max_has_not_dispatched_the_next_message(broker: BrokerClient) -> None:
    broker.create_topic("max", 1)
    broker.subscribe("max", "s")
    ids = [broker.produce("max", [f"m{k}"])["message_ids"][0] for k in range(3)]
    assert values(broker.fetch("max", "s", max=1)) == ["m0"]
    # The read pass looked at m1 and stopped there (max reached): m1 was handed to nobody.
    assert broker.ack("max", "s", [ids[1]], expect=400)["error"] == "malformed"
    assert broker.ack("max", "s", [ids[1]], cumulative=True, expect=400)["error"] == "malformed"
    assert values(broker.fetch("max", "s", wait_ms=500)) == ["m1", "m2"]


def test_a_fetch_stopped_by_its_max_inside_a_batch_has_not_dispatched_the_rest_of_it(
        broker: BrokerClient) -> None:
    broker.create_topic("batch", 1)
    broker.subscribe("batch", "s")
    ids = broker.produce("batch", ["b0", "b1", "b2"])["message_ids"]  # one entry, three messages
    assert values(broker.fetch("batch", "s", max=1)) == ["b0"]
    assert broker.ack("batch", "s", [ids[2]], expect=400)["error"] == "malformed"
    assert broker.ack("batch", "s", [ids[1]], cumulative=True, expect=400)["error"] == "malformed"
    entry = ids[0].rsplit(":", 1)[0]  # the whole entry: not all of it was handed out
    assert broker.ack("batch", "s", [entry], expect=400)["error"] == "malformed"
    assert values(broker.fetch("batch", "s", max=1)) == ["b1"]
    broker.ack("batch", "s", [ids[1]], cumulative=True)  # handed out now: taken
    assert values(broker.fetch("batch", "s", wait_ms=500)) == ["b2"]
    broker.ack("batch", "s", [ids[2]])
    assert broker.fetch("batch", "s", wait_ms=100) == []
