"""The ledger interface: an append-only log of entries addressed by position.

A ledger is opened by name from a :class:`LedgerFactory`. Positions are
``(ledger_id, entry_id)`` and totally ordered; ``ledger_id`` is the same for
every entry of one named ledger (see :func:`ledger_id_for`) and entry ids grow
but may have gaps (fence records and dropped duplicates take ids too).
"""

from __future__ import annotations

import abc
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from streamtx.contracts.msgid import MessageId
from streamtx.errors import MalformedError


class Position(NamedTuple):
    """Where an entry lives; tuples order positions totally."""

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """The entry of a message id (:meth:`MessageId.parse`'s rules); ValueError when malformed."""
        try:
            mid = MessageId.parse(text)
        except MalformedError as exc:
            raise ValueError(exc.message) from None
        return cls(mid.ledger_id, mid.entry_id)


def ledger_id_for(name: str) -> int:
    """A ledger's id: CRC32 of its name, so every backend agrees without a registry."""
    return zlib.crc32(name.encode())


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry read back from a ledger."""

    position: Position
    data: bytes


@dataclass(frozen=True, slots=True)
class SegmentStats:
    """Storage stats of one physical piece of a ledger (a file segment, a partition)."""

    segment_id: int
    entries: int
    size: int


class Ledger(abc.ABC):
    """One named ledger. Appends are acknowledged only once durable."""

    name: str
    ledger_id: int

    @abc.abstractmethod
    async def append(self, data: bytes) -> Position:
        """Append one entry; return its position once the backend made it durable."""

    @abc.abstractmethod
    async def read(self, start: Position | None = None, max_entries: int = 1000) -> list[Entry]:
        """Entries at or after ``start`` (the first live entry if None), in order."""

    @abc.abstractmethod
    def last_position(self) -> Position | None:
        """The position of the last entry known to this handle, or None when empty."""

    @abc.abstractmethod
    async def refresh(self) -> Position | None:
        """Catch up with entries other handles appended; return the last position."""

    @abc.abstractmethod
    def first_position(self) -> Position | None:
        """The first live (untrimmed) entry's position, or None when empty."""

    @abc.abstractmethod
    def next_entry_id(self, entry_id: int) -> int:
        """The id of the first entry after ``entry_id`` (skipping fences and dropped ids).

        Ids past the known end are returned as ``entry_id + 1``.
        """

    @abc.abstractmethod
    async def trim(self, before: Position) -> None:
        """Drop every entry before ``before`` (backends may keep whole segments)."""

    @abc.abstractmethod
    async def wait_for_append(self, after: Position | None, timeout: float) -> bool:
        """Wait until an entry after ``after`` exists (True) or ``timeout`` passes."""

    @abc.abstractmethod
    def stats(self) -> Sequence[SegmentStats]:
        """Physical storage stats, for the admin API's internal stats."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release resources; pending and later appends fail with LedgerClosedError."""


class LedgerFactory(abc.ABC):
    """Opens ledgers of one backend, chosen by URL (see :func:`streamtx.ledger.open_ledger_factory`)."""

    @abc.abstractmethod
    async def open(self, name: str, *, writer: bool = True) -> Ledger:
        """Open a ledger by name, creating it; a writer fences every earlier writer."""

    @abc.abstractmethod
    async def exists(self, name: str) -> bool:
        """Whether ledger ``name`` was ever created (and not deleted); opens nothing."""

    @abc.abstractmethod
    async def delete(self, name: str) -> None:
        """Delete a ledger and its data."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Close the store and every ledger it opened."""

    async def health(self) -> str | None:
        """None while ledgers can be opened; else why not (a service is unready meanwhile)."""
        return None
