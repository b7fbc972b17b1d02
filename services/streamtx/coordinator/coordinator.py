"""One transaction coordinator: lifecycle, id allocation, timeouts, ends, deletion.

Every change is appended to the transaction log first and applied to the
:class:`~streamtx.records.txntable.TxnTable` once durable, so a restart
rebuilds exactly the state clients were told about. Changes to one
transaction are ordered by its lock; the end fan-out runs outside it.

A participant that answers an end with 409 ended the transaction the other
way (see :mod:`.participants_client`): the transaction still reaches its final state, and the
violation is logged, counted and kept for the admin view (:attr:`violations`,
in memory, the latest ``max_violations_kept``); callers of that end get 409.

Ids: a ``RESERVE_IDS`` record is made durable before any id below its counter
is handed out, and replay resumes above the highest reservation. Deleting a
finished transaction's records therefore never lets its id come back.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import heapq
import logging
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

from streamtx.contracts.txnid import TxnId
from streamtx.coordinator import requests
from streamtx.coordinator.log import TransactionLog
from streamtx.coordinator.metrics import CoordinatorMetrics
from streamtx.coordinator.participants_client import Participants, Violation
from streamtx.coordinator.quota import OpenTxnQuota, check_participants
from streamtx.errors import (
    ConflictError,
    FencedError,
    LedgerClosedError,
    NotFoundError,
    NotOwnerError,
    StreamtxError,
    UnavailableError,
)
from streamtx.records.txnlog import (
    AddPartitions,
    AddSubscriptions,
    Forwarded,
    LogRef,
    NewTxn,
    Plain,
    ReserveIds,
    StatusChange,
    Subscription,
)
from streamtx.records.txnstate import (
    Action,
    Decision,
    EndReason,
    TxnState,
    decide_end,
    ending_state,
    ending_states,
    final_state,
)
from streamtx.records.txntable import TxnMeta, TxnTable

log = logging.getLogger(__name__)


_adopt_check_s = 5.0  # how often the housekeeping loop looks for a compacted base to adopt
_gc_pauses = 0  # replays running now (coordinators of one process recover concurrently)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while replaying.

    A replay allocates millions of objects that all live on; the generational
    collector would rescan the growing heap again and again (measured: a third
    of the replay time). Reference counting still frees garbage meanwhile.
    """
    global _gc_pauses
    if _gc_pauses == 0 and not gc.isenabled():
        yield  # someone else owns the GC switch
        return
    _gc_pauses += 1
    gc.disable()
    try:
        yield
    finally:
        _gc_pauses -= 1
        if _gc_pauses == 0:
            gc.enable()


