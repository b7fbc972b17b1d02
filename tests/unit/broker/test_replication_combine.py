"""A topic's ``replication`` stats section put together from its partitions' (broker replicas
each answer for the partitions they own; :func:`streamtx.broker.replication.state.combine`)."""

from __future__ import annotations

from typing import Any

from streamtx.broker.replicas.fanout import merge
from streamtx.broker.replication.state import combine

TOPIC = "persistent://t/n/x"


def _row(n: int, *, connected: bool = True, delay: float = 0.0) -> dict[str, Any]:
    return {"msgRateIn": n / 10, "msgThroughputIn": n, "msgInCounter": n, "msgRateOut": n / 10,
            "msgThroughputOut": 2 * n, "msgOutCounter": n, "replicationBacklog": n,
            "replicationDelayInSeconds": delay, "connected": connected}


def test_counts_add_up_the_delay_is_the_oldest_and_connected_needs_every_partition() -> None:
    got = combine([{"b": _row(1, delay=0.5), "c": _row(4)},
                   {"b": _row(2, delay=3.0), "c": _row(5, connected=False)},
                   {"b": _row(3, delay=1.0)}])
    assert got["b"]["msgOutCounter"] == 6 and got["b"]["replicationBacklog"] == 6
    assert got["b"]["msgThroughputOut"] == 12
    assert got["b"]["replicationDelayInSeconds"] == 3.0
    assert got["b"]["connected"]
    # c: one partition does not reach it, another has no replicator towards it yet.
    assert got["c"]["msgOutCounter"] == 9 and not got["c"]["connected"]
    assert combine([{"b": _row(1)}, {}])["b"]["connected"] is False
    assert combine([]) == {} and combine([{}, {}]) == {}


def test_a_spread_topics_stats_carry_replication_as_one_broker_would() -> None:
    parts = [{"topic": TOPIC, "storageSize": 1, "partitions": [], "subscriptions": {},
              "replication": {"b": _row(i + 1)}} for i in range(2)]
    merged = merge(TOPIC, parts)["replication"]
    assert merged == combine([{"b": _row(1)}, {"b": _row(2)}])
    assert merged["b"]["msgInCounter"] == 3 and merged["b"]["connected"]
