"""When a partition's snapshot loop starts a snapshot: several pending while the remotes answer."""

from __future__ import annotations

from typing import Any

from streamtx.contracts.replication import ScannedMarker
from streamtx.replication.settings import ReplicationSettings
from streamtx.replication.subscriptions import PartitionSnapshots
from tests.support.wire import body_of


class Broker:
    """Takes the markers the loop writes."""

    def __init__(self) -> None:
        self.markers: list[dict[str, Any]] = []

    async def request(self, method: str, path: str, json: Any) -> dict[str, Any]:
        json = body_of(json)
        if path.endswith("/markers"):
            self.markers.append(json["marker"])
        return {}

    def requests(self) -> list[str]:
        return [m["snapshot_id"] for m in self.markers if m["type"] == "snapshot_request"]


def make(broker: Broker, timeout_s: float = 30) -> PartitionSnapshots:
    settings = ReplicationSettings(  # type: ignore[call-arg]
        cluster="a", replicated_subscriptions_snapshot_frequency_ms=10,
        replicated_subscriptions_snapshot_timeout_s=timeout_s)
    loop = PartitionSnapshots(local=broker, cluster="a", topic="persistent://t/n/x",  # type: ignore[arg-type]
                              partition=0, remotes=lambda: ["b"], settings=settings)
    loop.frequency_s = 0.0  # every call is a period later
    return loop


async def start(loop: PartitionSnapshots) -> None:
    loop._dirty = True  # messages arrived meanwhile
    await loop._maybe_start(True)


async def answer(loop: PartitionSnapshots, snapshot_id: str) -> None:
    body = {"type": "snapshot_response", "snapshot_id": snapshot_id, "source_cluster": "a", "cluster": "b",
            "position": "1:5", "round": 1}
    await loop._on_marker(ScannedMarker(marker=body, source="b", position="7:9"), {})


async def test_one_at_a_time_until_one_completes_then_several_while_the_remotes_answer() -> None:
    broker = Broker()
    loop = make(broker)
    await start(loop)
    await start(loop)  # none completed yet: b may not answer at all
    assert len(broker.requests()) == 1 and len(loop.pending) == 1
    await answer(loop, broker.requests()[0])
    assert loop.pending == {} and loop.completed == 0  # counted when the scan sees its marker
    for _ in range(3):  # b answers: a slow round trip does not hold the next ones back
        await start(loop)
    assert len(loop.pending) == 3
    await answer(loop, broker.requests()[2])  # any order
    assert set(loop.pending) == {broker.requests()[1], broker.requests()[3]}


async def test_remotes_that_stopped_answering_get_one_request_per_timeout_again() -> None:
    broker = Broker()
    loop = make(broker, timeout_s=0.05)
    await start(loop)
    await answer(loop, broker.requests()[0])
    await start(loop)
    await start(loop)
    assert len(loop.pending) == 2
    loop._last_completed -= 1  # a timeout and more since the last answer
    for pending in loop.pending.values():
        pending.started -= 1
    await start(loop)  # both time out; the next one starts alone
    await start(loop)
    assert len(loop.pending) == 1 and len(broker.requests()) == 4


async def test_the_first_snapshot_starts_at_once_on_a_machine_booted_a_moment_ago(monkeypatch: Any) -> None:
    # Monotonic time may start near 0 (issue 21 item 16): a "last start" of 0.0 held the
    # first snapshot back (and the scan waited for it) until the clock passed one period.
    import streamtx.replication.subscriptions as subs

    monkeypatch.setattr(subs.time, "monotonic", lambda: 0.5)
    broker = Broker()
    loop = make(broker)
    loop.frequency_s = 60.0
    loop._after, loop.caches = "1:1", {"s": object()}  # type: ignore[dict-item]  # scanning, one subscription
    assert loop._wait_ms() == 0
    await start(loop)
    assert len(broker.requests()) == 1
