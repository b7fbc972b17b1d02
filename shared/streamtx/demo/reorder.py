"""Per-source-partition reorder buffer: emit records in sequence order, once.

A worker owns some source partitions. Redelivery (after an abort, an ack timeout
or a crash of the previous owner) can hand it a partition's records out of
order or twice; the worker must still write them to the destination in
sequence order, each exactly once. The buffer holds what arrived, hands out the
contiguous run starting at the partition's next sequence number, and treats
anything below it as stale (already written by a committed transaction).

The worker's transaction is the unit: ``take_ready`` advances a *tentative*
next; ``commit`` makes it the committed next and forgets what was taken;
``rollback`` puts the taken items back so the next transaction redoes them.
Pipelined transactions (the next one writes while the previous one commits):
``seal`` closes what was taken so far as one transaction, ``commit_oldest``
commits the oldest sealed one, and ``rollback`` undoes everything not committed
(a transaction after an aborted one builds on it, so it must abort as well).
The committed next per partition is durable elsewhere (the worker writes it to
a progress topic in the same transaction), so a restarted worker resumes from it.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class ReorderBuffer(Generic[T]):
    """Items keyed by (partition, seq); see the module doc."""

    committed: dict[int, int] = field(default_factory=dict)  # partition -> next seq to write
    _tentative: dict[int, int] = field(default_factory=dict)
    _pending: dict[int, dict[int, T]] = field(default_factory=dict)
    _taken: dict[int, dict[int, T]] = field(default_factory=dict)
    _sealed: list[tuple[dict[int, int], dict[int, dict[int, T]]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._tentative = dict(self.committed)

    def offer(self, partition: int, seq: int, item: T) -> bool:
        """Hold ``item``; False when it is stale (below the tentative next) or already taken."""
        # Called per record read: lookups first, no default objects built and thrown away.
        nxt = self._tentative.get(partition)
        if nxt is None:
            nxt = self._tentative[partition] = self.committed.setdefault(partition, 0)
        if seq < nxt:
            return False
        pending = self._pending.get(partition)
        if pending is None:
            pending = self._pending[partition] = {}
        pending[seq] = item
        return True

    def is_committed(self, partition: int, seq: int) -> bool:
        """Whether a committed transaction already wrote ``seq`` (not just the open one)."""
        return seq < self.committed.get(partition, 0)

    def take_ready(self, limit: int | None = None) -> list[tuple[int, int, T]]:
        """The contiguous runs from each partition's next seq, in order (at most ``limit``
        items); advances the next."""
        out: list[tuple[int, int, T]] = []
        for partition, pending in self._pending.items():
            nxt = self._tentative[partition]
            taken = self._taken.setdefault(partition, {})
            while nxt in pending and (limit is None or len(out) < limit):
                item = pending.pop(nxt)
                taken[nxt] = item
                out.append((partition, nxt, item))
                nxt += 1
            self._tentative[partition] = nxt
        return out

    def seal(self) -> None:
        """Close what was taken since the last seal as one transaction."""
        self._sealed.append((dict(self._tentative), self._taken))
        self._taken = {}

    def sealed(self) -> int:
        return len(self._sealed)

    def commit_oldest(self) -> None:
        """The oldest sealed transaction committed."""
        nxt, _ = self._sealed.pop(0)
        self.committed.update(nxt)

    def commit(self) -> None:
        """Everything taken so far committed (one transaction, nothing pipelined)."""
        self.seal()
        while self._sealed:
            self.commit_oldest()

    def rollback(self, keep: Container[int] | None = None) -> None:
        """Undo every ``take_ready`` not committed; the items become pending again, those
        of the partitions in ``keep`` only (default: all). A partition that moved away
        while a transaction had some of it in flight must not come back with its items:
        its new owner writes them, and a transaction that takes them again cannot ack
        them (already acknowledged) and aborts, every time."""
        for taken in [*(t for _, t in self._sealed), self._taken]:
            for partition, items in taken.items():
                if keep is None or partition in keep:
                    self._pending.setdefault(partition, {}).update(items)
        self._sealed.clear()
        self._taken = {}
        self._tentative = dict(self.committed)

    def in_flight(self, partition: int) -> bool:
        """Whether a transaction not yet committed took items of ``partition``."""
        return bool(self._taken.get(partition)) or any(taken.get(partition) for _, taken in self._sealed)

    def resync(self, partition: int, committed_next: int) -> None:
        """The partition's committed next as read from the progress topic (it moved here, or
        another worker may have advanced it): adopt it if higher, drop what is below it.
        Call only when nothing of ``partition`` is in flight."""
        assert not self.in_flight(partition)
        nxt = max(self.committed.get(partition, 0), committed_next)
        self.committed[partition] = self._tentative[partition] = nxt
        pending = self._pending.get(partition)
        if pending:
            for seq in [s for s in pending if s < nxt]:
                del pending[seq]

    def drop(self, partition: int) -> None:
        """Forget ``partition``'s waiting items (it moved to another worker); what is in
        flight stays with its transaction."""
        self._pending.pop(partition, None)

    def stuck(self) -> list[int]:
        """Partitions with items waiting but none ready: a gap at the head."""
        return [p for p, pending in self._pending.items()
                if pending and self._tentative.get(p, 0) not in pending]

    def held(self) -> int:
        """Items waiting for a gap to fill (not yet taken)."""
        return sum(len(p) for p in self._pending.values())

    def tentative(self) -> dict[int, int]:
        return dict(self._tentative)
