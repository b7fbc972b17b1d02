"""The backend seam: a raw, offset-addressed log of opaque frames.

Backends (file, kafka, memory) implement :class:`RawLog`; the fencing,
duplicate-dropping and group-commit logic that turns a raw log into a
:class:`~streamtx.ledger.base.Ledger` lives once, in :mod:`.fenced_ledger`.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from streamtx.ledger.base import SegmentStats
from streamtx.ledger.frames import FenceState


class RawLog(abc.ABC):
    """An append-only sequence of frames at consecutive offsets."""

    @abc.abstractmethod
    async def append_batch(self, frames: Sequence[bytes]) -> list[int]:
        """Durably append ``frames`` in order (one sync for all); return their offsets."""

    @abc.abstractmethod
    async def read_raw(self, start: int, max_frames: int) -> list[tuple[int, bytes]]:
        """Frames at offsets >= ``start`` in order, up to the real end of the log."""

    @abc.abstractmethod
    def start_offset(self) -> int:
        """The first untrimmed offset."""

    @abc.abstractmethod
    async def end_offset(self) -> int:
        """The offset the next append will take (the real end, not a stale watermark)."""

    @abc.abstractmethod
    async def trim_raw(self, before: int, state: FenceState) -> None:
        """Durably move the logical start to ``before`` with ``state``, the fence state there.

        Frames below the logical start are never returned again; the backend may
        keep them physically (whole segments, or a broker without DeleteRecords).
        """

    @abc.abstractmethod
    async def trim_state(self) -> tuple[int, FenceState]:
        """The logical start and the fence state persisted by the last trim."""

    @abc.abstractmethod
    def stats(self) -> Sequence[SegmentStats]:
        """Physical storage stats."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release the backend's resources."""
