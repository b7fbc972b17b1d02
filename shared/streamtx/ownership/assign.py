"""Which live replica should own which log: an even, deterministic spread.

Every replica computes the same answer from the same inputs (the sorted member
names and the sorted items), so no coordination beyond the membership list is
needed: item ``i`` of the sorted items goes to member ``i mod n`` of the sorted
members. The spread is as even as integers allow (owners differ by at most one
item). When a member joins or leaves, items move; the lease protocol
(:mod:`.manager`) makes every move a handover, never a double owner.
"""

from __future__ import annotations

import zlib
from collections.abc import Hashable, Iterable
from typing import TypeVar

__all__ = ["assign", "share_of", "slot_of"]

T = TypeVar("T", bound=Hashable)


def assign(items: Iterable[T], members: Iterable[str]) -> dict[str, list[T]]:
    """Every member's items (members without any get an empty list); no members: nobody."""
    ordered_members = sorted(set(members))
    out: dict[str, list[T]] = {m: [] for m in ordered_members}
    if not ordered_members:
        return out
    for i, item in enumerate(sorted(set(items), key=repr)):
        out[ordered_members[i % len(ordered_members)]].append(item)
    return out


def share_of(member: str, items: Iterable[T], members: Iterable[str]) -> list[T]:
    """The items ``member`` should own (none when it is not among ``members``)."""
    return assign(items, members).get(member, [])


def slot_of(key: str, slots: int) -> int:
    """The slot (0..slots-1) of a log whose set is open-ended (subscriptions): the leased item is
    the slot, as Pulsar leases namespace bundles rather than topics. CRC-32 of the UTF-8 key:
    the same in every process and version (Python's ``hash`` is salted per process)."""
    return zlib.crc32(key.encode()) % slots
