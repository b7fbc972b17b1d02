"""Failover assignment: which consumer is active on which partition (pure, no I/O).

As Pulsar does for a partitioned topic's Failover subscription: the live
consumers sorted by name, partition ``i`` goes to ``sorted[i % count]``. A
consumer is live while it has a fetch waiting or its last fetch ended less than
``idle_s`` ago; it leaves at once when it closes. The caller hands the moved
partitions' unacked messages to their new active consumer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol


class Liveness(Protocol):
    """What the broker knows of one consumer's fetches."""

    @property
    def last_seen(self) -> float:
        """When a fetch of it last started or ended (loop time)."""

    @property
    def fetching(self) -> int:
        """Fetches of it under way now."""


def live(consumers: Mapping[str, Liveness], now: float, idle_s: float) -> list[str]:
    """Names of the live consumers, sorted."""
    return sorted(n for n, c in consumers.items() if c.fetching > 0 or now - c.last_seen < idle_s)


def assign(partitions: int, names: Iterable[str]) -> dict[int, str]:
    """Partition index → active consumer name (nothing when no consumer is live)."""
    ordered = sorted(names)
    if not ordered:
        return {}
    return {i: ordered[i % len(ordered)] for i in range(partitions)}


def moved(before: Mapping[int, str], after: Mapping[int, str]) -> list[int]:
    """Partitions whose active consumer changed (or that lost theirs), in index order."""
    return sorted(i for i, name in before.items() if after.get(i) != name)


def next_expiry(consumers: Mapping[str, Liveness], now: float, idle_s: float) -> float | None:
    """When the next live consumer not fetching now stops being live, if any does."""
    times = [c.last_seen + idle_s for c in consumers.values()
             if c.fetching == 0 and c.last_seen + idle_s > now]
    return min(times, default=None)
