"""The buffered writer of PIP-160: many log records, one durable ledger entry.

:class:`BufferedWriter` sits in front of a :class:`~streamtx.ledger.Ledger`.
Each :meth:`~BufferedWriter.write` joins the open batch; the batch is flushed
as one entry (format in :mod:`.codec`) when one threshold is reached:

* ``max_records`` records are buffered;
* the entry would exceed ``max_bytes`` with the next record (or reaches it);
* ``max_delay_s`` passed since the batch's FIRST record;

and, with the ``auto`` policy (the default, beyond Pulsar):

* no append of this writer is in flight: the batch is flushed one loop
  iteration after its first record, so records submitted in the same tick
  share it but a lone writer is never held back by a timer;
* an append in flight completed: the batch gathered while it was in flight is
  flushed right away (the log just became free), still bounded by the three
  thresholds above.

The ``fixed`` policy is Pulsar's: a timer of ``max_delay_s`` from the first
record of every batch. For the metrics, the auto policy's "idle" and "in-flight
completed" flushes, and the flush forced by switching batching off, count as
``by_delay_time``: every batched entry counts exactly one trigger.

A record too large to share an entry (``max_bytes - 8`` bytes or more, so every
record of ``max_bytes`` or more) flushes the open batch, then is written alone
as an unbatched entry. With batching switched off every record is written alone,
with no header. Either way its result is ``WriteResult(position, 0, 1)``.

Guarantees: a write completes only once its entry is durable; entries reach
the ledger in the order of the writes, and results complete in that order; a
failed ledger append fails exactly the records of that entry. Switching batching
on or off at run time loses and reorders nothing: switching off flushes the open
batch first, and an unbatched record never overtakes a flushed batch that is not
yet handed to the ledger.

How entries keep their order: appends must be handed to the ledger in the order
of the writes, and in Python 3.11 a task starts one loop iteration after it is
created. So a sealed batch is appended by a task (tasks start in creation
order), never by a task per record; ``_unissued`` counts the sealed batches not
yet handed to the ledger, and nothing is appended directly (an unbatched
record, a lone batch) while it is not zero. The one exception to "a task per
entry" is the auto policy's idle batch: its first writer yields once and, if
still alone with nothing ahead of it, appends the entry in its own coroutine,
which spares a lone writer a task and a wake-up per record.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypedDict, TypeVar

from streamtx.batching.codec import HEADER_SIZE, MAGIC, RECORD_OVERHEAD, encode_batch
from streamtx.batching.metrics import BatchedLogMetrics, FlushTrigger
from streamtx.errors import LedgerClosedError
from streamtx.ledger.base import Ledger, Position

__all__ = ["BufferedWriter", "FlushPolicy", "WriteResult", "WriterOptions"]

T = TypeVar("T")
FlushPolicy = Literal["auto", "fixed"]

default_max_records = 512
default_max_bytes = 4 << 20  # 4 MiB
default_max_delay_s = 0.001  # 1 ms
_nowhere = Position(-1, -1)  # the position of an entry not yet appended


@dataclass(frozen=True, slots=True)
class WriteResult:
    """Where a record landed: its entry, its index in the entry and the entry's record count."""

    position: Position
    batch_index: int
    batch_size: int


class WriterOptions(TypedDict):
    """The tuning arguments of :class:`BufferedWriter` (see ``BatchingSettings.writer_kwargs``)."""

    max_records: int
    max_bytes: int
    max_delay_s: float
    policy: FlushPolicy
    enabled: bool


