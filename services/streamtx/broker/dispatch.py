"""Dispatch of one partition to one subscription: what to hand out next.

Reads the partition in batches of entries up to ``maxReadPosition``, skips what
the cursor deleted, what a consumer holds unacked (``pending``), what an open
transaction's acks hold (``held``), markers and aborted messages; markers and
aborted entries are deleted from the cursor as they are passed so the
mark-delete position (and the backlog) moves over them. A unit is one message:
``(entry position, batch index or None for a one-message entry)``; what is out with
consumers is kept per entry where an entry went out whole (:mod:`.outstanding`).

Entries are not decoded here: what a fetch hands out is runs of a stored entry's
messages (:data:`Handed`: an entry handed out whole is one run, not a record per
message); the fetch route renders them as JSON (:func:`render_json`, one decode
per entry) or as the stored bytes (:func:`render_batch`, the binary batch format,
no decode at all).
"""

from __future__ import annotations

import asyncio
from binascii import b2a_base64
from collections import OrderedDict
from collections.abc import Iterable
from itertools import repeat
from typing import Any

from streamtx.broker.held import Held
from streamtx.broker.outstanding import Delivery, Outstanding, Stored, Taken, Unit
from streamtx.broker.partition import Partition
from streamtx.contracts.msgid import MessageId, format_id
from streamtx.cursor import Cursor
from streamtx.ledger import Entry, Position
from streamtx.records import partition as codec
from streamtx.records.partition import EntryKind
from streamtx.wire import fetch as wire_fetch

_min_size_cache = 4096  # batch sizes remembered before the first prune
_ahead_bytes = 4 << 20  # most bytes of entries read ahead that one partition's dispatch keeps

# What a fetch hands out, a run at a time: batch indexes ``first`` to ``first + count - 1``
# of one entry (a one-message entry's message, whose id has no batch index: 0 and 1),
# handed out for the ``redeliveries``-th time. An entry handed out whole is one run.
Handed = tuple[Stored, int, int, int]  # entry, first batch index, count, redelivery count


def handed_count(handed: Iterable[Handed]) -> int:
    """How many messages ``handed`` holds."""
    return sum(h[2] for h in handed)


def handed_units(handed: Iterable[Handed]) -> list[Unit]:
    """The units of ``handed``, in its order (message by message: only for giving them back)."""
    out: list[Unit] = []
    for entry, first, count, _ in handed:
        if entry.header.count <= 1:
            out.append((entry.pos, None))
        else:
            out += zip(repeat(entry.pos, count), range(first, first + count), strict=True)
    return out


def unit_id(unit: Unit) -> str:
    pos, bi = unit
    return format_id(pos.ledger_id, pos.entry_id, bi)


def unit_message_id(unit: Unit) -> MessageId:
    """The message id of a (canonical) unit."""
    pos, bi = unit
    return MessageId(pos.ledger_id, pos.entry_id, -1 if bi is None else bi)


