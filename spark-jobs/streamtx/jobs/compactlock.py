"""One compaction per log at a time: locks the ``compact`` job's driver holds for a run.

Two overlapping runs planned from the same manifest would write the same base
generation: the later one deleted the earlier one's base (after its owner had
adopted it) and committed an older cut. So a run takes, on the driver and
before it reads the manifest, one lock per log it means to compact, and holds
it until its commit is over; a log another run holds is skipped (reported,
not an error):

* the file backend: an exclusive ``flock`` on
  ``<store>/.compaction/<log dir>.lock`` (released by the kernel if the
  driver dies);
* where Redis is configured (``--redis-url`` / ``STREAMTX_REDIS_URL``): a lease
  ``streamtx:jobs:compact:<log>`` of :class:`~streamtx.ownership.lease.LeaseStore`,
  renewed from a thread of its own while the run lasts; a log whose lease was
  lost is not committed.

Neither replaces the compare-and-set at the commit (:mod:`.compact`): the
manifest is appended only if it still names what the run planned from.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import secrets
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from streamtx.jobs.sources import file_root
from streamtx.ledger import segment
from streamtx.ownership.lease import Lease, LeaseStore

log = logging.getLogger(__name__)
T = TypeVar("T")

lock_dir = ".compaction"  # under a file store's root; a dot: never listed as a ledger
_lease_ttl_ms = 60_000


class LogLocks:
    """The per-log locks of one run; :meth:`close` releases them all."""

    def __init__(self, url: str, *, redis_url: str | None = None, lease_ttl_ms: int = _lease_ttl_ms) -> None:
        self._root = file_root(url) if url.startswith("file:") else None
        self._files: dict[str, int] = {}
        self._leases = _Leases(redis_url, lease_ttl_ms) if redis_url else None
        self._closed = False

    def acquire(self, name: str) -> bool:
        """Lock log ``name`` for this run; False when another run holds it."""
        if self._closed:
            raise RuntimeError("these compaction locks were released")
        if self._root is not None and not self._lock_file(name):
            return False
        if self._leases is not None and not self._leases.acquire(name):
            self._unlock_file(name)
            return False
        return True

    def held(self, name: str) -> bool:
        """Whether the run still holds ``name`` (a Redis lease may have expired meanwhile)."""
        if self._closed or (self._root is not None and name not in self._files):
            return False
        return self._leases is None or self._leases.held(name)

    def close(self) -> None:
        """Release every lock (again: nothing)."""
        self._closed = True
        if self._leases is not None:
            self._leases.close()
            self._leases = None
        for name in list(self._files):
            self._unlock_file(name)

    def _lock_file(self, name: str) -> bool:
        assert self._root is not None
        directory = os.path.join(self._root, lock_dir)
        os.makedirs(directory, exist_ok=True)
        fd = os.open(os.path.join(directory, segment.ledger_dir_name(name) + ".lock"), os.O_RDWR | os.O_CREAT,
                     0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._files[name] = fd
        return True

    def _unlock_file(self, name: str) -> None:
        fd = self._files.pop(name, None)
        if fd is not None:
            os.close(fd)  # closing the descriptor drops the flock


class _Leases:
    """Leases in Redis, taken and renewed on an event loop in a thread of their own (the driver blocks)."""

    def __init__(self, url: str, ttl_ms: int) -> None:
        self._ttl_ms = ttl_ms
        self._member = f"compact-{os.getpid()}-{secrets.token_hex(4)}"
        self._held: dict[str, Lease] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="compact-leases", daemon=True)
        self._thread.start()
        self._leases = LeaseStore.from_url(url, cluster="jobs", service="compact")
        self._renewing = asyncio.run_coroutine_threadsafe(self._renew_loop(), self._loop)

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def acquire(self, name: str) -> bool:
        lease: Lease | None = self._call(self._leases.acquire(name, self._member, self._ttl_ms))
        if lease is None:
            return False
        self._held[name] = lease
        return True

    def held(self, name: str) -> bool:
        lease = self._held.get(name)
        return lease is not None and bool(self._call(self._leases.renew(lease, self._ttl_ms)))

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(self._ttl_ms / 3000)
            names = list(self._held)
            try:
                ok = await self._leases.renew_all([self._held[n] for n in names], self._ttl_ms)
            except Exception as exc:  # Redis away for a moment: the next round tries again
                log.warning("compact: renewing the compaction leases failed: %s", exc)
                continue
            for name, still in zip(names, ok, strict=True):
                if not still:
                    log.warning("compact: the compaction lease of %s was lost; not committed", name)
                    self._held.pop(name, None)

    def close(self) -> None:
        self._renewing.cancel()

        async def release() -> None:
            for lease in self._held.values():
                with contextlib.suppress(Exception):
                    await self._leases.release(lease)
            await self._leases.aclose()

        with contextlib.suppress(Exception):
            self._call(release())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()
