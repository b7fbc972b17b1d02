"""One subscription's pending-ack store: its log, its cursor and its state.

The log (ledger ``pendingack/<topic>/<subscription>``) is the source of truth;
memory is rebuilt from it by :meth:`PendingAckStore.open`. Records reach the log
through a :class:`RecordWriter` (the PIP-160 buffered writer), which answers
every write with ``(position, batch_index, batch_size)``; when a transaction
ends, its records are deleted at batch-index level through a cursor over the
log, and the log is trimmed up to the cursor's mark-delete now and then.

Races, and why this order:

* ack: the conflict check and the hold happen with no ``await`` between them,
  so two concurrent acks of one message cannot both pass; the hold is undone
  if the write fails. Acks of different transactions batch together.
* prepare: check and reserve without an ``await`` between them (the optimistic
  check is atomic per subscription), then log PREPARED.
* end: stop taking acks for the transaction, wait for its in-flight ack
  writes, tell the broker, log COMMITTED/ABORTED, then delete its records. A
  crash anywhere before the final record replays as an open (or prepared)
  transaction, and the coordinator's retried end repeats the idempotent steps.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from streamtx.batching import compacted
from streamtx.batching.replay import replay_entries, replay_records
from streamtx.contracts import Action, TxnId
from streamtx.cursor import Cursor, cursor_ledger_name
from streamtx.errors import ConflictError, FencedError, LedgerError, MalformedError, UnavailableError
from streamtx.ledger import Ledger, LedgerFactory, Position
from streamtx.pendingack.broker_client import BrokerNotifier
from streamtx.pendingack.metrics import PendingAckMetrics
from streamtx.records.pendingack import (
    MessageId,
    PendingAck,
    Record,
    RecordKind,
    TxnMarker,
    decode,
)
from streamtx.records.pendingack_state import LogSlot, SubscriptionState, TxnAcks, TxnPhase

log = logging.getLogger(__name__)

cursor_name = "pendingack"  # the one cursor over each pending-ack log
_replay_chunk = 1000  # entries per read while replaying


def log_name(topic: str, subscription: str) -> str:
    """The ledger of one subscription's pending-ack log."""
    return f"pendingack/{topic}/{subscription}"


async def delete_log(ledgers: LedgerFactory, topic: str, subscription: str) -> bool:
    """Delete a (closed) pending-ack log and its cursor's ledger; False when there was none."""
    name = log_name(topic, subscription)
    if not await ledgers.exists(name):
        return False
    # The cursor's ledger first: a log left without it would replay every record as live.
    cursor = cursor_ledger_name(name, cursor_name)
    if await ledgers.exists(cursor):
        await ledgers.delete(cursor)
    await ledgers.delete(name)
    return True


class WriteResult(Protocol):
    """Where a record landed (the buffered writer's answer)."""

    @property
    def position(self) -> Position: ...
    @property
    def batch_index(self) -> int: ...
    @property
    def batch_size(self) -> int: ...


class RecordWriter(Protocol):
    """Writes records durably, maybe several per entry (the buffered writer)."""

    async def write(self, record: Record) -> WriteResult: ...
    def set_enabled(self, enabled: bool) -> None: ...


WriterFactory = Callable[[Ledger, bool], RecordWriter]


@dataclass(frozen=True, slots=True)
class ReplayStats:
    """What the last replay read."""

    entries: int
    records: int
    skipped_deleted: int
    seconds: float