class PartitionDispatch:
    def __init__(self, index: int, partition: Partition, cursor: Cursor, read_entries: int) -> None:
        self.index = index
        self.partition = partition
        self.cursor = cursor
        self.read_entries = read_entries
        self.read_pos: Position | None = None  # next entry to read; None: first undeleted
        # Where a release asked the read pass to look again (see :meth:`_rewind`): applied by
        # the fetch holding ``lock``, which would otherwise overwrite it when its read resumes.
        self._rewind_to: Position | None = None
        # The last entry this subscription may have handed out here: what the read pass went
        # past, and (as a previous process or owner may have dispatched it) everything visible
        # when it opened here. Acks past it are refused (docs/api.md "Acks"): never moves back.
        self.dispatched_through: Position | None = partition.max_read_position()
        # When the entry at ``dispatched_through`` is a batch a fetch's limit stopped in: the last
        # batch index handed out of it (the rest was handed to nobody); None: passed whole.
        self.dispatched_partial: int | None = None
        self._stopped_at = 0  # the batch index where the last stopped entry stopped
        # The entry a fetch stopped in after handing out the first ``_stopped_at`` of it whole
        # (it was past all dispatched); None once a rewind moved ``read_pos`` back.
        self._fresh_from: Position | None = None
        # Past both this and ``dispatched_through`` no unit is out, queued or held: a fetch hands
        # such an entry out whole without looking for its units. Holds restored from the
        # pending-ack store may lie past what this process dispatched (it opened before the
        # previous owner's last entries were visible to it): a bound, never moved back.
        self.held_through: Position | None = None
        self._ahead: list[Entry] = []  # see :meth:`_keep_ahead`
        self.pending = Outstanding()
        self.redeliver: OrderedDict[Unit, Delivery] = OrderedDict()
        self.held = Held()  # what open transactions' acks hold, and which transaction
        self.lock = asyncio.Lock()
        self.delivered = 0
        # Batch sizes of entries handed out (or read for an ack): acks of held units,
        # forgotten by ``pending``, need them without reading the entry again.
        self._sizes: dict[Position, int] = {}
        self._prune_sizes_at = _min_size_cache

    def _next(self, pos: Position) -> Position:
        return Position(pos.ledger_id, self.partition.ledger.next_entry_id(pos.entry_id))

    def is_gone(self, unit: Unit) -> bool:
        return self.cursor.is_deleted(unit[0], unit[1])

    def expire(self, now: float) -> int:
        """Move deliveries past their ack deadline to the redelivery queue."""
        late = self.pending.expire(now)
        self.redeliver.update(late)
        return len(late)

    def next_deadline(self) -> float | None:
        return self.pending.next_deadline()

    def release(self, units: list[Unit]) -> None:
        """Make units deliverable again (nack, consumer change, txn abort)."""
        for u in units:
            d = self.pending.pop(u)
            if d is not None:
                self.redeliver[u] = d
            elif u not in self.redeliver and not self.is_gone(u):
                # Not out nor queued (held since before a restart, or taken back by a hold):
                # rewind so the read pass finds it again, unit by unit.
                self._rewind(u[0])

    def give_back(self, consumer: str, units: list[Unit]) -> None:
        """Release those of ``units`` still out with ``consumer`` (a fetch's that could not be
        answered, or read from a partition that moved): a Failover move may have released them
        already and handed them to the partition's new consumer, whose they now are."""
        pending = self.pending
        self.release([u for u in units if (d := pending.get(u)) is not None and d.consumer == consumer])

    def rewind_all(self) -> None:
        """The read pass starts again from the first undeleted entry (what a transaction's
        cumulative reach held, which may not have been out with anyone, is found again)."""
        self._rewind(self.cursor.first_undeleted())

    def _rewind(self, pos: Position) -> None:
        """Make the read pass find ``pos`` again. Kept apart from ``read_pos`` and applied under
        the lock (:meth:`_apply_rewind`): a fetch suspended in a disk read sets ``read_pos``
        when it resumes, and a rewind made meanwhile was lost (the messages were then neither
        out, queued, held nor deleted: never delivered until a restart)."""
        self._fresh_from = None
        if self._rewind_to is None or pos < self._rewind_to:
            self._rewind_to = pos

    def _apply_rewind(self) -> None:
        to = self._rewind_to
        if to is not None:
            self._rewind_to = None
            self._fresh_from = None
            # None: the pass starts at the first undeleted entry, which is at or before ``to``.
            if self.read_pos is not None and to < self.read_pos:
                self.read_pos = to

    async def fetch(self, consumer: str, limit: int, deadline: float) -> list[Handed]:
        """Hand out up to ``limit`` messages to ``consumer`` (runs of entries: :data:`Handed`)."""
        out: list[Handed] = []
        got = 0
        async with self.lock:
            self._apply_rewind()
            while self.redeliver and got < limit:
                unit, d = self.redeliver.popitem(last=False)
                if self.is_gone(unit) or unit in self.held:
                    continue
                d = Delivery(consumer, deadline, d.entry, d.batch_size, d.redeliveries + 1)
                self.pending.add(unit, d)
                out.append((d.entry, unit[1] or 0, 1, d.redeliveries))
                got += 1
            while got < limit:
                self._apply_rewind()  # a release during the last await (a read, a delete)
                start = self.read_pos or self.cursor.first_undeleted()
                ahead, self._ahead = self._ahead, []
                if ahead and ahead[0].position == start and not self.partition.reloading:
                    entries = ahead
                else:
                    entries = await self.partition.read_visible(start, self.read_entries)
                if not entries:
                    break
                skips: list[Position] = []
                stopped = False
                for k, e in enumerate(entries):
                    passed, n = self._deliver_entry(e.position, e.data, consumer, limit - got, deadline,
                                                    out, skips)
                    got += n
                    # Dispatched: an entry passed whole, or one the limit stopped after handing out
                    # some of it (not one it stopped at before its first message: nobody has that).
                    if passed or n:
                        self._dispatched(e.position, None if passed else self._stopped_at - 1)
                    if not passed:
                        stopped = True
                        self._keep_ahead(entries, k)
                        break
                    self.read_pos = self._next(e.position)
                if skips:
                    await self.cursor.delete(skips)
                if stopped:
                    break
            self._apply_rewind()
        self.delivered += got
        return out

    def _keep_ahead(self, entries: list[Entry], k: int) -> None:
        """Keep what a read brought past where the fetch stopped (from ``entries[k]``, the entry
        ``read_pos`` stays at), up to ``_ahead_bytes``: the next fetch starts there and reads
        it from memory. Without it a read of ``read_entries`` entries for a fetch that wanted
        a few of them was read again, and again (three times over for 10,000-record fetches of
        a backlog). Stored entries never change, and one at or before ``maxReadPosition`` stays
        visible, so what is kept is valid until ``read_pos`` moves elsewhere (a rewind)."""
        kept, size = [], 0
        for e in entries[k:]:
            size += len(e.data)
            if size > _ahead_bytes:
                break
            kept.append(e)
        self._ahead = kept

    def restored_hold(self, pos: Position) -> None:
        """A hold the pending-ack store reported was placed at ``pos``."""
        if self.held_through is None or pos > self.held_through:
            self.held_through = pos

    def _dispatched(self, pos: Position, partial: int | None) -> None:
        """The read pass handed out the entry at ``pos`` (through batch index ``partial``, or all
        of it); a rewound pass never moves ``dispatched_through`` back."""
        through = self.dispatched_through
        if through is None or pos > through:
            self.dispatched_through, self.dispatched_partial = pos, partial
        elif pos == through and self.dispatched_partial is not None:
            self.dispatched_partial = None if partial is None else max(partial, self.dispatched_partial)

    def _deliver_entry(self, pos: Position, data: bytes, consumer: str, room: int, deadline: float,
                       out: list[Handed], skips: list[Position]) -> tuple[bool, int]:
        """Hand out what is left of one entry, up to ``room`` messages: whether it passed
        it (False: ``room`` stopped it midway), and how many it handed out."""
        h = codec.decode_header(data)
        if h.kind is not EntryKind.BATCH or (h.txn is not None and self.partition.tb.is_aborted(h.txn)):
            if not self.cursor.is_deleted(pos):
                skips.append(pos)
            return True, 0
        if self.cursor.is_deleted(pos):
            return True, 0
        size = h.count
        self._remember_size(pos, size)  # an ack's ids are read against it (Subscription.units)
        entry = Stored(self.index, pos, data, h)
        delivery = Delivery(consumer, deadline, entry, size)
        # The entry is not wholly deleted (checked above): one lookup of its deleted batch
        # indexes, not one cursor call per message (per-message work was most of a fetch).
        deleted = self.cursor.deleted_batch_indexes(pos) or 0
        through, held_to = self.dispatched_through, self.held_through
        if not deleted and (through is None or pos > through) and (held_to is None or pos > held_to):
            # Past everything ever handed out or held here (acks stop at ``dispatched_through``):
            # none of it is out, queued or held, so the entry goes out whole: one record, one run.
            if room >= size:
                self.pending.add_entry(pos, delivery)
                out.append((entry, 0, size, 0))
                return True, size
            self._stopped_at, self._fresh_from = room, pos
            if room:
                self.pending.add_range(pos, 0, room, delivery)
                out.append((entry, 0, room, 0))
            return False, room
        if pos == self._fresh_from:
            # The fetch before stopped in this fresh entry and nothing rewound since: what it
            # handed out is accounted for (out, queued, held or acked), the rest went to nobody
            # (acks past it are refused) unless another cluster's acks deleted some of it.
            self._fresh_from = None
            start = self._stopped_at
            if not deleted >> start and (held_to is None or pos > held_to):
                n = min(size - start, room)
                if n:
                    self.pending.add_range(pos, start, n, delivery)
                    out.append((entry, start, n, 0))
                if start + n == size:
                    return True, n
                self._stopped_at, self._fresh_from = start + n, pos
                return False, n
        # Message by message: what is out, queued, held or deleted is skipped; the rest goes
        # out in runs of consecutive batch indexes.
        pending, redeliver = self.pending, self.redeliver
        skip = deleted | self.held.bits_at(pos, size) if self.held else deleted
        handed = first = run = 0
        for bi in range(size):
            unit: Unit = (pos, bi if size > 1 else None)
            if skip >> bi & 1 or unit in pending or unit in redeliver:
                if run:
                    out.append((entry, first, run, 0))
                    handed, run = handed + run, 0
                continue
            if handed + run >= room:
                self._stopped_at = bi
                if run:
                    out.append((entry, first, run, 0))
                return False, handed + run
            pending.add(unit, delivery)
            if not run:
                first = bi
            run += 1
        if run:
            out.append((entry, first, run, 0))
        return True, handed + run

    def known_batch_size(self, pos: Position, batch_index: int | None) -> int | None:
        """The batch size of the entry at ``pos`` if known without reading it, else None."""
        d = self.pending.get((pos, batch_index)) or self.redeliver.get((pos, batch_index))
        return d.batch_size if d is not None else self._sizes.get(pos)

    async def batch_size(self, pos: Position, batch_index: int | None) -> int:
        """How many messages the entry at ``pos`` holds (read it if not out with a consumer)."""
        d = self.pending.get((pos, batch_index)) or self.redeliver.get((pos, batch_index))
        if d is not None:
            return d.batch_size
        size = self._sizes.get(pos)
        if size is not None:
            return size
        entries = await self.partition.ledger.read(pos, 1)
        if not entries or entries[0].position != pos:
            return 1
        h = codec.decode_header(entries[0].data)
        size = max(h.count, 1)
        self._remember_size(pos, size)
        return size

    def _remember_size(self, pos: Position, size: int) -> None:
        self._sizes[pos] = size
        if len(self._sizes) >= self._prune_sizes_at:
            # Amortised: forget the entries the cursor deleted wholly.
            self._sizes = {p: n for p, n in self._sizes.items() if not self.cursor.is_deleted(p)}
            self._prune_sizes_at = max(_min_size_cache, 2 * len(self._sizes))

    def forget(self, units: list[Unit]) -> None:
        self.pending.forget(units)
        if self.redeliver:  # mostly empty: no second lookup per unit then
            pop = self.redeliver.pop
            for u in units:
                pop(u, None)

    def take_through(self, pos: Position, batch_index: int | None) -> Taken:
        """Take back what is out with consumers or queued for redelivery at or before a
        cumulative ack point; return it."""
        gone = self.pending.take_through(pos, batch_index)
        if self.redeliver:
            last = -1 if batch_index is None else batch_index
            covered = [u for u in self.redeliver
                       if u[0] < pos or (u[0] == pos and (batch_index is None or (u[1] or 0) <= last))]
            for u in covered:
                del self.redeliver[u]
            gone.units += covered
        return gone

    async def backlog(self, scan_limit: int = 10_000) -> int:
        """Messages not yet deleted up to maxReadPosition (exact up to ``scan_limit`` entries)."""
        limit = self.partition.max_read_position()
        if limit is None:
            return 0
        start: Position | None = self.cursor.first_undeleted()
        count = scanned = 0
        while start is not None and start <= limit and scanned < scan_limit:
            entries = await self.partition.read_visible(start, min(1000, scan_limit - scanned))
            if not entries:
                break
            for e in entries:
                scanned += 1
                h = codec.decode_header(e.data)
                if h.kind is not EntryKind.BATCH or self.cursor.is_deleted(e.position):
                    continue
                if h.txn is not None and self.partition.tb.is_aborted(h.txn):
                    continue
                if h.count <= 1:
                    count += 1
                else:
                    count += sum(1 for bi in range(h.count) if not self.cursor.is_deleted(e.position, bi))
            start = self._next(entries[-1].position)
        if scanned >= scan_limit and start is not None and start <= limit:
            count += max(0, limit.entry_id - start.entry_id + 1)  # estimate the unscanned tail
        return count


