"""The file backend (``file://DIR``): ledgers as segment files, fsynced before an ack.

Layout under the store root ``DIR``::

    DIR/
      <ledger dir>/                one per ledger; the name escaped by
                                   segment.ledger_dir_name ("conf/a" -> "conf%2Fa")
        LOCK                       empty; flock(LOCK_EX) on it serializes appends,
                                   rollovers, trims and tail repair of every handle
                                   in every process
        TRIM                       the last trim: logical start + fence state
                                   (format in :mod:`.segment`); absent until a trim
        TRIM.tmp                   a trim state being written; ignored
        00000000000000000000.seg   segments: entries back to back, each
        00000000000000001234.seg   u32 length | u32 CRC32C(payload) | payload
                                   (format in :mod:`.segment`); the name is the
                                   offset of the segment's first entry

Offsets are consecutive across segments: a segment's base offset is the offset
after the previous segment's last entry, and an entry's offset is its segment's
base plus its index there. Only the last segment is ever written; when it holds
``segment_bytes`` or more, the next append creates a new one.

Durability: one ``append_batch`` is one ``pwrite`` of every entry and one
``fdatasync``, under the lock, and only then acknowledged. A new segment or a
new trim state is made durable (file fsync, then directory fsync) before it is
used. A trim persists ``TRIM`` first (write ``TRIM.tmp``, fsync, rename, fsync
the directory) and only then deletes whole segments below the new start; the
last segment is never deleted, so the next offset is always known.

Recovery: opening a ledger scans every segment into an in-memory index (the
byte position of each entry). Bytes that do not form a valid entry are judged
under the lock (:mod:`.filecheck`): at the end of the *last* segment with
nothing valid after them they are a torn write, which a writer cuts off
(ftruncate + fsync; a read-only open leaves it and reads up to it); followed by
a valid entry, or in a sealed segment, they are corruption: the open fails with
:class:`CorruptEntryError` naming the file and byte, and nothing is cut
(``streamtx-admin ledger check|repair``).

Several handles (in one process or many) may share a ledger. Appends take the
lock and first catch up with what others appended (the last segment grew, or a
newer segment exists). Reads take no lock: a reader indexes only whole,
checksummed entries, and stops quietly at a partial tail, which may be a write
still in progress. Each handle runs its file I/O off the event loop, one call
at a time in call order (so the index has one mutator), on the I/O thread pool
its store shares among all its ledgers (:mod:`.ioexec`): threads are bounded by
the pool, not by the number of open ledgers.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import fcntl
import functools
import logging
import os
import secrets
import shutil
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from streamtx.errors import (
    CorruptEntryError,
    LedgerClosedError,
    LedgerError,
    LedgerUnavailableError,
    TooLargeError,
)
from streamtx.ledger import filecheck, segment
from streamtx.ledger.base import Ledger, LedgerFactory, SegmentStats
from streamtx.ledger.fenced_ledger import FencedLedger
from streamtx.ledger.framecache import FrameCache
from streamtx.ledger.frames import FenceState
from streamtx.ledger.ioexec import SerialExecutor
from streamtx.ledger.openfiles import OpenFiles
from streamtx.ledger.rawlog import RawLog

log = logging.getLogger(__name__)

T = TypeVar("T")

_scan_chunk_bytes = 4 << 20  # read size while scanning a segment
_racy_ns = 100_000_000  # a listing this long after the directory's mtime trusts that mtime
_read_budget_bytes = 8 << 20  # most bytes one read_raw returns (at least one entry)
_lock_name, _trim_name = filecheck.LOCK_NAME, filecheck.TRIM_NAME
_datasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


@dataclass(slots=True, eq=False)
class _Segment:
    """One open segment file and the index of its valid entries."""

    base: int
    path: str
    fd: int
    positions: array[int] = field(default_factory=lambda: array("Q"))  # entry starts
    end: int = 0  # bytes of valid entries; the next entry starts here

    @property
    def next_offset(self) -> int:
        return self.base + len(self.positions)

    def entry_end(self, i: int) -> int:
        return self.positions[i + 1] if i + 1 < len(self.positions) else self.end


class FileRawLog(RawLog):
    """A raw log in one ledger directory; create it with :meth:`open`."""

    def __init__(self, directory: str, *, segment_bytes: int, pool: ThreadPoolExecutor | None = None,
                 writable: bool = True, files: OpenFiles | None = None) -> None:
        self._dir = directory
        self._files = files  # the store's bound on open descriptors (openfiles.py)
        self._released = False  # its files are closed until the next call reopens them
        self._writable = writable  # False: never cut a torn tail (a read-only open)
        self._torn_reported = False
        self._segment_bytes = segment_bytes
        self._segs: list[_Segment] = []
        self._start = 0  # logical first offset, as far as this handle knows
        # The directory's mtime at the last listing, and the wall clock just before it was taken.
        self._listed_mtime_ns = -1
        self._listed_at_ns = 0
        self._lock_fd = -1
        self._closed = False
        # Without a store's pool (tools, tests), a thread of its own.
        self._own_pool = None
        if pool is None:
            pool = self._own_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger-file")
        self._pool = SerialExecutor(pool)
        # What this handle appended, so tail readers skip the I/O thread (framecache.py).
        self._cache = FrameCache()

    @classmethod
    async def open(cls, directory: str, *, segment_bytes: int = 64 << 20,
                   pool: ThreadPoolExecutor | None = None, writable: bool = True,
                   files: OpenFiles | None = None) -> FileRawLog:
        raw = cls(directory, segment_bytes=segment_bytes, pool=pool, writable=writable, files=files)
        try:
            await raw._run(raw._open_sync)
        except BaseException:
            await raw.close()
            raise
        return raw

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        if self._closed:
            raise LedgerClosedError(f"ledger files in {self._dir} are closed")
        loop = asyncio.get_running_loop()
        if self._files is not None:
            self._files.used(self)
        try:
            result = await loop.run_in_executor(self._pool, functools.partial(self._with_files, fn, *args))
        except OSError as exc:
            if self._files is not None:
                self._files.failed(exc)
            raise LedgerUnavailableError(f"ledger files in {self._dir}: {exc}") from exc
        if self._files is not None and self._files.exhausted is not None:
            self._files.opened()  # files could be opened again
        return result

    def release(self) -> None:
        """Close this handle's files once the calls already queued ran; the next call reopens them."""
        if self._files is not None:
            self._files.forget(self)
        if not self._closed:
            self._pool.submit(self._release_sync)

    # --- the RawLog interface -----------------------------------------------

    async def append_batch(self, frames: Sequence[bytes]) -> list[int]:
        if any(len(f) > segment.max_entry_bytes for f in frames):
            raise TooLargeError(f"a ledger entry is limited to {segment.max_entry_bytes} bytes")
        if not frames:
            return []
        offsets = await self._run(self._append_sync, list(frames))
        self._cache.remember(list(zip(offsets, frames, strict=True)), self._start)
        return offsets

    async def read_raw(self, start: int, max_frames: int) -> list[tuple[int, bytes]]:
        if max_frames > 0 and (cached := self._cache.run(max(start, self._start), max_frames)):
            return cached
        return await self._run(self._read_sync, start, max_frames)

    def start_offset(self) -> int:
        return self._start

    async def end_offset(self) -> int:
        await self._run(self._refresh, False)
        return self._end()

    async def trim_raw(self, before: int, state: FenceState) -> None:
        await self._run(self._trim_sync, before, state.encode())
        self._cache.drop_below(before)

    async def trim_state(self) -> tuple[int, FenceState]:
        start, state = await self._run(self._read_trim)
        self._start = max(self._start, start)
        return start, FenceState.decode(state)

    def stats(self) -> Sequence[SegmentStats]:
        return [SegmentStats(s.base, len(s.positions), s.end) for s in list(self._segs)]

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._files is not None:
            self._files.forget(self)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._pool, self._close_sync)
        self._pool.shutdown(wait=False)
        if self._own_pool is not None:
            self._own_pool.shutdown(wait=False)

    # --- on the I/O thread ----------------------------------------------------

    def _open_sync(self) -> None:
        if not os.path.isdir(self._dir):
            os.makedirs(self._dir, exist_ok=True)
            _fsync_dir(os.path.dirname(os.path.abspath(self._dir)))
        self._lock_fd = os.open(os.path.join(self._dir, _lock_name), os.O_RDWR | os.O_CREAT, 0o644)
        self._start = self._read_trim()[0]
        self._refresh(locked=False)  # the long scan, without holding up writers
        with self._locked():
            self._refresh(locked=True)  # catch up, repair a torn tail, create segment 0

    def _append_sync(self, frames: list[bytes]) -> list[int]:
        data = segment.encode_entries(frames)
        with self._locked():
            self._refresh(locked=True)
            tail = self._segs[-1]
            if tail.end >= self._segment_bytes:
                tail = self._create_segment(tail.next_offset)
            first = tail.next_offset
            try:
                _pwrite_all(tail.fd, data, tail.end)
                _datasync(tail.fd)
            except OSError:
                # Best effort: leave no unsynced bytes that a later sync could half keep.
                with contextlib.suppress(OSError):
                    os.ftruncate(tail.fd, tail.end)
                    os.fsync(tail.fd)
                raise
            pos = tail.end
            for frame in frames:
                tail.positions.append(pos)
                pos += segment.HEADER_SIZE + len(frame)
            tail.end = pos
        return list(range(first, first + len(frames)))

    def _read_sync(self, start: int, max_frames: int) -> list[tuple[int, bytes]]:
        start = max(start, self._start)
        if start >= self._end():
            self._refresh(locked=False)
        out: list[tuple[int, bytes]] = []
        budget = _read_budget_bytes
        i = max(bisect.bisect_right(self._segs, start, key=lambda s: s.base) - 1, 0)
        for seg in self._segs[i:]:
            want = max_frames - len(out)
            k0 = max(start - seg.base, 0)
            if want <= 0 or budget <= 0:
                break
            if k0 >= len(seg.positions):
                continue
            # One pread for the run k0..k1-1: cut it to ``want`` entries and the byte budget.
            k1 = min(len(seg.positions), k0 + want)
            lo = seg.positions[k0]
            if seg.entry_end(k1 - 1) - lo > budget:
                k1 = max(k0 + 1, bisect.bisect_right(seg.positions, lo + budget, k0, k1) - 1)
            hi = seg.entry_end(k1 - 1)
            payloads = segment.decode_run(_pread_all(seg.fd, hi - lo, lo), k1 - k0)
            out.extend(zip(range(seg.base + k0, seg.base + k1), payloads, strict=True))
            budget -= hi - lo
            if k1 < len(seg.positions):
                break  # cut short in this segment: going on to the next would leave a gap
        return out

    def _trim_sync(self, before: int, state: bytes) -> None:
        with self._locked():
            self._refresh(locked=True)
            before = min(before, self._end())
            persisted = self._read_trim()[0]
            if before > persisted:
                self._write_trim(before, state)
            self._start = max(self._start, before, persisted)
            dropped = False
            while len(self._segs) > 1 and self._segs[0].next_offset <= self._start:
                seg = self._segs.pop(0)
                os.close(seg.fd)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(seg.path)
                dropped = True
            if dropped:
                _fsync_dir(self._dir)

    def _close_sync(self) -> None:
        self._close_files()
        self._segs.clear()

    def _close_files(self) -> None:
        for seg in self._segs:
            if seg.fd >= 0:
                os.close(seg.fd)
                seg.fd = -1
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _with_files(self, fn: Callable[..., T], *args: object) -> T:
        if self._released:
            self._reopen_sync()
        return fn(*args)

    def _release_sync(self) -> None:
        if not self._closed and not self._released:
            self._close_files()
            self._released = True

    def _reopen_sync(self) -> None:
        """Reopen the files :meth:`release` closed; the index in memory still describes them."""
        try:
            try:
                self._lock_fd = os.open(os.path.join(self._dir, _lock_name), os.O_RDWR)
            except FileNotFoundError:
                raise LedgerClosedError(f"ledger directory {self._dir} was deleted") from None
            for seg in self._segs:
                with contextlib.suppress(FileNotFoundError):  # trimmed by another handle meanwhile
                    seg.fd = os.open(seg.path, os.O_RDWR)
                    if os.fstat(seg.fd).st_size < seg.end:
                        raise LedgerClosedError(f"{seg.path} is shorter than when its files were released")
        except BaseException:
            self._close_files()  # all or nothing: still released, the next call tries again
            raise
        self._released = False
        present = {s.base for s in self._segs if s.fd >= 0}
        if len(present) < len(self._segs):
            self._forget_trimmed(present)

    # --- the index ------------------------------------------------------------

    def _end(self) -> int:
        return self._segs[-1].next_offset if self._segs else self._start

    def _refresh(self, locked: bool) -> None:
        """Catch up with the files: new entries in the tail, newer segments, trims.

        ``locked``: we hold the lock, so nobody is writing and invalid bytes at
        the end of the last segment are a torn write to cut off.
        """
        try:
            before = time.time_ns()
            mtime = os.stat(self._dir).st_mtime_ns
            if self._segs and mtime == self._listed_mtime_ns and self._listed_at_ns - mtime > _racy_ns:
                # No segment came or went since the last listing: a file created or removed since
                # would have moved the directory's mtime past one taken this long after it was set
                # (its timestamps are coarse, hence the margin: git's "racily clean" rule). Only
                # the tail can have grown. A listing per append or read was ~5% of a service's CPU.
                self._scan_tail(self._segs[-1], sealed=False, locked=locked)
                return
            names = os.listdir(self._dir)
        except FileNotFoundError:
            raise LedgerClosedError(f"ledger directory {self._dir} was deleted") from None
        self._listed_mtime_ns = -1  # until the listing below is applied whole
        self._catch_up(names, locked)
        self._listed_mtime_ns, self._listed_at_ns = mtime, before

    def _catch_up(self, names: list[str], locked: bool) -> None:
        """Apply a listing of the directory: trims, the tail's new entries, newer segments."""
        bases = sorted(b for b in map(segment.parse_segment_name, names) if b is not None)
        present = set(bases)
        if any(s.base not in present for s in self._segs):
            self._forget_trimmed(present)
        # Segments listed *before* the tail is scanned: if a newer one exists, the
        # tail was complete before our scan, so a bad entry in it is corruption.
        newer = [b for b in bases if not self._segs or b > self._segs[-1].base]
        if not self._segs:
            if not newer:
                if locked:
                    self._create_segment(self._start)
                return
            self._segs.append(self._open_segment(newer.pop(0)))
        while True:
            tail = self._segs[-1]
            self._scan_tail(tail, sealed=bool(newer), locked=locked)
            if not newer:
                return
            base = newer.pop(0)
            if base != tail.next_offset:
                raise CorruptEntryError(
                    f"{tail.path} ends at offset {tail.next_offset} but the next segment "
                    f"starts at {base}"
                )
            self._segs.append(self._open_segment(base))

    def _scan_tail(self, seg: _Segment, *, sealed: bool, locked: bool) -> None:
        size = os.fstat(seg.fd).st_size
        need, reason = 0, ""
        while seg.end < size:
            want = min(size - seg.end, max(_scan_chunk_bytes, need))
            buf = os.pread(seg.fd, want, seg.end)
            if len(buf) < want:
                size = seg.end + len(buf)  # the file shrank: another handle cut a torn tail
            res = segment.scan(buf, seg.end)
            seg.positions.extend(res.positions)
            seg.end = res.end
            if res.stop is segment.ScanStop.END:
                continue
            if res.stop is segment.ScanStop.SHORT and res.end + res.need <= size:
                need = res.need  # the chunk ended inside an entry the file holds
                continue
            reason = res.reason
            break
        if seg.end >= size or not (locked or sealed):
            return  # unlocked: a write in progress, or a torn tail the next locked refresh judges
        damage = filecheck.judge(seg.fd, seg.path, seg.end, size, seg.next_offset, sealed=sealed,
                                 reason=reason)
        if damage.corrupt:
            filecheck.count(self._dir)
            log.error("%s", damage.describe())
            raise CorruptEntryError(damage.describe())
        if self._writable:
            log.warning("%s; cutting it off", damage.describe())
            os.ftruncate(seg.fd, seg.end)
            os.fsync(seg.fd)
        elif not self._torn_reported:
            self._torn_reported = True  # a read-only handle never cuts: the next writer will
            log.warning("%s; left in place (read-only)", damage.describe())

    def _forget_trimmed(self, present: set[int]) -> None:
        """Another handle trimmed: drop our segments whose files are gone."""
        keep = [s for s in self._segs if s.base in present]
        for seg in self._segs:
            if seg.base not in present and seg.fd >= 0:
                os.close(seg.fd)
        self._segs = keep
        self._start = max(self._start, self._read_trim()[0])

    def _open_segment(self, base: int) -> _Segment:
        path = os.path.join(self._dir, segment.segment_name(base))
        return _Segment(base, path, os.open(path, os.O_RDWR))

    def _create_segment(self, base: int) -> _Segment:
        path = os.path.join(self._dir, segment.segment_name(base))
        seg = _Segment(base, path, os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644))
        self._segs.append(seg)
        _fsync_dir(self._dir)
        return seg

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    # --- the trim state file ----------------------------------------------------

    def _read_trim(self) -> tuple[int, bytes]:
        try:
            with open(os.path.join(self._dir, _trim_name), "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return 0, FenceState().encode()
        return segment.decode_trim_state(raw)

    def _write_trim(self, start: int, state: bytes) -> None:
        tmp = os.path.join(self._dir, _trim_name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _pwrite_all(fd, segment.encode_trim_state(start, state), 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, os.path.join(self._dir, _trim_name))
        _fsync_dir(self._dir)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    buf = os.pread(fd, size, offset)
    while len(buf) < size:  # short reads are rare; a file shorter than its index is not
        more = os.pread(fd, size - len(buf), offset + len(buf))
        if not more:
            raise CorruptEntryError(f"segment ended {size - len(buf)} bytes before its index")
        buf += more
    return buf


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileLedgerFactory(LedgerFactory):
    """Ledgers as directories of segment files under ``path``."""

    def __init__(self, path: str, *, segment_bytes: int = 64 << 20, io_threads: int = 16,
                 max_open_ledgers: int | None = None) -> None:
        if segment_bytes <= 0:
            raise ValueError("segment_bytes must be positive")
        if io_threads <= 0:
            raise ValueError("io_threads must be positive")
        self._root = path
        self._segment_bytes = segment_bytes
        self._open: list[FencedLedger] = []
        # Every ledger's file I/O, however many are open (threads start as needed).
        self._io = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="ledger-io")
        # At most this many ledgers hold their files open; the rest reopen them on use.
        self.files = OpenFiles(path, max_open_ledgers)

    def ledger_dir(self, name: str) -> str:
        """The directory holding ledger ``name``."""
        return os.path.join(self._root, segment.ledger_dir_name(name))

    async def open(self, name: str, *, writer: bool = True) -> Ledger:
        raw = await FileRawLog.open(self.ledger_dir(name), segment_bytes=self._segment_bytes, pool=self._io,
                                    writable=writer, files=self.files)
        try:
            ledger = await FencedLedger.open(name, raw, writer=writer)
        except BaseException:
            await raw.close()
            raise
        self._open = [led for led in self._open if not led.closed]  # closed by their users
        self._open.append(ledger)
        return ledger

    async def health(self) -> str | None:
        return await self.files.health()

    async def exists(self, name: str) -> bool:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._io, os.path.isdir, self.ledger_dir(name))

    async def delete(self, name: str) -> None:
        for ledger in [led for led in self._open if led.name == name]:
            await ledger.close()  # its files are going away
            self._open.remove(ledger)
        try:
            await asyncio.to_thread(_delete_dir, self.ledger_dir(name), self._root)
        except OSError as exc:
            raise LedgerError(f"could not delete ledger {name}: {exc}") from exc

    async def close(self) -> None:
        for ledger in self._open:
            await ledger.close()
        self._open.clear()
        self._io.shutdown(wait=False)


def _delete_dir(path: str, root: str) -> None:
    """Rename the ledger directory away under its lock (atomic for other openers), then remove it."""
    try:
        lock_fd = os.open(os.path.join(path, _lock_name), os.O_RDWR)
    except FileNotFoundError:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        return
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)  # no append is half done while we rename
        gone = os.path.join(root, f".deleted-{secrets.token_hex(8)}")
        os.rename(path, gone)
        _fsync_dir(root)
    finally:
        os.close(lock_fd)
    shutil.rmtree(gone, ignore_errors=True)
