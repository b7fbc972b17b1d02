"""Broker replicas own partitions: the lease items, their spread, and a topic holding some of them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamtx.broker.notify import Notifier
from streamtx.broker.registry import partition_item, split_item, split_partition
from streamtx.broker.replicas.fanout import merge
from streamtx.broker.topic import Outgoing, Topic
from streamtx.errors import MalformedError, NotFoundError, NotOwnerError
from streamtx.ownership import assign
from streamtx.records.partition import Message

TOPIC = "persistent://t/n/hot"


def items(topic: str, partitions: int) -> list[str]:
    return [partition_item(topic, i) for i in range(partitions)]


def test_one_hot_topic_spreads_its_partitions_evenly_over_the_replicas() -> None:
    shares = assign(items(TOPIC, 8), ["b0", "b1"])
    assert sorted(len(s) for s in shares.values()) == [4, 4]
    assert sorted(shares["b0"] + shares["b1"]) == sorted(items(TOPIC, 8))
    # A third replica takes a share of the same topic: nobody holds more than one extra.
    assert sorted(len(s) for s in assign(items(TOPIC, 8), ["b0", "b1", "b2"]).values()) == [2, 3, 3]


@given(st.lists(st.integers(1, 16), min_size=1, max_size=6), st.integers(1, 5))
def test_every_partition_of_every_topic_has_one_owner_and_shares_differ_by_at_most_one(
        counts: list[int], replicas: int) -> None:
    all_items = [it for n, c in enumerate(counts) for it in items(f"persistent://t/n/x{n}", c)]
    shares = assign(all_items, [f"b{i}" for i in range(replicas)])
    owned = [i for s in shares.values() for i in s]
    assert sorted(owned) == sorted(all_items)
    sizes = [len(s) for s in shares.values()]
    assert max(sizes) - min(sizes) <= 1


def test_partition_names_split_back_into_topic_and_index() -> None:
    assert split_partition(f"{TOPIC}-partition-12") == (TOPIC, 12)
    assert split_partition(TOPIC) == (TOPIC, None)
    assert split_partition(f"{TOPIC}-partition-x") == (f"{TOPIC}-partition-x", None)
    # A topic whose own name ends in -partition-N: its partitions' names still split right.
    odd = f"{TOPIC}-partition-3"
    assert split_item(partition_item(odd, 1)) == (odd, 1)


def _topic_owning(indexes: list[int], count: int, owners: dict[int, str]) -> Topic:
    # No partition object is needed to route: routing refuses before anything is stored.
    topic = Topic(TOPIC, [], Notifier(), count=count, indexes=[], owner_of=owners.get)
    for i in indexes:
        topic.owned[i] = object()  # type: ignore[assignment]
    return topic


def _msg(partition: int | None = None, key: str | None = None) -> Outgoing:
    return Outgoing(Message(b"v", key, {}, 0), partition)


def test_a_message_routed_to_another_replicas_partition_is_refused_with_its_owner() -> None:
    topic = _topic_owning([0, 2], 4, {1: "http://b1", 3: "http://b1"})
    assert topic.route([_msg(0), _msg(2)]) == {0: [_msg(0).message], 2: [_msg(2).message]}
    with pytest.raises(NotOwnerError) as refused:
        topic.route([_msg(0), _msg(1)])
    assert refused.value.owner == "http://b1"
    with pytest.raises(NotOwnerError) as moving:
        _topic_owning([0], 2, {}).route([_msg(1)])
    assert moving.value.owner is None  # moving: 503, retry
    assert not topic.owns_all() and _topic_owning([0, 1], 2, {}).owns_all()


def test_a_request_on_a_partitions_own_name_stores_only_there() -> None:
    topic = _topic_owning([1], 4, {})
    assert list(topic.route([_msg(), _msg(key="k"), _msg(1)], only=1)) == [1]
    with pytest.raises(MalformedError):
        topic.route([_msg(2)], only=1)
    with pytest.raises(NotFoundError):
        topic.partition(4)
    with pytest.raises(NotOwnerError):
        topic.partition(0)


def _sub(backlog: int, mark: str | None, consumers: dict[str, int]) -> dict[str, object]:
    return {"type": "Shared", "msgBacklog": backlog, "unackedMessages": 1, "pendingRedelivery": 0,
            "heldByTransactions": 2, "msgOutCounter": sum(consumers.values()), "markDeletePositions": [mark],
            "consumers": [{"consumerName": n, "msgOutCounter": v} for n, v in consumers.items()],
            "activeConsumerName": None, "activeConsumers": None}


def test_a_spread_topics_stats_merge_its_partitions_answers_as_one_broker_would() -> None:
    parts = [{"topic": TOPIC, "storageSize": 10 * (i + 1), "replication": {},
              "partitions": [{"partition": partition_item(TOPIC, i), "storageSize": 10 * (i + 1)}],
              "subscriptions": {"s": _sub(i, f"{i}:5", {"c1": 1, f"only{i}": 2})}}
             for i in range(3)]
    del parts[2]["subscriptions"]["s"]  # its owner has not opened it yet
    got = merge(TOPIC, parts)
    assert got["storageSize"] == 60
    assert [p["partition"] for p in got["partitions"]] == items(TOPIC, 3)
    s = got["subscriptions"]["s"]
    assert (s["msgBacklog"], s["unackedMessages"], s["heldByTransactions"]) == (1, 2, 4)
    assert s["markDeletePositions"] == ["0:5", "1:5"]
    consumers = {c["consumerName"]: c["msgOutCounter"] for c in s["consumers"]}
    assert consumers == {"c1": 2, "only0": 2, "only1": 2}


def test_fanned_out_fetch_answers_and_acks_are_put_together_by_partition() -> None:
    from streamtx.broker.replicas.plan import SpreadPlan
    from streamtx.broker.replicas.spread import _count, _merge, by_owner
    from streamtx.contracts.msgid import parse_many
    from streamtx.wire import batch as wire

    def answer(partition: int, entry: int) -> bytes:
        body = wire.encode_messages([wire.Msg(b"v")])[1]
        return wire.encode_messages_answer([wire.Delivered(partition, 7, entry, 0, 1, body)])

    merged = _merge([answer(0, 1), answer(1, 2), _merge([], True)], True)
    assert _count(merged, True) == 2
    got = [(m.partition, m.message_id) for m in wire.decode_messages_answer(merged)]
    assert got == [(0, "7:1"), (1, "7:2")]
    assert _count(_merge([b'{"messages":[{"a":1}]}', b'{"messages":[]}'], False), False) == 1
    plan = SpreadPlan(TOPIC, 2, None, [0], {"http://b1": [1]}, _topic_owning([0], 2, {}), {10: 0, 11: 1})
    a, b, c = parse_many(["10:1", "11:2:0", "10:3"])
    assert by_owner(plan, [a, b, c]) == {"": [a, c], "http://b1": [b]}
    with pytest.raises(MalformedError):
        by_owner(plan, parse_many(["12:1"]))


def test_a_call_on_every_partition_answers_only_when_every_partition_did() -> None:
    from streamtx.broker.replicas.spread import every_partition
    from streamtx.errors import LedgerUnavailableError

    assert every_partition("trim", [0, 1], [{"p": 0}, {"p": 1}]) == [{"p": 0}, {"p": 1}]
    moving = NotOwnerError("partition 1 moved", None)
    with pytest.raises(NotOwnerError) as failed:  # the first failure's kind: 503, retry
        every_partition("trim of x", [0, 1, 2], [{"p": 0}, moving, LedgerUnavailableError("down")])
    err = failed.value
    assert err.status == 503 and err.retriable and err.__cause__ is moving
    assert "2 of 3 partitions failed (done: [0])" in err.message
    assert "partition 1: partition 1 moved" in err.message and "partition 2: down" in err.message
    bad = MalformedError("not a position of x-partition-0")
    with pytest.raises(MalformedError) as refused:
        every_partition("trim of x", [0, 1], [bad, {"p": 1}])
    assert refused.value.status == 400 and not refused.value.retriable
    with pytest.raises(ZeroDivisionError):  # a bug is raised as itself, not as an answer
        every_partition("trim of x", [0], [ZeroDivisionError()])