def render_json(handed: Iterable[Handed]) -> list[dict[str, Any]]:
    """The JSON fetch answer's messages (docs/api.md): one decode per entry, values in base64."""
    out: list[dict[str, Any]] = []
    decoded: dict[int, list[codec.Fields]] = {}
    for entry, first, count, redeliveries in handed:
        msgs = decoded.get(id(entry))
        if msgs is None:
            msgs = decoded[id(entry)] = codec.decode_fields(entry.data, entry.header)
        h = entry.header
        for i in range(first, first + count):
            out.append(_message(entry, i if h.count > 1 else None, msgs[i], redeliveries))
    return out


def _message(entry: Stored, bi: int | None, fields: codec.Fields, redeliveries: int) -> dict[str, Any]:
    h, pos = entry.header, entry.pos
    value, key, props, _ = fields
    src = h.source
    message: dict[str, Any] = {
        "message_id": format_id(pos.ledger_id, pos.entry_id, bi),
        "partition": entry.partition,
        "key": key,
        "value": b2a_base64(value, newline=False).decode("ascii"),
        "properties": dict(props),
        # A replicated entry: when it was published in its source cluster.
        "publish_time": h.publish_time_ms if src is None else src.publish_time_ms,
    }
    if src is not None:  # copied from another cluster: where it was first written
        message["replicated_from"] = src.cluster
        message["source_message_id"] = codec.message_id(src.ledger_id, src.entry_id, bi or 0, h.count)
    if redeliveries:
        message["redelivery_count"] = redeliveries
    return message


def render_batch(handed: list[Handed]) -> bytes:
    """The binary fetch answer (:mod:`streamtx.wire.fetch`): each entry's stored messages as they are,
    with the batch indexes handed out when they are not the whole entry."""
    rows: list[wire_fetch.Delivered] = []
    i, n = 0, len(handed)
    while i < n:
        entry, first, count, rc = handed[i]
        h, pos = entry.header, entry.pos
        j = i + 1
        while j < n and handed[j][0] is entry:  # the runs of one entry go out together
            j += 1
        whole = j == i + 1 and rc == 0 and first == 0 and count == h.count
        src = h.source
        rows.append(wire_fetch.Delivered(
            entry.partition, pos.ledger_id, pos.entry_id,
            h.publish_time_ms if src is None else src.publish_time_ms, h.count,
            memoryview(entry.data)[h.body_offset:],
            None if whole else [(bi, c) for _, f, k, c in handed[i:j] for bi in range(f, f + k)],
            None if src is None else (src.cluster, src.ledger_id, src.entry_id),
        ))
        i = j
    return wire_fetch.encode_messages_answer(rows)
