"""The transaction log of one coordinator: ledger, cursor and buffered writer.

* Ledger ``txnlog/<cluster>/<coordinator_id>`` holds the records of
  :mod:`streamtx.records.txnlog`, written through the PIP-160
  :class:`~streamtx.batching.BufferedWriter`: batched entries (magic ``0x0e01``)
  when batching is on, one record per entry when it is off, both kinds mixed
  in one ledger after a switch.
* Cursor ``tc`` over it records what is deleted: a finished transaction's
  records are deleted one by one at batch-index level, an entry is deleted
  when all its records are, and the ledger is trimmed up to the cursor's
  mark-delete position.
* :meth:`TransactionLog.replay` reads every live record back, in log order,
  skipping deleted entries and deleted records inside partly deleted ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence

from streamtx.batching import BufferedWriter, compacted
from streamtx.batching.metrics import BatchedLogMetrics
from streamtx.batching.replay import replay_entries, replay_records
from streamtx.batching.settings import BatchingSettings
from streamtx.cursor import Cursor
from streamtx.ledger import Entry, Ledger, LedgerFactory, Position, SegmentStats
from streamtx.records import txnlog as records
from streamtx.records.txnlog import LogRef, Record

cursor_name = "tc"
_tuple_new = tuple.__new__
decode = records.decode
_read_entries = 256  # entries per ledger read during replay


def ledger_name(cluster: str, coordinator_id: int) -> str:
    """The name of a coordinator's transaction-log ledger."""
    return f"txnlog/{cluster}/{coordinator_id}"


