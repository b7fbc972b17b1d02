"""The controller's ack sync against a scripted broker: cadence, only news written, no echo, late entries."""

from __future__ import annotations

from typing import Any

import pytest

from streamtx.contracts.ackset import AckSet
from streamtx.ledger import Position
from streamtx.replication.acksync import AckSync
from tests.support.wire import body_of


def wire(*spans: tuple[str, int, int]) -> list[dict[str, Any]]:
    return AckSet.build([[(c, 1, e) for e in range(lo, hi + 1)] for c, lo, hi in spans], []).to_wire()


class Broker:
    """Answers the controller's calls: ``export`` is what the next export returns (``token`` its version)."""

    def __init__(self) -> None:
        self.export: list[dict[str, Any]] | None = []
        self.token = 0
        self.missing: list[list[Any]] = []  # origins the next apply does not find all of
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def request(self, method: str, path: str, json: Any) -> dict[str, Any]:
        json = body_of(json)
        self.calls.append((path, json))
        if path.endswith("/acks/export"):
            token = f"t{self.token}"
            return {"token": token, "origins": None if json["known"] == token else self.export}
        if path.endswith("/acks/apply"):
            return {"subscription": json["subscription"], "acked": 2, "complete": not self.missing,
                    "missing": self.missing, "next": "1:50"}
        return {}

    def paths(self) -> list[str]:
        return [p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1] for p, _ in self.calls]

    def markers(self) -> list[dict[str, Any]]:
        return [j["marker"] for p, j in self.calls if p.endswith("/markers")]


def make(broker: Broker, period_s: float = 0.0) -> AckSync:
    return AckSync(local=broker, cluster="b", topic="persistent://t/n/x", partition=0,  # type: ignore[arg-type]
                   period_s=period_s, back=100)


async def test_a_marker_only_for_news_and_never_for_an_idle_subscription() -> None:
    broker = Broker()
    sync = make(broker)
    await sync.sync(["s"], False)  # nothing acked: no marker
    assert broker.markers() == []
    broker.export, broker.token = wire(("a", 3, 5)), 1
    await sync.sync(["s"], False)
    assert broker.markers() == [{"type": "acks", "subscription": "s", "origins": wire(("a", 3, 5))}]
    await sync.sync(["s"], False)  # unchanged cursor: the broker reads nothing, no marker
    assert broker.calls[-1][1]["known"] == "t1" and len(broker.markers()) == 1
    broker.export, broker.token = wire(("a", 4, 5)), 2  # less (the mark-delete moved): nothing new
    await sync.sync(["s"], False)
    broker.export, broker.token = wire(("a", 3, 7)), 3
    await sync.sync(["s"], False)
    assert len(broker.markers()) == 2 and sync.markers == 2


async def test_once_per_period() -> None:
    broker = Broker()
    sync = make(broker, period_s=3600)
    await sync.sync(["s"], False)
    await sync.sync(["s"], False)
    assert broker.paths() == ["acks/export"]


async def test_exports_start_past_the_update_before_the_last() -> None:
    # An update covers the remotes only up to where its snapshot's first request
    # reached them: what was written here between that request and the snapshot's
    # local position is named again, from the snapshot before it.
    broker = Broker()
    sync = make(broker)
    await sync.sync(["s"], False)
    sync.updated("s", Position(9, 41))
    await sync.sync(["s"], False)
    sync.updated("s", Position(9, 57))
    await sync.sync(["s"], False)
    assert [j["after"] for _, j in broker.calls] == [None, None, "9:41"]
    assert broker.calls[0][1]["back"] == 100


async def test_acks_applied_from_elsewhere_are_not_echoed() -> None:
    broker = Broker()
    sync = make(broker)
    await sync.apply({"type": "acks", "subscription": "s", "origins": wire(("a", 1, 9))}, "a")
    broker.export, broker.token = wire(("a", 2, 4), ("a", 6, 9)), 1  # what that did to our cursor
    await sync.sync([], False)  # the scan before the apply did not list the new subscription yet
    await sync.sync(["s"], False)
    assert broker.markers() == [] and sync.applied == 2


def applies(broker: Broker) -> list[dict[str, Any]]:
    return [j for p, j in broker.calls if p.endswith("/acks/apply")]


async def test_a_marker_naming_entries_still_on_their_way_is_applied_again_when_messages_arrive() -> None:
    broker = Broker()
    sync = make(broker)
    broker.missing = [["c", 1]]
    marker = {"type": "acks", "subscription": "s", "origins": wire(("a", 1, 4), ("c", 1, 9))}
    await sync.apply(marker, "a")
    await sync.sync(["s"], False)  # nothing arrived: not again
    assert len(applies(broker)) == 1 and sync.status()["lateAckMarkers"] == 1
    await sync.sync(["s"], True)
    # Again, only what is missing, from where the last walk ended (only what arrived since).
    assert applies(broker)[1]["origins"] == wire(("c", 1, 9)) and applies(broker)[1]["start"] == "1:50"
    broker.missing = []
    await sync.sync(["s"], True)
    await sync.sync(["s"], True)  # complete now: done with it
    assert len(applies(broker)) == 3 and sync.incomplete == {}


async def test_late_entries_are_waited_for_as_long_as_it_takes() -> None:
    # However long the third cluster's messages take, they are acknowledged once here:
    # given up, they would come again after a failover.
    broker = Broker()
    sync = make(broker)
    broker.missing = [["c", 1]]
    await sync.apply({"type": "acks", "subscription": "s", "origins": wire(("c", 1, 9))}, "a")
    for _ in range(5):
        await sync.sync(["s"], True)
    assert len(applies(broker)) == 6 and sync.incomplete
    await sync.sync([], True)  # the subscription is gone here: nothing to wait for (nor to create again)
    assert sync.incomplete == {} and len(applies(broker)) == 6


async def test_the_writers_next_marker_is_applied_with_what_its_earlier_ones_still_miss() -> None:
    # The next marker need not name them again (its export starts past the last updates).
    broker = Broker()
    sync = make(broker)
    broker.missing = [["c", 1]]
    await sync.apply({"type": "acks", "subscription": "s", "origins": wire(("c", 1, 9))}, "a")
    broker.missing = []
    await sync.apply({"type": "acks", "subscription": "s", "origins": wire(("a", 20, 30))}, "a")
    last = applies(broker)[-1]
    assert last["origins"] == wire(("a", 20, 30), ("c", 1, 9)) and last["start"] is None
    assert sync.incomplete == {}


@pytest.mark.parametrize("origins", [None, [{"cluster": ""}], "x"])
async def test_a_malformed_marker_is_skipped(origins: Any) -> None:
    broker = Broker()
    await make(broker).apply({"type": "acks", "subscription": "s", "origins": origins}, "a")
    assert broker.calls == []
