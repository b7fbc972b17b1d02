"""Unsubscribe (Pulsar's ``DELETE .../subscription/{sub}``): the cap counts one fewer, no restart
brings it back, 409 while a consumer is connected unless ``force``, 404 for an unknown one."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from tests.integration.broker.conftest import BrokerFactory, values

_SUBS = "/v1/topics/t/n/{topic}/subscriptions/{sub}"


def test_delete_frees_the_cap_and_survives_a_restart(broker_factory: BrokerFactory) -> None:
    b = broker_factory(max_subscriptions_per_topic=2)
    b.create_topic("u", 2)
    b.subscribe("u", "a")
    b.subscribe("u", "b")
    err = b.call("PUT", _SUBS.format(topic="u", sub="c"), 409, json={})
    assert "delete one first" in err["message"]

    b.produce("u", ["m0", "m1"], msg={"partition": 0})
    out = b.call("DELETE", _SUBS.format(topic="u", sub="a"))
    assert out == {"topic": "persistent://t/n/u", "subscription": "a", "deleted": True}
    b.call("PUT", _SUBS.format(topic="u", sub="c"), json={"initial_position": "earliest"})  # room again
    b.call("DELETE", _SUBS.format(topic="u", sub="a"), 404)  # gone: a second delete finds nothing
    b.call("GET", _SUBS.format(topic="u", sub="a") + "/stats", 404)

    b.proc.restart()
    b.call("GET", _SUBS.format(topic="u", sub="a") + "/stats", 404)  # not reopened from the catalog
    assert sorted(b.drain("u", "c")) == ["m0", "m1"]
    b.call("PUT", _SUBS.format(topic="u", sub="d"), 409, json={})  # still 2: b and c
    # Created again, it starts anew (its old cursors were deleted): earliest delivers everything.
    b.call("DELETE", _SUBS.format(topic="u", sub="b"))
    b.subscribe("u", "a")
    assert sorted(b.drain("u", "a")) == ["m0", "m1"]


def test_delete_with_a_consumer_needs_force(broker_factory: BrokerFactory) -> None:
    b = broker_factory()
    b.create_topic("f", 1)
    b.subscribe("f", "s", "Exclusive")
    b.produce("f", ["x"])
    assert values(b.fetch("f", "s", consumer="one")) == ["x"]
    err = b.call("DELETE", _SUBS.format(topic="f", sub="s"), 409)
    assert "force" in err["message"]
    b.call("DELETE", _SUBS.format(topic="f", sub="s"), 409, params={"force": "false"})
    b.call("DELETE", _SUBS.format(topic="f", sub="s"), params={"force": "true"})
    b.call("GET", _SUBS.format(topic="f", sub="s") + "/stats", 404)


def test_delete_of_unknown(broker_factory: BrokerFactory) -> None:
    b = broker_factory()
    b.create_topic("k", 1)
    err = b.call("DELETE", _SUBS.format(topic="k", sub="nope"), 404)
    assert "nope" in err["message"]
    b.call("DELETE", _SUBS.format(topic="nosuch", sub="nope"), 404)


def test_a_waiting_fetch_ends_empty_when_force_deleted(broker_factory: BrokerFactory) -> None:
    b = broker_factory()
    b.create_topic("w", 1)
    b.subscribe("w", "s")
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(b.fetch, "w", "s", wait_ms=4000)
        time.sleep(0.5)  # the fetch is waiting on the empty topic
        b.call("DELETE", _SUBS.format(topic="w", sub="s"), params={"force": "true"})
        started = time.monotonic()
        assert waiting.result() == []
        assert time.monotonic() - started < 2.5, "the fetch waited on a deleted subscription"