class TransactionLog:
    """Appends, replays and deletes the records of one coordinator; open with :meth:`open`."""

    def __init__(
        self, ledger: Ledger, cursor: Cursor, writer: BufferedWriter[Record],
        factory: LedgerFactory | None = None,
    ) -> None:
        self._ledger = ledger
        self._cursor = cursor
        self._writer = writer
        self._factory = factory  # where compacted bases live (None: no compaction)
        self.adopted_base = -1  # the compacted base generation adopted (see batching/compacted.py)

    @classmethod
    async def open(
        cls,
        ledgers: LedgerFactory,
        *,
        cluster: str,
        coordinator_id: int,
        batching: BatchingSettings,
        metrics: BatchedLogMetrics | None = None,
    ) -> TransactionLog:
        """Open the ledger as its one writer (fencing any earlier one) and its cursor."""
        ledger = await ledgers.open(ledger_name(cluster, coordinator_id), writer=True)
        try:
            cursor = await Cursor.open(ledgers, ledger, cursor_name)
        except BaseException:
            await ledger.close()
            raise
        writer: BufferedWriter[Record] = BufferedWriter(
            ledger, records.encode, metrics=metrics, **batching.writer_kwargs()
        )
        return cls(ledger, cursor, writer, ledgers)

    @property
    def name(self) -> str:
        return self._ledger.name

    # --- writing -----------------------------------------------------------------

    async def append(self, record: Record) -> LogRef:
        """Append one record; return where it lives once it is durable."""
        result = await self._writer.write(record)
        return LogRef(result.position, result.batch_index, result.batch_size)

    @property
    def batching_enabled(self) -> bool:
        enabled: bool = self._writer.enabled
        return enabled

    def set_batching(self, enabled: bool) -> None:
        """Switch batched writes at run time; records in flight are neither lost nor reordered."""
        self._writer.set_enabled(enabled)

    # --- reading -----------------------------------------------------------------

    async def replay(self, apply: Callable[[LogRef, Record], object],
                     needed: Callable[[], Iterable[LogRef]] | None = None) -> int:
        """Call ``apply`` with every live record, in log order; the number of records.

        A callback rather than an iterator: a million records make a million
        tuples and list appends otherwise (measured: a tenth of the replay).
        ``needed``: the records the state replayed stands on, asked once replay
        is over; a compacted base in force is adopted only if it holds them all
        (without it, not at all: the owner adopts later).
        """
        cursor = self._cursor
        ledger = self._ledger
        count = 0
        start = cursor.first_undeleted()
        # A compacted base stands in for what the log no longer holds: read it first.
        loaded = await compacted.load_base(self._factory, ledger.name) if self._factory else None
        if loaded is not None:
            info, base = loaded
            takes_over = compacted.takes_over(ledger, info)
            count += replay_records(compacted.below(base, takes_over), ledger.ledger_id, cursor,
                                    self._one(apply))[0]
            start = max(start, Position(ledger.ledger_id, takes_over))
        # Read ahead: the next chunk is read (on the backend's I/O thread, or
        # from the network) while this one is decoded.
        ahead = asyncio.ensure_future(ledger.read(start, _read_entries))
        try:
            while True:
                entries = await ahead
                if not entries:
                    if loaded is not None and needed is not None:
                        self.adopted_base = await compacted.adopt_loaded(ledger, *loaded, needed(),
                                                                         self.adopted_base)
                    return count
                last = entries[-1].position
                ahead = asyncio.ensure_future(
                    ledger.read(Position(last.ledger_id, last.entry_id + 1), _read_entries)
                )
                await asyncio.sleep(0)  # let the read start before the CPU-bound decoding
                count += self._replay_entries(entries, apply)
        finally:
            ahead.cancel()

    @staticmethod
    def _one(apply: Callable[[LogRef, Record], object]) -> Callable[[Position, int, int, bytes], None]:
        def one(position: Position, index: int, size: int, raw: bytes) -> None:
            # tuple.__new__: a NamedTuple's own constructor costs twice as much.
            apply(_tuple_new(LogRef, (position, index, size)), decode(raw))

        return one

    def _replay_entries(self, entries: list[Entry], apply: Callable[[LogRef, Record], object]) -> int:
        return replay_entries(entries, self._cursor, self._one(apply))[0]

    async def adopt_compaction(self, needed: Iterable[LogRef]) -> None:
        """Trim below a newer compacted base's cut when it holds every ``needed`` record."""
        if self._factory is not None:
            self.adopted_base = await compacted.adopt(self._factory, self._ledger, needed, self.adopted_base)

    # --- deleting ----------------------------------------------------------------

    async def delete(self, refs: Iterable[LogRef]) -> None:
        """Delete these records (at batch-index level); return once the cursor is durable."""
        whole: list[Position] = []
        calls: list[Awaitable[object]] = []
        for ref in refs:
            if ref.batch_size <= 1:
                whole.append(ref.position)
            else:
                calls.append(self._cursor.delete_batch_index(ref.position, ref.batch_index, ref.batch_size))
        if whole:
            calls.append(self._cursor.delete(whole))
        # All changes apply to the cursor's memory before its first snapshot is
        # encoded, so one snapshot usually carries the whole deletion.
        await asyncio.gather(*calls)

    def first_live(self) -> Position:
        """The first entry not wholly deleted (maybe past the end)."""
        return self._cursor.first_undeleted()

    def live_records(self, ref: LogRef) -> int:
        """How many records of ``ref``'s entry are not deleted."""
        if self._cursor.is_deleted(ref.position):
            return 0
        if ref.batch_size <= 1:
            return 1
        deleted = self._cursor.deleted_batch_indexes(ref.position)
        return ref.batch_size - (0 if deleted is None else deleted.bit_count())

    def last_position(self) -> Position | None:
        return self._ledger.last_position()

    async def trim(self) -> None:
        """Drop the entries every record of which is deleted, up to the first live one."""
        await self._cursor.trim_ledger()

    # --- stats and closing ----------------------------------------------------------

    def stats(self) -> Sequence[SegmentStats]:
        return self._ledger.stats()

    @property
    def cursor(self) -> Cursor:
        return self._cursor

    async def close(self) -> None:
        """Fail what is still buffered, then close cursor and ledger."""
        try:
            await self._writer.close()
        finally:
            try:
                await self._cursor.close()
            finally:
                await self._ledger.close()