def wall_ms() -> int:
    """Wall-clock milliseconds: logged times must mean the same after a restart."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class CoordinatorConfig:
    """The knobs of one coordinator (from the service settings)."""

    timeout_check_interval_ms: int = 1000
    housekeeping_interval_ms: int = 1000
    finished_retention_ms: int = 60_000
    id_block_size: int = 10_000
    max_concurrent_timeouts: int = 256
    retry_backoff_ms: int = 50
    retry_max_backoff_ms: int = 500
    max_violations_kept: int = 1000
    max_partitions_per_txn: int = 4096
    max_subscriptions_per_txn: int = 4096


class TransactionCoordinator:
    """The transactions of one coordinator id; create it, then :meth:`recover`."""

    def __init__(
        self,
        coordinator_id: int,
        txn_log: TransactionLog,
        participants: Participants,
        metrics: CoordinatorMetrics,
        config: CoordinatorConfig,
        *,
        clock: Callable[[], int] = wall_ms,
        on_fenced: Callable[[int], None] = lambda _: None,
        quota: OpenTxnQuota | None = None,
    ) -> None:
        self.coordinator_id = coordinator_id
        # Open transactions per client, shared by the process's coordinators (quota.py).
        self.quota = quota or OpenTxnQuota(limit=sys.maxsize)
        self.log = txn_log
        self.table = TxnTable(coordinator_id)
        self._participants = participants
        self.metrics = metrics
        self._config = config
        self._clock = clock
        self._on_fenced = on_fenced
        self.status = "Initializing"
        self.recover_started_ms = 0
        self.recover_ended_ms = 0
        self._next = 0  # next counter to hand out
        self._reserving: asyncio.Task[None] | None = None
        self._next_adopt_check = 0.0
        self._heap: list[tuple[int, int, TxnId]] = []  # (deadline ms, counter, txn) of OPEN txns
        self._sleep_until_ms = 0
        self._wake = asyncio.Event()
        self._timeout_slots = asyncio.Semaphore(config.max_concurrent_timeouts)
        self._tasks: set[asyncio.Task[Any]] = set()
        # Transactions a participant ended the other way: (final state, what each said).
        self.violations: OrderedDict[TxnId, tuple[TxnState, list[Violation]]] = OrderedDict()
        metrics.track_active(lambda: self.table.active)
        metrics.track_ending_oldest(self._ending_oldest_s)

    def _ending_oldest_s(self, state: str) -> float:
        since = self.table.oldest_ending_ms(TxnState[state])
        return 0.0 if since is None else max(0.0, (self._clock() - since) / 1000)

    # --- start and stop -------------------------------------------------------------

    async def recover(self) -> None:
        """Replay the log, then finish every ending transaction and time out expired ones."""
        self.status = "Replaying"
        self.recover_started_ms = self._clock()
        table = self.table
        with _gc_paused():
            await self.log.replay(table.apply, self.needed_refs)
        self._next = table.next_counter
        for meta in table.txns.values():
            if meta.state in ending_states:
                self._spawn_finish(meta)
            elif meta.state is TxnState.OPEN:
                self._heap.append((meta.timeout_at_ms, meta.txn.counter, meta.txn))
                self.quota.adopt(meta.txn, meta.owner)
        heapq.heapify(self._heap)  # expired ones fire on the timeout task's first round
        self.recover_ended_ms = self._clock()
        self.status = "Ready"
        self._spawn(self._timeout_loop(), "timeouts")
        self._spawn(self._housekeeping_loop(), "housekeeping")
        log.info(
            "coordinator %d: replayed %d records in %d ms: %d transactions, %d active, next id %d",
            self.coordinator_id, table.records, self.recover_ended_ms - self.recover_started_ms,
            len(table.txns), table.active, self._next,
        )

    async def close(self) -> None:
        self.status = "Closed"
        self.metrics.untrack()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.log.close()

    @property
    def next_counter(self) -> int:
        """The counter the next transaction gets."""
        return self._next

    def now_ms(self) -> int:
        return self._clock()

    # --- the client operations -----------------------------------------------------

    async def create(self, timeout_ms: int, owner: str = "") -> TxnMeta:
        """Open a transaction for ``owner``; it is durable (and its id reserved) when this returns.

        429 when ``owner`` already has its limit of open transactions.
        """
        self._check_serving()
        self.quota.reserve(owner)
        try:
            counter = await self._allocate()
            txn = TxnId.of(self.coordinator_id, counter)
            meta = await self._apply(NewTxn(txn, timeout_ms, self._clock(), owner))
        except BaseException:
            self.quota.cancel(owner)
            raise
        assert meta is not None
        self.quota.bind(txn, owner)
        deadline = meta.timeout_at_ms
        heapq.heappush(self._heap, (deadline, counter, txn))
        if deadline < self._sleep_until_ms:
            self._wake.set()
        self.metrics.created.inc()
        return meta

    def get(self, txn: TxnId) -> TxnMeta:
        meta = self.table.get(txn)
        if meta is None:
            raise NotFoundError(f"transaction {txn} is unknown (or finished and forgotten)")
        return meta

    async def add_partitions(self, txn: TxnId, partitions: list[str]) -> TxnMeta:
        """Register partitions (idempotent); 409 unless the transaction is open."""
        meta = self._check_serving_txn(txn)
        self._participants.check_partitions()
        async with meta.get_lock():
            self._check_open(meta)
            new = tuple(p for p in dict.fromkeys(partitions) if not meta.partitions.get(p))
            check_participants("partitions", txn, meta.partitions, new, self._config.max_partitions_per_txn)
            if new:
                for p in new:
                    # Ended on whatever happens next: the append may land even if it fails here.
                    meta.partitions.setdefault(p, False)
                await self._apply(AddPartitions(txn, new))
        return meta

    async def add_subscriptions(self, txn: TxnId, subscriptions: list[Subscription]) -> TxnMeta:
        """Register subscriptions (idempotent); 409 unless the transaction is open."""
        meta = self._check_serving_txn(txn)
        self._participants.check_subscriptions()
        async with meta.get_lock():
            self._check_open(meta)
            new = tuple(s for s in dict.fromkeys(subscriptions) if not meta.subscriptions.get(s))
            check_participants("subscriptions", txn, meta.subscriptions, new,
                               self._config.max_subscriptions_per_txn)
            if new:
                for s in new:
                    meta.subscriptions.setdefault(s, False)
                await self._apply(AddSubscriptions(txn, new))
        return meta

    async def end(self, txn: TxnId, action: Action) -> TxnState:
        """Commit or abort; return the final state. Repeats are idempotent, contrary ends 409."""
        meta = self._check_serving_txn(txn)
        refusal: ConflictError | None = None
        async with meta.get_lock():
            current = meta.pending or meta.state
            decision = decide_end(current, action)
            if decision is Decision.CONFLICT:
                raise ConflictError(f"transaction {txn} is {_describe(meta)}: cannot {action.value}")
            if decision is Decision.DONE:
                if meta.txn in self.violations:
                    raise _violation_error(meta.txn, meta.state, self.violations[meta.txn][1])
                return meta.state
            if meta.pending is not None:
                # The same end was tried and its append failed (it may have landed):
                # log the same decision again; replay treats the repeat as one.
                await self._begin_end(meta, meta.pending, meta.reason)
            elif decision is Decision.START:
                refusal = await self._start_end(meta, action)
            done = meta.done
        assert done is not None
        final = await asyncio.shield(done)
        if refusal is not None:
            raise refusal
        return final

    async def _start_end(self, meta: TxnMeta, action: Action) -> ConflictError | None:
        """Log the decision for an OPEN transaction; the refusal a commit turned into, if any."""
        if action is Action.ABORT:
            await self._begin_end(meta, TxnState.ABORTING, EndReason.CLIENT)
            return None
        if self._clock() >= meta.timeout_at_ms:
            # Past its timeout a transaction never commits, even if the timeout task is late.
            await self._begin_end(meta, TxnState.ABORTING, EndReason.TIMEOUT)
            return ConflictError(f"transaction {meta.txn} timed out: it was aborted")
        if meta.subscriptions:
            try:
                await self._participants.prepare(meta.txn, meta.subscriptions)
            except ConflictError as exc:
                await self._begin_end(meta, TxnState.ABORTING, EndReason.CONFLICT)
                return ConflictError(f"transaction {meta.txn} aborted: {exc.message}")
        await self._begin_end(meta, ending_state(action), EndReason.CLIENT)
        return None

    # --- ends ----------------------------------------------------------------------

    async def _begin_end(self, meta: TxnMeta, ending: TxnState, reason: EndReason) -> None:
        """Log COMMITTING/ABORTING (the decision), then run the fan-out in the background."""
        meta.pending, meta.reason = ending, reason
        await self._apply(StatusChange(meta.txn, ending, reason, self._clock()))
        self._spawn_finish(meta)

    def _spawn_finish(self, meta: TxnMeta) -> None:
        done: asyncio.Future[TxnState] = asyncio.get_running_loop().create_future()
        # Nobody may be waiting for it; reading the exception keeps asyncio quiet.
        done.add_done_callback(lambda f: f.cancelled() or f.exception())
        meta.done = done
        self._spawn(self._finish(meta, done), f"end-{meta.txn}")

    async def _finish(self, meta: TxnMeta, done: asyncio.Future[TxnState]) -> None:
        try:
            action = Action.COMMIT if meta.state is TxnState.COMMITTING else Action.ABORT
            violations = await self._participants.end(
                meta.txn, action, list(meta.partitions), list(meta.subscriptions)
            )
            final = final_state(meta.state, meta.reason)
            await self._apply_until_durable(StatusChange(meta.txn, final, meta.reason, self._clock()))
            self._count_final(meta)
            if violations:
                self._report_violations(meta.txn, final, violations)
                done.set_exception(_violation_error(meta.txn, final, violations))
            else:
                done.set_result(final)
        except asyncio.CancelledError:
            done.set_exception(self._let_go())
            raise
        except NotOwnerError as exc:
            done.set_exception(exc)
        except StreamtxError as exc:
            done.set_exception(UnavailableError(f"ending {meta.txn} failed: {exc.message}"))
        except Exception as exc:  # a bug: waiters must still get an answer
            log.exception("%s: end failed", meta.txn)
            done.set_exception(UnavailableError(f"ending {meta.txn} failed: {exc!r}"))

    async def _apply_until_durable(self, record: StatusChange) -> None:
        # The participants already ended the transaction: the final state must be
        # logged however long the ledger is down (a fenced writer gives up).
        delay_s = self._config.retry_backoff_ms / 1000
        while True:
            try:
                await self._apply(record)
                return
            except StreamtxError as exc:
                if self.status != "Ready" or isinstance(exc, LedgerClosedError):
                    raise  # fenced or closing: another process (or the restart) finishes it
                log.warning("%s: logging %s failed, retrying: %s", record.txn, record.state.name, exc)
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, self._config.retry_max_backoff_ms / 1000)

    def _report_violations(self, txn: TxnId, final: TxnState, violations: list[Violation]) -> None:
        self.metrics.violations.inc(len(violations))
        log.error("PROTOCOL VIOLATION: %s is %s, but %s", txn, final.name,
                  "; ".join(f"{v.participant} had ended it the other way ({v.answer})" for v in violations))
        self.violations[txn] = (final, violations)
        self.violations.move_to_end(txn)
        while len(self.violations) > self._config.max_violations_kept:
            self.violations.popitem(last=False)

    def _count_final(self, meta: TxnMeta) -> None:
        m = self.metrics
        state = meta.state
        counter = m.committed if state is TxnState.COMMITTED else (
            m.timed_out if state is TxnState.TIMEOUT else m.aborted
        )
        counter.inc()
        m.observe_latency(state.name.lower(), max(0, meta.ended_at_ms - meta.opened_at_ms) / 1000)

    # --- timeouts ------------------------------------------------------------------

    async def _timeout_loop(self) -> None:
        interval_ms = self._config.timeout_check_interval_ms
        while True:
            now = self._clock()
            heap = self._heap
            while heap and heap[0][0] <= now:
                _, _, txn = heapq.heappop(heap)
                meta = self.table.get(txn)
                if meta is None or meta.state is not TxnState.OPEN or meta.done is not None:
                    continue
                await self._timeout_slots.acquire()  # bounds the aborts running at once
                self._spawn(self._expire(meta), f"timeout-{txn}")
            self._sleep_until_ms = min(heap[0][0] if heap else now + interval_ms, now + interval_ms)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), max(self._sleep_until_ms - now, 1) / 1000)
            except TimeoutError:
                pass

    async def _expire(self, meta: TxnMeta) -> None:
        try:
            async with meta.get_lock():
                if meta.state is not TxnState.OPEN:
                    return
                if meta.pending is not None:
                    # A client's end is pending (its append failed): that decision stands.
                    await self._begin_end(meta, meta.pending, meta.reason)
                else:
                    await self._begin_end(meta, TxnState.ABORTING, EndReason.TIMEOUT)
        except StreamtxError as exc:
            log.warning("%s: timeout abort failed, retrying later: %s", meta.txn, exc)
            retry_at = self._clock() + self._config.timeout_check_interval_ms
            heapq.heappush(self._heap, (retry_at, meta.txn.counter, meta.txn))
        finally:
            self._timeout_slots.release()

    # --- deletion ------------------------------------------------------------------

    async def _housekeeping_loop(self) -> None:
        while True:
            await asyncio.sleep(self._config.housekeeping_interval_ms / 1000)
            try:
                await self.delete_finished()
            except StreamtxError as exc:
                log.warning("coordinator %d: deleting finished records failed: %s", self.coordinator_id, exc)
            if time.monotonic() >= self._next_adopt_check:
                self._next_adopt_check = time.monotonic() + _adopt_check_s
                try:
                    await self.adopt_compaction()
                except StreamtxError as exc:
                    log.warning("coordinator %d: adopting a compaction failed: %s", self.coordinator_id, exc)

    async def adopt_compaction(self) -> None:
        """Adopt a compacted base of the log (``compact`` Spark job) that holds what we still need."""
        await self.log.adopt_compaction(self.needed_refs())

    def needed_refs(self) -> list[LogRef]:
        """The records the table stands on: those of every transaction it remembers, and the reservation.

        Finished transactions count until their records are deleted (after
        ``finished_retention_ms``): a retried commit and the participants' stuck
        checkers ask about them, and a 404 reads as an abort.
        """
        needed = [ref for meta in self.table.txns.values() for ref in meta.refs]
        if self.table.reserve_ref is not None:
            needed.append(self.table.reserve_ref)
        return needed

    async def delete_finished(self) -> int:
        """Delete the records of transactions finished longer than the retention ago; trim."""
        table = self.table
        cutoff = self._clock() - self._config.finished_retention_ms
        due: list[TxnMeta] = []
        while table.finished and table.finished[0].ended_at_ms <= cutoff:
            due.append(table.finished.popleft())
        await self._move_reservation()
        garbage, table.garbage = table.garbage, []
        refs = [ref for meta in due for ref in meta.refs] + garbage
        if not refs:
            return 0
        try:
            await self.log.delete(refs)
        except BaseException:
            table.finished.extendleft(reversed(due))
            table.garbage.extend(garbage)
            raise
        for meta in due:
            table.forget(meta)
        await self.log.trim()
        return len(refs)

    async def _move_reservation(self) -> None:
        """Log the live reservation again when it is all that holds back the trim.

        It is never deleted before a newer one is durable, so on an idle log it
        would pin its entry, and every entry after it, forever.
        """
        ref = self.table.reserve_ref
        if ref is None or (self._reserving is not None and not self._reserving.done()):
            return
        last = self.log.last_position()
        if (
            last is not None and ref.position != last and self.log.first_live() == ref.position
            and self.log.live_records(ref) == 1  # else moving it alone frees nothing
        ):
            await self._apply(ReserveIds(self.table.reserved))  # the old one becomes garbage

    # --- ids -----------------------------------------------------------------------

    async def _allocate(self) -> int:
        while self._next >= self.table.reserved:
            await self._reserve()
        counter = self._next
        self._next += 1
        if self.table.reserved - self._next <= self._config.id_block_size // 2:
            self._reserve_soon()  # the next block is durable before this one runs out
        return counter

    def _reserve_soon(self) -> None:
        if self._reserving is None or self._reserving.done():
            self._reserving = asyncio.create_task(self._write_reservation())
            self._reserving.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _reserve(self) -> None:
        self._reserve_soon()
        assert self._reserving is not None
        await asyncio.shield(self._reserving)

    async def _write_reservation(self) -> None:
        await self._apply(ReserveIds(max(self.table.reserved, self._next) + self._config.id_block_size))

    # --- helpers -------------------------------------------------------------------

    async def _apply(self, record: Plain) -> TxnMeta | None:
        """Append a record and, once it is durable, apply it: the one way state changes."""
        request_id = requests.current.get()
        try:
            ref = await self.log.append(record if request_id is None else Forwarded(request_id, record))
        except FencedError as exc:
            # Another process opened this coordinator's log: it owns the
            # transactions now; this one must never write again.
            if self.status != "Fenced":
                self.status = "Fenced"
                self._on_fenced(self.coordinator_id)
            raise UnavailableError(f"coordinator {self.coordinator_id} lost its log: {exc.message}") from exc
        except LedgerClosedError as exc:
            if self.status == "Closed":
                raise self._let_go() from exc
            raise
        self.metrics.appends.inc()
        meta = self.table.apply(ref, record)
        if request_id is not None:
            self.table.remember_request(request_id)
        if isinstance(record, StatusChange) and record.state is not TxnState.OPEN:
            self.quota.release(record.txn)
        return meta

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=f"tc{self.coordinator_id}-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _let_go(self) -> NotOwnerError:
        # Closed under a request: handed over to another replica (or shutting down). Nothing of
        # the request was logged here after the close, and every call may repeat, so the caller
        # is told the id moves (503 not_owner) and retries where it lives now: a handover is
        # latency, never a failed call (a plain "closed" was a 500 the clients gave up on).
        return NotOwnerError(f"coordinator {self.coordinator_id} was let go (handed over to another "
                             "replica, or shutting down): retry", owner=None)

    def _check_serving(self) -> None:
        if self.status == "Closed":
            raise self._let_go()
        if self.status != "Ready":
            raise UnavailableError(f"coordinator {self.coordinator_id} is {self.status}")

    def _check_serving_txn(self, txn: TxnId) -> TxnMeta:
        self._check_serving()
        return self.get(txn)

    def _check_open(self, meta: TxnMeta) -> None:
        if meta.state is not TxnState.OPEN or meta.pending is not None:
            raise ConflictError(f"transaction {meta.txn} is {_describe(meta)}, not OPEN")
        if self._clock() >= meta.timeout_at_ms:
            raise ConflictError(f"transaction {meta.txn} timed out")


def _violation_error(txn: TxnId, final: TxnState, violations: list[Violation]) -> ConflictError:
    who = ", ".join(v.participant for v in violations)
    return ConflictError(f"transaction {txn} is {final.name}, but {who} had ended it the other way "
                         "(a protocol violation: see /admin/v3/transactions/protocolViolations)")


def _describe(meta: TxnMeta) -> str:
    if meta.pending is not None:
        return f"{meta.pending.name} (pending)"
    return meta.state.name
