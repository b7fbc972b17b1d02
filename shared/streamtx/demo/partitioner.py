"""Where a user's records live: source partition by user, destination by user-id range.

The source topic is written by "front ends": a user's records always go to the
same source partition (``user_id mod n``), so a user's records have one total
order in the source. The resharding job re-splits them by user-id RANGE, as in
docs/background.md (``[uid1, uid2)`` → one destination partition): destination partition
``i`` holds users ``[bounds[i], bounds[i+1])``; ranges are as equal as integers
allow.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import cached_property


def source_partition_of(user_id: int, partitions: int) -> int:
    return user_id % partitions


@dataclass(frozen=True)
class RangePartitioner:
    """Split ``[0, user_space)`` into ``partitions`` contiguous ranges."""

    user_space: int
    partitions: int

    def __post_init__(self) -> None:
        if self.partitions < 1 or self.user_space < self.partitions:
            raise ValueError(f"cannot split {self.user_space} users into {self.partitions} ranges")

    @cached_property
    def bounds(self) -> list[int]:
        """Lower bound of each range, then ``user_space``."""
        return [i * self.user_space // self.partitions for i in range(self.partitions + 1)]

    def partition_of(self, user_id: int) -> int:
        if not 0 <= user_id < self.user_space:
            raise ValueError(f"user id {user_id} outside [0, {self.user_space})")
        return bisect.bisect_right(self.bounds, user_id) - 1
