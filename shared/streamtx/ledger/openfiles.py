"""The file descriptors a file store's ledgers hold: bounded, and what running out of them means.

Every open file ledger holds its ``LOCK`` file and one descriptor per segment; a
broker opens a cursor ledger per subscription and partition, so 1,000
subscriptions held 4,000 descriptors and a broker limited to 512 ran out, after
which every open (a new subscription, a topic) failed for every tenant.
:class:`OpenFiles` keeps the descriptors of at most ``limit`` ledgers open: when
one more is used, the least recently used ledger releases its files (its index
stays in memory; its next call reopens them, as the pending-ack registry reopens
an idle store). The default limit is a quarter of the process's ``RLIMIT_NOFILE``,
which leaves the rest to sockets.

It also remembers an open that failed for want of descriptors (``EMFILE``,
``ENFILE``): :meth:`health` names it until a probe opens a file again, so a
service reports itself unready (``/readyz``) while its ledgers cannot be opened
and ready again once they can.
"""

from __future__ import annotations

import asyncio
import errno
import os
import resource
from collections import OrderedDict
from typing import Protocol

_out_of_files = (errno.EMFILE, errno.ENFILE)


class Releasable(Protocol):
    """A ledger handle whose files can be closed now and reopened on its next call."""

    def release(self) -> None:
        """Close its files after the calls already queued (reopened by the next one)."""


def default_limit() -> int:
    """A quarter of the process's soft descriptor limit, between 16 and 10,000 ledgers."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 10_000
    return max(16, min(soft // 4, 10_000))


class OpenFiles:
    """Which of a store's ledgers hold their files now (least recently used first), and how many may."""

    def __init__(self, root: str, limit: int | None = None) -> None:
        self.root = root
        self.limit = max(1, limit if limit is not None else default_limit())
        self._holding: OrderedDict[Releasable, None] = OrderedDict()
        self.exhausted: str | None = None  # why the last open failed for want of descriptors
        self.released = 0  # ledgers that released their files (a counter, for tests and stats)

    def __len__(self) -> int:
        return len(self._holding)

    def used(self, ledger: Releasable) -> None:
        """``ledger`` is about to do I/O (its files open, or reopened); the least recently used
        beyond the limit release theirs."""
        self._holding[ledger] = None
        self._holding.move_to_end(ledger)
        while len(self._holding) > self.limit:
            oldest, _ = self._holding.popitem(last=False)
            oldest.release()
            self.released += 1

    def forget(self, ledger: Releasable) -> None:
        """``ledger`` closed (or released) its files."""
        self._holding.pop(ledger, None)

    def failed(self, exc: OSError) -> None:
        if exc.errno in _out_of_files:
            self.exhausted = f"ledgers cannot be opened: {exc.strerror or exc} (the process is out of " \
                             "file descriptors)"

    def opened(self) -> None:
        self.exhausted = None

    async def health(self) -> str | None:
        """None when ledgers can be opened; else why not (probed again each call, off the loop)."""
        if self.exhausted is None:
            return None
        try:
            await asyncio.to_thread(_probe, self.root)
        except OSError as exc:
            self.failed(exc)
            return self.exhausted
        self.exhausted = None
        return None


_probe_files = 4  # as many as opening a ledger takes at once (directory, LOCK, a segment, a trim state)


def _probe(root: str) -> None:
    """Open (and close) as many files as a ledger's opening needs: one spare descriptor freed by
    the failed open itself is not a recovery."""
    fds: list[int] = []
    try:
        for _ in range(_probe_files):
            fds.append(os.open(root if os.path.isdir(root) else ".", os.O_RDONLY))
    finally:
        for fd in fds:
            os.close(fd)