class _Batch:
    """Records bound for one entry, and the futures of their writers."""

    __slots__ = (
        "aborted", "batched", "done", "error", "first_at", "futures", "led", "position", "records",
        "size", "task", "timer",
    )

    def __init__(self, first_at: float, *, batched: bool = True) -> None:
        self.records: list[bytes] = []
        self.futures: list[asyncio.Future[WriteResult]] = []
        self.size = HEADER_SIZE  # bytes of the entry encoded so far
        self.first_at = first_at
        self.batched = batched  # False: one record written as is, no header
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None  # the task that appends it, if any
        self.led = False  # auto policy, idle log: its first writer will append it (no task)
        self.position = _nowhere
        self.error: BaseException | None = None
        self.done = False  # the append returned (position or error set)
        self.aborted = False  # failed before it was handed to the ledger (writer closed)


def _noop_observe(trigger: FlushTrigger, records: int, size_bytes: int, delay_s: float) -> None:
    return None


class BufferedWriter(Generic[T]):
    """Writes records of type ``T`` to ``ledger``, several per entry while enabled.

    ``serializer`` turns a record into bytes; an unbatched record must not begin
    with the batch magic (see :mod:`.codec`; the writer wraps one that does in a
    one-record batch rather than write an entry replay would misread).

    The writer does not own the ledger: :meth:`close` leaves it open.
    """

    _loop: asyncio.AbstractEventLoop  # the running loop, set before the first batch exists

    def __init__(
        self,
        ledger: Ledger,
        serializer: Callable[[T], bytes],
        *,
        max_records: int = default_max_records,
        max_bytes: int = default_max_bytes,
        max_delay_s: float = default_max_delay_s,
        policy: FlushPolicy = "auto",
        enabled: bool = True,
        metrics: BatchedLogMetrics | None = None,
    ) -> None:
        if max_records < 1 or max_bytes < 1 or not max_delay_s > 0:
            raise ValueError(
                f"thresholds must be positive: max_records={max_records}, "
                f"max_bytes={max_bytes}, max_delay_s={max_delay_s}"
            )
        if policy not in ("auto", "fixed"):
            raise ValueError(f"policy must be 'auto' or 'fixed', not {policy!r}")
        self._ledger = ledger
        self._serialize = serializer
        self._max_records = max_records
        self._max_bytes = max_bytes
        self._max_delay_s = max_delay_s
        self._policy: FlushPolicy = policy
        self._auto = policy == "auto"
        self._enabled = enabled
        self._observe = metrics.observe_flush if metrics is not None else _noop_observe
        self._open: _Batch | None = None  # the batch records are joining
        self._in_flight: deque[_Batch] = deque()  # handed to the ledger, results not delivered
        self._unissued = 0  # batches due to be appended by a task or leader that has not yet run
        self._tasks: dict[asyncio.Task[None], _Batch] = {}
        self._drained: asyncio.Future[None] | None = None  # close() waits for in-flight entries
        self._closed = False
        self._entries_written = 0
        self._records_written = 0

    # --- state ---------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        """Whether records are batched (switch with :meth:`set_enabled`)."""
        return self._enabled

    @property
    def policy(self) -> FlushPolicy:
        return self._policy

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def entries_written(self) -> int:
        """Entries this writer appended successfully (batched or not)."""
        return self._entries_written

    @property
    def records_written(self) -> int:
        """Records this writer wrote successfully."""
        return self._records_written

    def set_enabled(self, enabled: bool) -> None:
        """Switch batching at run time; nothing in flight is lost or reordered.

        Switching off flushes the open batch at once; the records written after
        it go one per entry, behind it.
        """
        if enabled == self._enabled:
            return
        self._enabled = enabled
        batch = self._open
        if not enabled and batch is not None:
            self._seal(batch, FlushTrigger.SWITCHED_OFF)

    # --- writing -------------------------------------------------------------

    async def write(self, record: T) -> WriteResult:
        """Write ``record``; return where it landed once its entry is durable.

        Raises the ledger's error when the entry's append fails, and
        :class:`LedgerClosedError` once the writer is closed. Cancelling a
        write does not take the record back: it may still be written.
        """
        data = self._serialize(record)
        if self._closed:
            raise LedgerClosedError(f"buffered writer of {self._ledger.name} is closed")
        if not self._enabled:
            return await self._write_unbatched(data)
        need = len(data) + RECORD_OVERHEAD
        max_bytes = self._max_bytes
        if need + HEADER_SIZE > max_bytes:  # too large to share an entry: alone
            batch = self._open
            if batch is not None:
                self._seal(batch, FlushTrigger.LARGE_DATA)
            return await self._write_alone(data)
        batch = self._open
        if batch is None:
            batch = self._open_batch()
        elif batch.size + need > max_bytes:
            self._seal(batch, FlushTrigger.SIZE)
            batch = self._open_batch()
        fut: asyncio.Future[WriteResult] = self._loop.create_future()
        records = batch.records
        records.append(data)
        batch.futures.append(fut)
        batch.size += need
        if len(records) >= self._max_records:
            self._seal(batch, FlushTrigger.RECORDS)
        elif batch.size >= max_bytes:
            self._seal(batch, FlushTrigger.SIZE)
        if batch.led and len(records) == 1:
            return await self._lead(batch, fut)
        return await fut

    async def _lead(self, batch: _Batch, fut: asyncio.Future[WriteResult]) -> WriteResult:
        """The first writer of a batch opened on an idle log appends it itself.

        It yields once, so that the records written in the same loop iteration
        join; then, alone, it appends the entry in its own coroutine (no task,
        no extra wake-up: a lone writer pays almost nothing for batching). If
        others joined, a task appends the entry instead, so that cancelling this
        writer cannot strand their records; and so it does when the task of an
        earlier entry has not started yet, so that entries keep their order.
        A batch sealed by anything else meanwhile (a threshold, a switch, close)
        is no longer led: it went to a task, or failed, and this writer just waits.
        """
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            fut.cancel()  # the record still goes (a cancelled write is not taken back)
            if batch.led:  # still open: hand it to a task
                self._release(batch)
                self._seal(batch, FlushTrigger.IDLE)
            raise
        if not batch.led:
            return await fut
        self._seal(batch, FlushTrigger.IDLE)  # still led: no task is made for it
        self._release(batch)
        if len(batch.futures) > 1 or self._unissued:
            # Others joined, or an earlier entry's task has not started: keep to tasks.
            self._spawn(batch)
            return await fut
        try:
            await self._issue(batch)
        except asyncio.CancelledError:
            # This writer was cancelled: nobody wants its result, now or when delivered.
            if not fut.cancel() and not fut.cancelled():
                fut.exception()
            raise
        return await fut  # done already, unless an earlier entry is still in flight

    def _release(self, batch: _Batch) -> None:
        """The batch's first writer no longer appends it."""
        batch.led = False
        self._unissued -= 1

    async def _write_unbatched(self, data: bytes) -> WriteResult:
        if self._unissued:
            # A flushed batch is not yet handed to the ledger: queue behind it.
            return await self._write_alone(data)
        if data[:2] == MAGIC:
            data = encode_batch([data])
        position = await self._ledger.append(data)
        self._entries_written += 1
        self._records_written += 1
        return WriteResult(position, 0, 1)

    async def _write_alone(self, data: bytes) -> WriteResult:
        """Write one record as its own entry, in order behind every flushed batch."""
        loop = self._loop = asyncio.get_running_loop()
        batch = _Batch(loop.time(), batched=data[:2] == MAGIC)
        fut: asyncio.Future[WriteResult] = loop.create_future()
        batch.records.append(data)
        batch.futures.append(fut)
        self._spawn(batch)
        return await fut

    # --- flushing ------------------------------------------------------------

    def _open_batch(self) -> _Batch:
        loop = self._loop = asyncio.get_running_loop()
        batch = self._open = _Batch(loop.time())
        if self._auto and not self._in_flight:
            # Idle log: the first writer flushes it one loop iteration from now.
            batch.led = True
            self._unissued += 1
        else:
            batch.timer = loop.call_later(self._max_delay_s, self._on_timer, batch)
        return batch

    def _on_timer(self, batch: _Batch) -> None:
        if batch is self._open:
            self._seal(batch, FlushTrigger.DELAY)

    def _seal(self, batch: _Batch, trigger: FlushTrigger) -> None:
        """Close the open ``batch`` to new records and have it appended."""
        self._open = None
        if batch.timer is not None:
            batch.timer.cancel()
        now = self._loop.time()
        self._observe(trigger, len(batch.records), batch.size, now - batch.first_at)
        if batch.led and trigger is not FlushTrigger.IDLE:
            # Sealed before its first writer's turn: a task appends it now, in order.
            self._release(batch)
        if batch.task is None and not batch.led:
            self._spawn(batch)

    def _spawn(self, batch: _Batch) -> None:
        task = batch.task = self._loop.create_task(self._append(batch))
        self._unissued += 1
        self._tasks[task] = batch
        task.add_done_callback(self._task_done)

    async def _append(self, batch: _Batch) -> None:
        self._unissued -= 1
        if not batch.aborted:
            await self._issue(batch)

    async def _issue(self, batch: _Batch) -> None:
        """Append ``batch`` (sealed) and deliver the results of every finished entry in order."""
        entry = encode_batch(batch.records) if batch.batched else batch.records[0]
        in_flight = self._in_flight
        in_flight.append(batch)
        try:
            batch.position = await self._ledger.append(entry)
        except asyncio.CancelledError:
            batch.error = LedgerClosedError(f"buffered writer of {self._ledger.name} stopped")
            raise
        except Exception as exc:
            batch.error = exc
        finally:
            batch.done = True
            if in_flight[0] is batch:
                self._deliver()
            nxt = self._open
            if self._auto and nxt is not None and nxt.task is None and not nxt.led:
                self._seal(nxt, FlushTrigger.IN_FLIGHT_DONE)

    def _deliver(self) -> None:
        """Complete the writes of finished entries, in log order."""
        in_flight = self._in_flight
        while in_flight and in_flight[0].done:
            batch = in_flight.popleft()
            futures = batch.futures
            error = batch.error
            if error is None:
                position = batch.position
                size = len(futures)
                for index, fut in enumerate(futures):
                    if not fut.done():
                        fut.set_result(WriteResult(position, index, size))
                self._entries_written += 1
                self._records_written += size
            else:
                for fut in futures:
                    if not fut.done():
                        fut.set_exception(error)
        drained = self._drained
        if not in_flight and drained is not None and not drained.done():
            drained.set_result(None)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        batch = self._tasks.pop(task)
        if task.cancelled() and batch.task is task and not batch.done and batch not in self._in_flight:
            # Cancelled before it started: it never reached the ledger.
            self._unissued -= 1
            if batch is self._open:
                self._open = None
            _fail(batch, LedgerClosedError(f"buffered writer of {self._ledger.name} stopped"))

    # --- closing -------------------------------------------------------------

    async def close(self) -> None:
        """Fail the buffered records and every later write; wait for the flushed ones.

        Entries already flushed are still appended, and complete (or fail) as the
        ledger answers. The ledger itself stays open.
        """
        if not self._closed:
            self._closed = True
            batch = self._open
            if batch is not None:
                self._open = None
                if batch.timer is not None:
                    batch.timer.cancel()
                batch.aborted = True
                if batch.led:
                    self._release(batch)
                _fail(batch, LedgerClosedError(f"buffered writer of {self._ledger.name} closed"))
        if self._tasks:
            await asyncio.wait(list(self._tasks))
        if self._in_flight:  # appended by a leader in its own coroutine
            if self._drained is None or self._drained.done():
                self._drained = self._loop.create_future()
            await asyncio.shield(self._drained)


def _fail(batch: _Batch, error: BaseException) -> None:
    for fut in batch.futures:
        if not fut.done():
            fut.set_exception(error)
