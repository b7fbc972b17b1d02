"""One partition: its ledger, transaction buffer, producers and snapshots.

Appends go through an ordered pipeline: each gets a ticket before it reaches
the ledger (whose queue keeps call order, so ticket order is position order),
and results are applied to the transaction buffer strictly in ticket order.
So ``max_read_position`` only ever covers entries the buffer has seen: an
entry of a transaction can never be read as committed because the append of
an earlier one finished later.

If an append fails the entry may still have landed; the partition then stops
taking writes and rebuilds its state from the ledger (``_reload``), which
judges every landed entry properly. Until the rebuild is done its state may
miss that entry, so nothing is answered from it: produces, ends and reads wait
for the reload (up to ``reload_wait_ms``) and then answer 503, which callers
(the coordinator's end fan-out above all) retry. The rebuild fills fresh
objects and swaps them in at the end, so no caller ever sees half of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from streamtx.broker import metrics
from streamtx.broker.notify import Notifier
from streamtx.broker.producers import ProducerTable, Verdict, written
from streamtx.broker.settings import BrokerSettings
from streamtx.broker.txnbuffer import snapshot as tbsnapshot
from streamtx.broker.txnbuffer.buffer import TxnBufferState
from streamtx.contracts.states import Action
from streamtx.contracts.txnid import TxnId
from streamtx.errors import ConflictError, FencedError, StreamtxError, TooLargeError, UnavailableError
from streamtx.ledger import Entry, Ledger, LedgerFactory, Position
from streamtx.records import partition as codec
from streamtx.records.partition import EntryHeader, EntryKind, Message, ProducerInfo

log = logging.getLogger(__name__)

_replay_chunk = 2000


def partition_ledger_name(partition: str) -> str:
    """``persistent://t/n/x-partition-0`` → ``topics/t/n/x-partition-0``."""
    return "topics/" + partition.removeprefix("persistent://")


def snapshot_ledger_name(partition: str) -> str:
    return "tbsnapshot/" + partition.removeprefix("persistent://")


@dataclass(frozen=True, slots=True)
class RawBatch:
    """Messages already in the stored layout (a validated binary section): stored as they are."""

    body: bytes
    count: int
    first_index: int
    value_bytes: int


Batch = list[Message] | RawBatch