class PendingAckStore:
    """The pending acks of one subscription; create it with :meth:`open`."""

    def __init__(
        self, topic: str, subscription: str, ledger: Ledger, cursor: Cursor, writer: RecordWriter,
        state: SubscriptionState, notifier: BrokerNotifier, *, batch_enabled: bool, trim_every_ends: int,
        metrics: PendingAckMetrics | None = None,
    ) -> None:
        self.topic = topic
        self.subscription = subscription
        self.ledger = ledger
        self.cursor = cursor
        self.state = state
        self.batch_enabled = batch_enabled
        self.replay: ReplayStats | None = None
        self._writer = writer
        self._notifier = notifier
        # Without metrics, count into a registry nobody scrapes (no `if` at every call).
        self._metrics = metrics or PendingAckMetrics("", registry=CollectorRegistry())
        self._trim_every_ends = trim_every_ends
        self._ends_since_trim = 0
        self._inflight: dict[TxnId, int] = {}  # ack writes not yet answered, per transaction
        self._inflight_done = asyncio.Condition()
        self._end_locks: dict[TxnId, tuple[asyncio.Lock, int]] = {}
        self._cleanups: set[asyncio.Task[None]] = set()  # deletes of ended transactions' records
        self._factory: LedgerFactory | None = None  # where compacted bases live (set by open)
        self.adopted_base = -1  # the compacted base generation adopted (see batching/compacted.py)

    @classmethod
    async def open(
        cls, ledgers: LedgerFactory, topic: str, subscription: str, *, writer_factory: WriterFactory,
        notifier: BrokerNotifier, batch_enabled: bool,
        max_committed_ids: int, max_ended_txns: int, trim_every_ends: int,
        metrics: PendingAckMetrics | None = None,
    ) -> PendingAckStore:
        """Open the subscription's log as its writer (fencing any earlier store) and replay it."""
        ledger = await ledgers.open(log_name(topic, subscription), writer=True)
        try:
            cursor = await Cursor.open(ledgers, ledger, cursor_name)
        except BaseException:
            await ledger.close()
            raise
        state = SubscriptionState(max_committed_ids=max_committed_ids, max_ended_txns=max_ended_txns)
        self = cls(
            topic, subscription, ledger, cursor, writer_factory(ledger, batch_enabled), state, notifier,
            batch_enabled=batch_enabled, trim_every_ends=trim_every_ends, metrics=metrics,
        )
        self._factory = ledgers
        garbage = await self._replay()
        if garbage:
            await self._delete(garbage)
        return self

    async def _replay(self) -> list[LogSlot]:
        """Rebuild the state from the log, skipping records the cursor deleted."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        entries = records = skipped = 0
        garbage: list[LogSlot] = []
        start: Position = self.cursor.first_undeleted()

        def one(position: Position, index: int, size: int, payload: bytes) -> None:
            garbage.extend(self.state.apply(decode(payload), LogSlot(position, index, size)))

        # A compacted base stands in for what the log no longer holds: read it first.
        loaded = await compacted.load_base(self._factory, self.ledger.name) if self._factory else None
        if loaded is not None:
            takes_over = compacted.takes_over(self.ledger, loaded[0])
            applied, dropped = replay_records(compacted.below(loaded[1], takes_over), self.ledger.ledger_id,
                                              self.cursor, one)
            records += applied
            skipped += dropped
            start = max(start, Position(self.ledger.ledger_id, takes_over))
        while True:
            chunk = await self.ledger.read(start, _replay_chunk)
            if not chunk:
                break
            entries += len(chunk)
            applied, dropped = replay_entries(chunk, self.cursor, one)
            records += applied
            skipped += dropped
            last = chunk[-1].position
            start = Position(last.ledger_id, self.ledger.next_entry_id(last.entry_id))
        if loaded is not None:  # adopt the base if it holds what the state stands on
            self.adopted_base = await compacted.adopt_loaded(self.ledger, *loaded, self._needed(),
                                                             self.adopted_base)
        self.replay = ReplayStats(entries, records, skipped, loop.time() - started)
        self._metrics.replayed(self.replay.seconds)
        log.info("pending-ack %s/%s replayed: %s", self.topic, self.subscription, self.replay)
        return garbage

    # --- the transactional ack path -------------------------------------------

    async def ack(self, txn: TxnId, ids: list[MessageId], cumulative: bool) -> None:
        """Hold ``ids`` for ``txn``; return once a PENDING_ACK record is durable."""
        if not ids:
            raise MalformedError("message_ids is empty")
        try:
            self.state.check_ack(txn, ids, cumulative)
        except ConflictError:
            self._metrics.conflict("ack")
            raise
        current = self.state.txns.get(txn)
        previous = TxnAcks(txn, set(current.ids), dict(current.cumulative)) if current else TxnAcks(txn)
        acks = self.state.add_ack(txn, ids, cumulative)
        self._inflight[txn] = self._inflight.get(txn, 0) + 1
        try:
            result = await self._write(PendingAck(txn, tuple(ids), cumulative))
        except BaseException:
            self.state.remove_ack(txn, ids, cumulative, previous)
            raise
        else:
            acks.slots.append(LogSlot(result.position, result.batch_index, result.batch_size))
            self._metrics.acked(len(ids))
        finally:
            await self._ack_done(txn)

    async def absorb(self, other: SubscriptionState) -> int:
        """Take over the open transactions of ``other``: the state of a log written under a
        partition's own name before names were canonical (issue 32 defect 1). Their records are
        written again here, as they were logged there (no checks: that log was the truth), so
        that log can be deleted; a retried absorption only repeats idempotent records. Returns
        how many transactions were taken over. Committed positions are not carried: the broker
        deleted them from its cursor before they were logged committed (see pendingack_state)."""
        taken = 0
        for acks in list(other.txns.values()):
            if self.state.ended(acks.txn) is not None:
                continue  # ended here already: the old log's records are leftovers
            records: list[Record] = []
            if acks.ids:
                records.append(PendingAck(acks.txn, tuple(sorted(acks.ids)), False))
            if acks.cumulative:
                records.append(PendingAck(acks.txn, tuple(sorted(acks.cumulative.values())), True))
            if acks.phase is not TxnPhase.OPEN:
                records.append(TxnMarker(RecordKind.PREPARED, acks.txn))
            for record in records:
                result = await self._write(record)
                slot = LogSlot(result.position, result.batch_index, result.batch_size)
                self.state.apply(record, slot)
            taken += 1
        return taken

    async def _write(self, record: Record) -> WriteResult:
        """Write one record durably; a fenced log answers 503 (another store owns it), not 409."""
        try:
            return await self._writer.write(record)
        except FencedError as exc:
            raise UnavailableError(
                f"pending-ack log of {self.topic}/{self.subscription} is owned by another store: {exc}"
            ) from exc

    async def _ack_done(self, txn: TxnId) -> None:
        left = self._inflight[txn] - 1
        if left:
            self._inflight[txn] = left
        else:
            del self._inflight[txn]
        async with self._inflight_done:
            self._inflight_done.notify_all()

    def held(self) -> list[str]:
        """Ids held by open transactions (the broker must not dispatch them)."""
        return [str(m) for m in self.state.held_ids()]

    def holders(self) -> dict[str, list[str]]:
        """:meth:`held` by transaction: the broker ignores those of a transaction it saw end (an
        answer listing an ending transaction can reach it after that transaction's end)."""
        return {str(t): [str(m) for m in ids] for t, ids in self.state.held_by_txn().items()}

    def cumulative(self) -> dict[str, list[str]]:
        """Each open transaction's cumulative ack ids: the broker holds everything up to them."""
        return {str(t.txn): [str(m) for m in sorted(t.cumulative.values())]
                for t in self.state.txns.values() if t.cumulative}

    async def prepare(self, txn: TxnId) -> None:
        """The optimistic check: 409 if ``txn`` overlaps another's committed or prepared acks."""
        try:
            self.state.check_prepare(txn)
        except ConflictError:
            self._metrics.conflict("prepare")
            raise
        acks = self.state.txns.get(txn)
        if acks is None or acks.phase is TxnPhase.PREPARED or not self.state.prepare(txn):
            return
        try:
            result = await self._write(TxnMarker(RecordKind.PREPARED, txn))
        except BaseException:
            self.state.unprepare(txn)
            raise
        acks.slots.append(LogSlot(result.position, result.batch_index, result.batch_size))

    def ending_now(self, txn: TxnId) -> bool:
        """Whether an end of ``txn`` is running (or waiting for one that is)."""
        return txn in self._end_locks

    async def end(self, txn: TxnId, commit: bool) -> None:
        """Commit or abort ``txn``'s acks here; idempotent.

        For a transaction holding nothing here only the end is remembered (in
        memory, bounded by ``max_ended_txns``): later acks of it get 409.
        """
        # One end at a time per transaction (the coordinator may retry while
        # the first attempt still waits for the broker); the lock is dropped
        # when its last user leaves.
        lock, users = self._end_locks.get(txn, (asyncio.Lock(), 0))
        self._end_locks[txn] = (lock, users + 1)
        try:
            async with lock:
                await self._end(txn, commit)
        finally:
            lock, users = self._end_locks[txn]
            if users == 1:
                del self._end_locks[txn]
            else:
                self._end_locks[txn] = (lock, users - 1)

    async def _end(self, txn: TxnId, commit: bool) -> None:
        kind = RecordKind.COMMITTED if commit else RecordKind.ABORTED
        done = self.state.ended(txn)
        if done is not None:
            if done is not kind:
                raise ConflictError(f"transaction {txn} already {done.name}")
            return
        acks = self.state.begin_end(txn)
        if acks is None:
            # Nothing held here (yet): remember the end, so that an ack the
            # client sends after it (or racing it) is refused instead of
            # holding its messages for a transaction nobody will end again.
            self.state.finish_end(txn, kind)
            return
        async with self._inflight_done:
            await self._inflight_done.wait_for(lambda: txn not in self._inflight)
        ids = acks.message_ids()
        await self._notifier.end(
            self.topic, self.subscription, txn, Action.COMMIT if commit else Action.ABORT,
            [str(m) for m in ids],
            cumulative_message_ids=[str(c) for _, c in sorted(acks.cumulative.items())],
        )
        result = await self._write(TxnMarker(kind, txn))
        self.state.finish_end(txn, kind)
        self._metrics.ended(commit)
        # The clean-up is not part of the end (a lost delete is redone by the next
        # replay): off the commit's path, which waits for this end.
        task = asyncio.create_task(
            self._delete([*acks.slots, LogSlot(result.position, result.batch_index, result.batch_size)])
        )
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    async def _delete(self, slots: list[LogSlot]) -> None:
        """Delete finished records at batch-index level; trim the log now and then.

        Best effort: a delete lost here is redone by the next replay, which
        finds the records of an ended transaction again.
        """
        try:
            await asyncio.gather(*(
                self.cursor.delete([s.position]) if s.batch_size <= 1
                else self.cursor.delete_batch_index(s.position, s.batch_index, s.batch_size)
                for s in slots
            ))
            self._ends_since_trim += 1
            if self._ends_since_trim >= self._trim_every_ends:
                self._ends_since_trim = 0
                await self.cursor.trim_ledger()
                await self.adopt_compaction()
        except LedgerError as exc:
            log.warning("pending-ack %s/%s: deleting records failed: %r", self.topic, self.subscription, exc)

    async def adopt_compaction(self) -> None:
        """Adopt a compacted base of the log (``compact`` Spark job) that holds what we still need."""
        if self._factory is not None:
            self.adopted_base = await compacted.adopt(self._factory, self.ledger, self._needed(),
                                                      self.adopted_base)

    def _needed(self) -> list[tuple[Position, int, int]]:
        """The records the state stands on: those of every transaction holding acks."""
        return [(s.position, s.batch_index, s.batch_size)
                for acks in self.state.txns.values() for s in acks.slots]

    # --- admin -----------------------------------------------------------------

    def set_batch_enabled(self, enabled: bool) -> None:
        self._writer.set_enabled(enabled)
        self.batch_enabled = enabled

    def stats(self) -> dict[str, Any]:
        """``pendingAckStats``: Pulsar's state plus the counts behind it."""
        phases: dict[str, int] = {}
        for t in self.state.txns.values():
            phases[t.phase.value] = phases.get(t.phase.value, 0) + 1
        last = self.ledger.last_position()
        cumulative = self.state.committed_cumulative
        return {
            "state": "Ready",
            "topic": self.topic,
            "subscription": self.subscription,
            "ongoingTxnSize": len(self.state.txns),
            "txnsByPhase": phases,
            "heldMessageCount": len(self.state.held_ids()),
            "committedIdsRemembered": self.state.committed_id_count,
            "committedCumulative": [str(c) for _, c in sorted(cumulative.items())],
            "batchedLogEnabled": self.batch_enabled,
            "lastLogPosition": str(last) if last else None,
        }

    def internal_stats(self) -> dict[str, Any]:
        """``pendingAckInternalStats``: the log's physical ledgers and its cursor."""
        cursor = self.cursor.stats()
        replay = self.replay
        return {
            "pendingAckLogStats": {
                "managedLedgerName": self.ledger.name,
                "ledgers": [
                    {"ledgerId": self.ledger.ledger_id, "segmentId": s.segment_id,
                     "entries": s.entries, "size": s.size}
                    for s in self.ledger.stats()
                ],
                "cursor": {
                    "name": cursor.name,
                    "markDeletePosition": str(cursor.mark_delete) if cursor.mark_delete else None,
                    "individuallyDeletedRanges": cursor.individually_deleted_ranges,
                    "partiallyDeletedBatches": cursor.partially_deleted_batches,
                },
                "replay": None if replay is None else {
                    "entries": replay.entries, "records": replay.records,
                    "skippedDeleted": replay.skipped_deleted, "seconds": replay.seconds,
                },
            }
        }

    async def cleaned_up(self) -> None:
        """Wait for the deletes of the transactions ended so far."""
        while self._cleanups:
            await asyncio.gather(*self._cleanups, return_exceptions=True)

    async def close(self) -> None:
        await self.cleaned_up()
        close = getattr(self._writer, "close", None)
        if close is not None:
            await close()
        await self.cursor.close()
        await self.ledger.close()
