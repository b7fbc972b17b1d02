"""A sorted set of disjoint inclusive integer ranges, for individually deleted entries.

Ranges are kept merged: two ranges never overlap nor touch (``a.end + 1 <
b.start``). They live in chunks of a few hundred, each chunk a pair of sorted
lists (starts, ends), with the chunks' first starts in one more sorted list:
lookups are two bisects and an insert moves at most one chunk's worth of
items, so random-order deletes stay cheap with 100k+ ranges (one flat list
would memmove the whole list on every insert).

This module is pure: no I/O.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator

_chunk_max = 512  # ranges per chunk before it splits in two


class RangeSet:
    """Disjoint, non-adjacent inclusive ranges ``(start, end)`` of ints, in order."""

    __slots__ = ("_ends", "_len", "_mins", "_starts")

    def __init__(self) -> None:
        self._starts: list[list[int]] = []
        self._ends: list[list[int]] = []
        self._mins: list[int] = []  # _starts[i][0] for every chunk i
        self._len = 0

    @classmethod
    def from_sorted(cls, ranges: list[tuple[int, int]]) -> RangeSet:
        """Build from ranges already in order, disjoint and non-adjacent (not checked)."""
        out = cls()
        for i in range(0, len(ranges), _chunk_max // 2):
            chunk = ranges[i : i + _chunk_max // 2]
            out._starts.append([s for s, _ in chunk])
            out._ends.append([e for _, e in chunk])
            out._mins.append(chunk[0][0])
        out._len = len(ranges)
        return out

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[tuple[int, int]]:
        for starts, ends in zip(self._starts, self._ends, strict=True):
            yield from zip(starts, ends, strict=True)

    def __repr__(self) -> str:
        return f"RangeSet({list(self)!r})"

    def first(self) -> tuple[int, int] | None:
        """The lowest range, or None when empty."""
        if not self._len:
            return None
        return self._starts[0][0], self._ends[0][0]

    def find(self, value: int) -> tuple[int, int] | None:
        """The range holding ``value``, or None."""
        loc = self._locate(value)
        if loc is None:
            return None
        ci, j = loc
        end = self._ends[ci][j]
        return (self._starts[ci][j], end) if value <= end else None

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int) and self.find(value) is not None

    def add(self, lo: int, hi: int) -> bool:
        """Add ``lo..hi`` (inclusive), merging what it overlaps or touches; True if it grew."""
        if lo > hi:
            raise ValueError(f"empty range {lo}..{hi}")
        # Absorb, from the top down, every range that overlaps or touches lo-1..hi+1:
        # they are consecutive, so stop at the first one that ends below lo - 1.
        first = True
        while (loc := self._locate(hi + 1)) is not None:
            ci, j = loc
            start, end = self._starts[ci][j], self._ends[ci][j]
            if end < lo - 1:
                break
            if first and start <= lo and hi <= end:
                return False  # already covered: nothing to do
            first = False
            lo, hi = min(lo, start), max(hi, end)
            self._remove(ci, j)
        self._insert(lo, hi)
        return True

    def drop_through(self, value: int) -> None:
        """Forget everything ``<= value`` (cutting a range that straddles it)."""
        while self._starts and self._ends[0][-1] <= value:
            self._len -= len(self._starts[0])
            del self._starts[0], self._ends[0], self._mins[0]
        if not self._starts:
            return
        starts, ends = self._starts[0], self._ends[0]
        k = bisect_right(ends, value)
        if k:
            del starts[:k], ends[:k]
            self._len -= k
        if starts[0] <= value:
            starts[0] = value + 1
        self._mins[0] = starts[0]

    # --- chunk bookkeeping -------------------------------------------------

    def _locate(self, value: int) -> tuple[int, int] | None:
        """(chunk, index) of the range with the greatest start ``<= value``."""
        ci = bisect_right(self._mins, value) - 1
        if ci < 0:
            return None
        return ci, bisect_right(self._starts[ci], value) - 1

    def _remove(self, ci: int, j: int) -> None:
        starts, ends = self._starts[ci], self._ends[ci]
        del starts[j], ends[j]
        self._len -= 1
        if not starts:
            del self._starts[ci], self._ends[ci], self._mins[ci]
        elif j == 0:
            self._mins[ci] = starts[0]

    def _insert(self, lo: int, hi: int) -> None:
        self._len += 1
        if not self._starts:
            self._starts.append([lo])
            self._ends.append([hi])
            self._mins.append(lo)
            return
        ci = max(bisect_right(self._mins, lo) - 1, 0)
        starts, ends = self._starts[ci], self._ends[ci]
        j = bisect_left(starts, lo)
        starts.insert(j, lo)
        ends.insert(j, hi)
        if j == 0:
            self._mins[ci] = lo
        if len(starts) > _chunk_max:
            half = len(starts) // 2
            self._starts.insert(ci + 1, starts[half:])
            self._ends.insert(ci + 1, ends[half:])
            self._mins.insert(ci + 1, starts[half])
            del starts[half:], ends[half:]