class Partition:
    """Create with :meth:`open`; everything the broker stores for one partition."""

    def __init__(self, name: str, topic: str, ledger: Ledger, snap: Ledger,
                 settings: BrokerSettings, notifier: Notifier, ledgers: LedgerFactory | None = None) -> None:
        self.name = name
        self.topic = topic
        self.ledger = ledger
        self.snap = snap
        self.compaction = tbsnapshot.Adoption(ledgers, snap)  # of the snapshot ledger (``compact`` job)
        self.settings = settings
        self.notifier = notifier
        self.tb = TxnBufferState(segment_size=settings.snapshot_segment_size)
        self.producers = self._new_producers()
        self.last_snapshot_ms = 0
        self.snapshot_sequence = 0
        self.recovery_s = 0.0
        self._next_ticket = 0
        self._next_apply = 0
        self._done: dict[int, tuple[Position, Callable[[Position], None]] | None] = {}
        self._waiters: dict[int, asyncio.Future[None]] = {}
        self._horizons: list[tuple[int, asyncio.Future[None]]] = []
        self._open_since: dict[TxnId, float] = {}  # loop time a txn was first seen open here
        self._ending: dict[TxnId, asyncio.Future[None]] = {}
        self._producer_locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._in_flight_seq: dict[str, int] = {}  # replicated entries started, by producer
        self._snapshot_lock = asyncio.Lock()
        self._broken: StreamtxError | None = None
        self._ready = asyncio.Event()  # set while not broken
        self._ready.set()
        self._breaks = 0  # failed appends so far: an end that saw one during its wait retries
        self._reload_task: asyncio.Task[None] | None = None
        self._snapshot_task: asyncio.Task[None] | None = None
        self._labels = (settings.cluster, name)
        # Broker replicas: called when an append finds another process's fence (it owns us now).
        self.on_fenced: Callable[[Partition], None] | None = None
        metrics.watch(self)

    @classmethod
    async def open(cls, ledgers: LedgerFactory, name: str, topic: str, settings: BrokerSettings,
                   notifier: Notifier) -> Partition:
        ledger = await ledgers.open(partition_ledger_name(name))
        snap = await ledgers.open(snapshot_ledger_name(name))
        part = cls(name, topic, ledger, snap, settings, notifier, ledgers)
        await part.recover()
        return part

    # --- recovery -------------------------------------------------------------

    async def recover(self) -> None:
        """Rebuild TB and producer state: latest complete snapshot, then replay after it.

        Built aside and swapped in at the end: the state in use is never half rebuilt.
        """
        t0 = time.perf_counter()
        tb = TxnBufferState(segment_size=self.settings.snapshot_segment_size)
        producers = self._new_producers()
        loaded = await tbsnapshot.load(self.snap, await self.compaction.base())
        start: Position | None = None
        if loaded is not None:
            ix = loaded.index
            tb.load_segments(loaded.segments, ix.unsealed)
            for txn, first_pos in ix.ongoing:
                tb.ongoing[txn] = Position(*first_pos)
            tb.last_position = ix.snapshot_position
            tb.max_read_floor = ix.max_read
            producers = ProducerTable.from_json(ix.producers, seen_ms=ix.timestamp_ms,
                                                idle_ms=producers.idle_ms, max_names=producers.max_names)
            tb.restore_ends(ix.ended)
            if ix.snapshot_position is not None:
                sp = ix.snapshot_position
                start = Position(sp.ledger_id, self.ledger.next_entry_id(sp.entry_id))
        await self._replay(start, tb, producers)
        first = self.ledger.first_position()
        if first is not None:
            tb.trim(first)
        tb.ops_since_snapshot = 0
        self.tb, self.producers = tb, producers
        self._in_flight_seq = {}
        if loaded is not None:
            self.snapshot_sequence = loaded.index.sequence + 1
            self.last_snapshot_ms = loaded.index.timestamp_ms
        async with self._snapshot_lock:  # a snapshot still in flight from before a reload
            await self.compaction.adopt((loaded.position, loaded.index) if loaded else None, now=True)
        self.recovery_s = time.perf_counter() - t0
        metrics.tb_recovery_seconds.labels(self.settings.cluster).observe(self.recovery_s)
        self._update_gauges()
        log.info("partition %s recovered in %.3fs (snapshot %s, aborted %d, ongoing %d)",
                 self.name, self.recovery_s, loaded.position if loaded else None,
                 len(self.tb.aborted), len(self.tb.ongoing))

    async def _replay(self, start: Position | None, tb: TxnBufferState, producers: ProducerTable) -> None:
        while True:
            entries = await self.ledger.read(start, _replay_chunk)
            if not entries:
                return
            for e in entries:
                self._apply_entry(e.position, codec.decode_header(e.data), tb, producers)
            last = entries[-1].position
            start = Position(last.ledger_id, self.ledger.next_entry_id(last.entry_id))

    @staticmethod
    def _apply_entry(pos: Position, h: EntryHeader, tb: TxnBufferState, producers: ProducerTable) -> None:
        if h.kind is EntryKind.BATCH:
            if h.txn is not None and tb.is_aborted(h.txn):
                tb.on_entry(pos)  # a zombie's late write: never visible
            else:
                tb.on_message(pos, h.txn)
            if h.producer is not None:
                _record_producer(producers, h.producer, pos, h.count, None, h.publish_time_ms)
        elif h.kind in (EntryKind.COMMIT, EntryKind.ABORT):
            assert h.txn is not None
            tb.on_marker(pos, h.txn, Action.COMMIT if h.kind is EntryKind.COMMIT
                         else Action.ABORT)
        else:
            tb.on_entry(pos)
            if h.producer is not None:
                _record_producer(producers, h.producer, pos, 0, None, h.publish_time_ms)

    def _new_producers(self) -> ProducerTable:
        return ProducerTable(idle_ms=int(self.settings.producer_idle_s * 1000),
                             max_names=self.settings.producer_max_names)

    # --- the ordered append pipeline --------------------------------------------

    async def _append(self, data: bytes, apply: Callable[[Position], None]) -> Position:
        return await asyncio.shield(self._start_append(data, apply))

    def _start_append(self, data: bytes, apply: Callable[[Position], None]) -> asyncio.Future[Position]:
        """Take the next ticket now (synchronously) and start the append; its future."""
        if self._broken is not None:
            raise UnavailableError(f"partition {self.name} is recovering: {self._broken.message}")
        ticket = self._next_ticket
        self._next_ticket += 1
        # A task, awaited shielded: a caller that goes away (client disconnect) must not
        # leave its ticket unsettled, which would stall every later append of the partition.
        # Tasks start in creation order, so appends reach the ledger in ticket order.
        return asyncio.ensure_future(self._append_ticket(ticket, data, apply))

    def start_replicated(self, data: bytes, producer: ProducerInfo, count: int, publish_time_ms: int
                         ) -> asyncio.Future[Position] | None:
        """Start appending an entry copied from another cluster; None when this partition has it.

        ``producer.sequence`` is the entry's id in its source partition, so a sequence
        not above the last one seen (or already in flight) is a duplicate: a replication
        controller that crashed after writing and before moving its cursor sends it
        again, and it is dropped here. Synchronous up to the ticket, so entries started
        in a loop land in that order; a failed append reloads the partition, which
        rebuilds ``_in_flight_seq`` from what landed. ``publish_time_ms`` is the entry's
        header time (the time here: producer idleness is judged by it, see producers.py).
        """
        if len(data) > self.settings.max_entry_bytes:
            raise TooLargeError(f"{len(data)} bytes for {self.name} in one replicated entry")
        if self.producers.check(producer.name, producer.epoch, producer.sequence) != Verdict.NEW:
            return None
        if producer.sequence <= self._in_flight_seq.get(producer.name, -1):
            return None

        def apply(pos: Position) -> None:
            if count:
                self.tb.on_message(pos, None)
            else:
                self.tb.on_entry(pos)
            _record_producer(self.producers, producer, pos, count, None, publish_time_ms)

        fut = self._start_append(data, apply)
        self._in_flight_seq[producer.name] = producer.sequence
        return fut

    async def append_marker(self, body: bytes) -> Position:
        """Append a replication marker written here (a snapshot request, response or update)."""
        data = codec.encode_replication_marker(body, publish_time_ms=int(time.time() * 1000))
        return await self._append(data, self.tb.on_entry)

    async def _append_ticket(self, ticket: int, data: bytes, apply: Callable[[Position], None]
                             ) -> Position:
        try:
            pos = await self.ledger.append(data)
        except BaseException as exc:
            self._done[ticket] = None
            self._drain()
            if isinstance(exc, FencedError) and self.on_fenced is not None:
                self.on_fenced(self)
            if self._broken is None:
                self._broken = exc if isinstance(exc, StreamtxError) else UnavailableError(repr(exc))
                self._breaks += 1
                self._ready.clear()
                self._reload_task = asyncio.get_running_loop().create_task(self._reload())
            raise
        self._done[ticket] = (pos, apply)
        self._drain()
        if ticket >= self._next_apply:
            fut = self._waiters[ticket] = asyncio.get_running_loop().create_future()
            await fut
        return pos

    def _drain(self) -> None:
        progressed = False
        while self._next_apply in self._done:
            item = self._done.pop(self._next_apply)
            if item is not None:
                pos, apply = item
                apply(pos)
                progressed = True
            waiter = self._waiters.pop(self._next_apply, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
            self._next_apply += 1
        if self._horizons:
            for _, fut in [x for x in self._horizons if x[0] <= self._next_apply]:
                if not fut.done():
                    fut.set_result(None)
            self._horizons = [x for x in self._horizons if x[0] > self._next_apply]
        if progressed:
            self.notifier.changed()

    async def _reload(self) -> None:
        """After a failed append: wait for in-flight appends, then rebuild from the ledger."""
        while self._next_apply < self._next_ticket:  # noqa: ASYNC110 - a rare error path
            await asyncio.sleep(0.05)
        delay = 0.1
        while True:
            try:
                await self.ledger.refresh()
                await self.recover()
                self._broken = None
                self._ready.set()
                self.notifier.changed()
                return
            except StreamtxError as exc:
                log.warning("partition %s: reload failed (%s); retrying", self.name, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    @property
    def reloading(self) -> bool:
        """True from a failed append until the state is rebuilt from the ledger."""
        return self._broken is not None

    async def until_ready(self) -> None:
        """Return at once unless reloading; then wait for it, or 503 after ``reload_wait_ms``."""
        if self._broken is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), self.settings.reload_wait_ms / 1000)
        if self._broken is not None:
            raise UnavailableError(f"partition {self.name} is reloading after a failed append "
                                   f"({self._broken.message}); retry")

    # --- produce ------------------------------------------------------------------

    async def produce(self, messages: Batch, txn: TxnId | None,
                      producer: ProducerInfo | None, fence_epoch: int | None) -> list[tuple[int, str]]:
        """Store one batch; ``(request_index, message_id)`` per message (original ids on a dup)."""
        got = await self.produce_batch(messages, txn, producer, fence_epoch)
        if isinstance(got, list):
            return got
        pos, n = got
        first = messages.first_index if isinstance(messages, RawBatch) else 0
        req = (range(first, first + n) if isinstance(messages, RawBatch)
               else [m.request_index for m in messages])
        return [(ri, codec.message_id(pos.ledger_id, pos.entry_id, bi, n)) for bi, ri in enumerate(req)]

    async def produce_batch(self, messages: Batch, txn: TxnId | None, producer: ProducerInfo | None,
                            fence_epoch: int | None) -> tuple[Position, int] | list[tuple[int, str]]:
        """Store one batch: where and how many, or a duplicate's original ``(request_index, id)`` pairs."""
        await self.until_ready()
        if txn is not None:
            ended = self.tb.ended_as(txn)
            if ended is not None:
                raise ConflictError(f"txn {txn!s} already ended here: {ended.action.value}")
        if producer is None:
            return await self._produce(messages, txn, None)
        async with self._producer_lock(producer.name):
            if fence_epoch is not None and producer.epoch < fence_epoch:
                raise ConflictError(f"producer {producer.name} epoch {producer.epoch} is fenced")
            verdict = self.producers.check(producer.name, producer.epoch, producer.sequence)
            if verdict == Verdict.FENCED:
                raise ConflictError(f"producer {producer.name} epoch {producer.epoch} is fenced")
            if verdict == Verdict.DUPLICATE:
                ids = self.producers.original_ids(producer.name, producer.sequence)
                if ids is None:
                    raise ConflictError(f"producer {producer.name}: sequence {producer.sequence} "
                                        "is an old duplicate whose ids are no longer known")
                return ids
            return await self._produce(messages, txn, producer)

    @contextlib.asynccontextmanager
    async def _producer_lock(self, name: str) -> AsyncIterator[None]:
        """One request at a time per producer name; the lock is dropped when its last user leaves."""
        lock, users = self._producer_locks.get(name) or (asyncio.Lock(), 0)
        self._producer_locks[name] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._producer_locks[name]
            if users == 1:
                del self._producer_locks[name]
            else:
                self._producer_locks[name] = (lock, users - 1)

    async def _produce(self, messages: Batch, txn: TxnId | None,
                       producer: ProducerInfo | None) -> tuple[Position, int]:
        now_ms = int(time.time() * 1000)
        req: list[int] | None
        if isinstance(messages, RawBatch):
            n, value_bytes = messages.count, messages.value_bytes
            req = None if messages.first_index == 0 else list(range(messages.first_index,
                                                                       messages.first_index + n))
        else:
            n, value_bytes = len(messages), sum(len(m.value) for m in messages)
            req = [m.request_index for m in messages]
        if not n:
            assert producer is not None
            data = codec.encode_producer(producer, publish_time_ms=now_ms)
        elif isinstance(messages, RawBatch):
            data = codec.encode_raw_batch(messages.body, n, publish_time_ms=now_ms, txn=txn,
                                          producer=producer)
        else:
            data = codec.encode_batch(messages, publish_time_ms=now_ms, txn=txn, producer=producer)
        if len(data) > self.settings.max_entry_bytes:
            raise TooLargeError(f"{len(data)} bytes for {self.name} in one request; the limit is "
                                f"{self.settings.max_entry_bytes}")
        if txn is not None and (txn in self._ending or self.tb.ended_as(txn) is not None):
            # Checked with no await before the append takes its ticket (see ``end_txn``).
            raise ConflictError(f"txn {txn!s} is ending or ended here")

        def apply(pos: Position) -> None:
            if n:
                self.tb.on_message(pos, txn)
            else:
                self.tb.on_entry(pos)
            if producer is not None:
                _record_producer(self.producers, producer, pos, n, req, now_ms)

        pos = await self._append(data, apply)
        metrics.messages_in.labels(*self._labels).inc(n)
        metrics.bytes_in.labels(*self._labels).inc(value_bytes)
        if txn is not None:
            self._after_txn_op()
        return pos, n

    # --- ending transactions ------------------------------------------------------

    async def end_txn(self, txn: TxnId, action: Action) -> str | None:
        """Write the marker (once); the marker's message id, or None if txn never produced here."""
        await self.until_ready()
        while (pending := self._ending.get(txn)) is not None:
            await asyncio.shield(pending)
        ended = self.tb.ended_as(txn)
        if ended is not None:
            if ended.action is not action:
                raise ConflictError(f"txn {txn!s} already ended here: {ended.action.value}")
            return None if ended.marker is None else str(ended.marker)
        # From here no new append of this txn may start (``_produce`` checks ``_ending``),
        # and the ones already started are waited for: a message racing the end either
        # makes the txn ongoing before we look, or is refused.
        done = self._ending[txn] = asyncio.get_running_loop().create_future()
        try:
            breaks = self._breaks
            await self._applied_through(self._next_ticket)
            if self._breaks != breaks or self._broken is not None:
                # An append we waited for failed: it may have landed (a message of this
                # txn), which the state shows only once reloaded. Never decide from it.
                raise UnavailableError(f"partition {self.name} is reloading; retry the end")
            if txn not in self.tb.ongoing and action is Action.COMMIT:
                self.tb.end_without_marker(txn, action)
                return None
            # An abort is logged even where the txn never produced (yet): a produce of
            # it that arrives later - a zombie's, or one racing the abort - is then
            # refused after a restart too. Remembered only in memory, such a produce
            # would open the txn again once the broker restarted, and hold back every
            # reader of the partition until the stuck-txn checker asked the TC.
            kind = EntryKind.COMMIT if action is Action.COMMIT else EntryKind.ABORT
            data = codec.encode_marker(kind, txn, publish_time_ms=int(time.time() * 1000))
            pos = await self._append(data, lambda p: self.tb.on_marker(p, txn, action))
        finally:
            del self._ending[txn]
            done.set_result(None)
        metrics.txn_markers.labels(*self._labels, action.value).inc()
        self._after_txn_op()
        return str(pos)

    async def _applied_through(self, horizon: int) -> None:
        """Wait until every append with a ticket below ``horizon`` was applied (or failed)."""
        if self._next_apply >= horizon:
            return
        fut = asyncio.get_running_loop().create_future()
        self._horizons.append((horizon, fut))
        await fut

    # --- reading ------------------------------------------------------------------

    def max_read_position(self) -> Position | None:
        return self.tb.max_read_position()

    def max_read_figures(self) -> tuple[tuple[str, str], int, int] | None:
        """For the metrics: ((cluster, topic), maxReadPosition's entry id, entries behind the last)."""
        mrp, last = self.tb.max_read_position(), self.tb.last_position
        if mrp is None or last is None:
            return None
        behind = last.entry_id - mrp.entry_id if last.ledger_id == mrp.ledger_id else last.entry_id + 1
        return self._labels, mrp.entry_id, max(0, behind)

    def stuck_txns(self, older_than_s: float) -> list[TxnId]:
        """Txns open here for longer than ``older_than_s`` (since this process saw them)."""
        now = asyncio.get_running_loop().time()
        since = self._open_since
        for txn in [t for t in since if t not in self.tb.ongoing]:
            del since[txn]
        for txn in self.tb.ongoing:
            since.setdefault(txn, now)
        return [t for t, t0 in since.items() if now - t0 > older_than_s]

    async def read_visible(self, start: Position | None, max_entries: int) -> list[Entry]:
        """Entries from ``start`` up to ``max_read_position`` (inclusive); none while reloading."""
        if self._broken is not None:
            return []  # callers wait with :meth:`until_ready` before they take anything out
        limit = self.tb.max_read_position()
        if limit is None or (start is not None and start > limit):
            return []
        if start is not None:  # ids only grow, with gaps: never more entries than the id span
            max_entries = min(max_entries, limit.entry_id - start.entry_id + 1)
        entries = await self.ledger.read(start, max_entries)
        return [e for e in entries if e.position <= limit]

    async def trim(self, before: Position) -> int:
        """Trim the partition ledger; drop the aborted ids whose markers went with it."""
        await self.ledger.trim(before)
        first: Position = self.ledger.first_position() or before
        dropped = self.tb.trim(first)
        self._update_gauges()
        return dropped

    # --- snapshots ------------------------------------------------------------------

    def _after_txn_op(self) -> None:
        self._update_gauges()
        due = self.tb.ops_since_snapshot >= self.settings.snapshot_every_ops
        # One snapshot in flight or queued at most: under load, ops pile up behind it
        # and the next one takes them all (a task per op would write an index each).
        if due and (self._snapshot_task is None or self._snapshot_task.done()):
            self._snapshot_task = asyncio.get_running_loop().create_task(self.take_snapshot())

    async def maybe_snapshot_on_timer(self) -> None:
        if self.tb.ops_since_snapshot > 0 and not self._snapshot_lock.locked():
            await self.take_snapshot()

    async def take_snapshot(self) -> None:
        async with self._snapshot_lock:
            if self._broken is not None:
                return
            ops = self.tb.ops_since_snapshot
            self.producers.evict(int(time.time() * 1000))  # idle ones even when none produced lately
            segments, index = tbsnapshot.capture(self.tb, self.producers, self.snapshot_sequence)
            self.snapshot_sequence += 1
            try:
                position = await tbsnapshot.write(self.snap, segments, index)
            except StreamtxError as exc:
                log.warning("partition %s: snapshot failed: %s", self.name, exc)
                return
            await self.compaction.adopt((position, index))
            self.tb.ops_since_snapshot = max(0, self.tb.ops_since_snapshot - ops)
            self.last_snapshot_ms = index.timestamp_ms
            metrics.tb_snapshots.labels(*self._labels).inc()

    def _update_gauges(self) -> None:
        metrics.tb_ongoing.labels(*self._labels).set(len(self.tb.ongoing))
        metrics.tb_aborted.labels(*self._labels).set(len(self.tb.aborted))

    def stats(self) -> dict[str, object]:
        out = self.tb.stats()
        out.update({
            "partition": self.name,
            "state": "Recovering" if self._broken is not None else "Ready",
            "lastSnapshotTimestamp": self.last_snapshot_ms,
            "snapshotLedgerEntries": sum(s.entries for s in self.snap.stats()),
            "recoveryTimeMs": round(self.recovery_s * 1000, 3),
            "lastPosition": str(self.tb.last_position) if self.tb.last_position else None,
        })
        return out

    async def close(self) -> None:
        metrics.unwatch(self)
        if self._reload_task is not None:
            self._reload_task.cancel()
        if self._snapshot_task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._snapshot_task  # a snapshot half written is harmless, but finish it
        await self.ledger.close()
        await self.snap.close()


def _record_producer(producers: ProducerTable, p: ProducerInfo, pos: Position, count: int,
                     request_indexes: list[int] | None, now_ms: int) -> None:
    where = written(pos.ledger_id, pos.entry_id, count, request_indexes) if count else None
    producers.record(p.name, p.epoch, p.sequence, where, now_ms)
