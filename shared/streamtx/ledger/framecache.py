"""A raw log's cache of recent frames, read or appended (Pulsar's entry cache, in small).

The log is immutable, so a frame seen once at an offset stays valid: readers
at the tail (a partition's consumers, a writer reading its own appends) are
served from memory, without a Kafka fetch or a file read on the log's I/O
thread, where they would queue in front of appends. The cache also keeps the
running average frame size, for the byte stats and Kafka's fetch sizing.
"""

from __future__ import annotations

from collections.abc import Sequence

_CACHE_FRAMES = 4096
_CACHE_BYTES = 4 << 20


class FrameCache:
    """Recent frames by offset (oldest evicted first) and the sizes of all frames counted."""

    def __init__(self) -> None:
        self._frames: dict[int, bytes] = {}
        self._bytes = 0
        self._counted_end = 0  # frames below this were counted into the byte stats
        self._frames_counted = 0
        self._bytes_counted = 0

    def remember(self, frames: Sequence[tuple[int, bytes]], start: int) -> None:
        """Count frames seen at their offsets and cache those at ``start`` or above."""
        for offset, data in frames:
            if offset >= self._counted_end:
                self._frames_counted += 1
                self._bytes_counted += len(data)
                self._counted_end = offset + 1
            if offset < start or offset in self._frames:
                continue
            self._frames[offset] = data
            self._bytes += len(data)
        while self._frames and (len(self._frames) > _CACHE_FRAMES or self._bytes > _CACHE_BYTES):
            self._bytes -= len(self._frames.pop(next(iter(self._frames))))

    def run(self, start: int, max_frames: int) -> list[tuple[int, bytes]]:
        """Up to ``max_frames`` cached frames at consecutive offsets from ``start``."""
        out: list[tuple[int, bytes]] = []
        offset = start
        while len(out) < max_frames:
            data = self._frames.get(offset)
            if data is None:
                break
            out.append((offset, data))
            offset += 1
        return out

    def drop_below(self, before: int) -> None:
        for offset in [o for o in self._frames if o < before]:
            self._bytes -= len(self._frames.pop(offset))

    def clear(self) -> None:
        self._frames.clear()
        self._bytes = 0

    def average_size(self, default: float) -> float:
        """The average size of the frames counted, or ``default`` before any."""
        return self._bytes_counted / self._frames_counted if self._frames_counted else default
