"""PIP-33 snapshots without servers: the rounds of one snapshot, and a subscription's cache."""

from __future__ import annotations

import pytest

from streamtx.broker.replication.markers import response
from streamtx.ledger import Position
from streamtx.replication.snapshots import PendingSnapshot, Snapshot, SnapshotCache


def _answer(p: PendingSnapshot, cluster: str, there: int, here: int) -> Snapshot | str | None:
    request = p.request("a")
    return p.on_response(response(request, cluster, Position(7, there)), Position(1, here))


def test_two_clusters_complete_in_one_round() -> None:
    p = PendingSnapshot(frozenset({"b"}), started=0.0)
    done = _answer(p, "b", 40, 12)
    assert done == Snapshot(p.snapshot_id, Position(1, 12), {"b": "7:40"})


def test_three_clusters_need_a_second_round_and_keep_the_first_rounds_remote_positions() -> None:
    p = PendingSnapshot(frozenset({"b", "c"}), started=0.0)
    assert _answer(p, "b", 40, 12) is None
    assert _answer(p, "b", 41, 13) is None  # a repeated answer counts once
    assert _answer(p, "c", 50, 14) == "next_round"
    assert p.request("a")["round"] == 2
    assert _answer(p, "c", 60, 20) is None
    done = _answer(p, "b", 70, 21)
    # Remote positions from round 1, the local one from the last answer of round 2.
    assert done == Snapshot(p.snapshot_id, Position(1, 21), {"b": "7:40", "c": "7:50"})


def test_answers_to_other_snapshots_rounds_or_clusters_are_ignored() -> None:
    p = PendingSnapshot(frozenset({"b"}), started=0.0)
    other = response({"snapshot_id": "old", "source_cluster": "a", "round": 1}, "b", Position(7, 1))
    assert p.on_response(other, Position(1, 2)) is None
    stranger = response(p.request("a"), "z", Position(7, 1))
    assert p.on_response(stranger, Position(1, 2)) is None
    later_round = {**response(p.request("a"), "b", Position(7, 1)), "round": 2}
    assert p.on_response(later_round, Position(1, 2)) is None
    assert p.answered == set()
    assert p.timed_out(31.0, 30.0) and not p.timed_out(29.0, 30.0)


def _snap(entry: int) -> Snapshot:
    return Snapshot(f"s{entry}", Position(1, entry), {"b": f"7:{entry}"})


def test_cache_keeps_snapshots_spread_over_a_stuck_backlog() -> None:
    cache = SnapshotCache(3)
    for e in (10, 20, 30, 40, 50, 60):
        cache.add(_snap(e))
    kept = [s.local.entry_id for s in cache.snapshots]
    assert len(kept) == 3 and kept[0] == 10 and kept[-1] == 60  # the oldest and the newest stay
    # The mark-delete moves a little: the oldest snapshot still gives an update.
    assert cache.advance(Position(1, 15)) == _snap(10)
    assert cache.advance(Position(1, 15)) is None
    assert [s.local.entry_id for s in cache.snapshots] == kept[1:]


def test_cache_ignores_older_snapshots_and_advances_to_the_newest_passed() -> None:
    cache = SnapshotCache(5)
    cache.add(_snap(20))
    cache.add(_snap(15))  # not after the newest
    cache.add(_snap(30))
    assert cache.advance(Position(1, 35)) == _snap(30)
    assert cache.snapshots == []
    cache.add(_snap(25))  # older than the one used (seen again by a rescan): no second update
    assert cache.advance(Position(1, 40)) is None


def test_cache_keeps_a_snapshot_the_mark_delete_passed_before_it_completed() -> None:
    # A consumer that keeps up acks past the snapshot's local position (the last
    # response) before the snapshot marker is durable: it is still its update.
    cache = SnapshotCache(5)
    cache.add(_snap(10))
    cache.add(_snap(20))
    assert cache.advance(Position(1, 25)) == _snap(20)
    cache.add(_snap(30))  # completed once the mark-delete was already at 35
    assert cache.advance(Position(1, 35)) == _snap(30)
    with pytest.raises(ValueError):
        SnapshotCache(2)
