"""The transaction table of one coordinator, rebuilt from its log.

:class:`TxnTable` applies log records, in log order, to in-memory transaction
metadata. Replay and the live path use the same :meth:`TxnTable.apply`: the
coordinator appends a record first and applies it once it is durable, so what
a restart rebuilds is exactly what was served.

It also keeps what deletion needs: each transaction's record positions
(``refs``), finished transactions in the order they finished, and records that
belong to nothing any more (``garbage``: leftovers of a deletion a crash cut
short, superseded id reservations).

This module does no I/O.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from streamtx.contracts.txnid import TxnId
from streamtx.records.txnlog import (
    AddPartitions,
    Forwarded,
    LogRef,
    NewTxn,
    Record,
    ReserveIds,
    StatusChange,
    Subscription,
)
from streamtx.records.txnstate import (
    EndReason,
    TxnState,
    ending_states,
    final_states,
    is_transition_valid,
)

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class TxnMeta:
    """One transaction's metadata, plus the live coordinator's bookkeeping."""

    txn: TxnId
    timeout_ms: int
    opened_at_ms: int
    owner: str = ""  # the subject that opened it ("" when auth was off)
    state: TxnState = TxnState.OPEN
    reason: EndReason = EndReason.CLIENT
    ended_at_ms: int = 0  # when the final state was logged (0 while not final)
    ending_since_ms: int = 0  # when COMMITTING/ABORTING was logged (0 before)
    # Insertion-ordered sets; the value says whether the ADD record is durable
    # (False: its append failed, so a repeat must log it again).
    partitions: dict[str, bool] = field(default_factory=dict)
    subscriptions: dict[Subscription, bool] = field(default_factory=dict)
    refs: list[LogRef] = field(default_factory=list)
    # Live only: an ending state whose append failed (it may be durable, so the
    # decision is fixed until a restart reads the log), the lock that orders
    # changes to this transaction, and the end in progress.
    pending: TxnState | None = None
    lock: asyncio.Lock | None = None
    done: asyncio.Future[TxnState] | None = None

    @property
    def timeout_at_ms(self) -> int:
        return self.opened_at_ms + self.timeout_ms

    def get_lock(self) -> asyncio.Lock:
        if self.lock is None:
            self.lock = asyncio.Lock()
        return self.lock


class TxnTable:
    """Transactions of one coordinator, id counter and reservations, from log records."""

    def __init__(self, coordinator_id: int) -> None:
        self.coordinator_id = coordinator_id
        self.txns: dict[TxnId, TxnMeta] = {}
        self._max_txn = TxnId.of(coordinator_id, 0)  # highest id seen in any record (once seen)
        self._seen_any = False
        self.reserved = 0  # counters below this may have been handed out
        self.reserve_ref: LogRef | None = None  # the live reservation record
        self.garbage: list[LogRef] = []
        self.finished: deque[TxnMeta] = deque()
        self.active = 0  # transactions not in a final state
        self.records = 0  # records applied
        # Mailbox requests whose records are in the log (FORWARDED), the most recent
        # max_requests: far more than a mailbox timeout's worth, after which nobody waits.
        self.requests: OrderedDict[bytes, None] = OrderedDict()
        self.max_requests = 1 << 16

    @property
    def max_counter(self) -> int:
        """The highest counter of any transaction record seen (-1 when none)."""
        return self._max_txn.counter if self._seen_any else -1

    @property
    def next_counter(self) -> int:
        """The lowest counter that was certainly never handed out."""
        return max(self.reserved, self.max_counter + 1)

    def get(self, txn: TxnId) -> TxnMeta | None:
        return self.txns.get(txn)

    def remember_request(self, request_id: bytes) -> None:
        self.requests[request_id] = None
        if len(self.requests) > self.max_requests:
            self.requests.popitem(last=False)

    def apply(self, ref: LogRef, record: Record) -> TxnMeta | None:
        """Apply one durable record; the transaction it touched, if it is known."""
        self.records += 1
        kind = type(record)
        if kind is Forwarded:
            self.remember_request(record.request_id)  # type: ignore[union-attr]
            record = record.record  # type: ignore[union-attr]
            kind = type(record)
        if kind is ReserveIds:
            self._reserve(ref, record.next_counter)  # type: ignore[union-attr]
            return None
        txn: TxnId = record.txn  # type: ignore[union-attr]
        # Ids of one coordinator order by counter, so a tuple compare finds the max.
        if txn >= self._max_txn and txn[0] >> 48 == self.coordinator_id:
            self._max_txn = txn
            self._seen_any = True
        meta = self.txns.get(txn)
        if kind is NewTxn:
            if meta is None:
                new: NewTxn = record  # type: ignore[assignment]
                meta = self.txns[txn] = TxnMeta(txn, new.timeout_ms, new.opened_at_ms, new.owner)
                self.active += 1
            meta.refs.append(ref)  # a duplicate NEW is kept only to be deleted with the rest
            return meta
        if meta is None:
            # Records of a transaction whose NEW is gone: a deletion was cut
            # short by a crash (NEW is logged before anything else of a txn).
            self.garbage.append(ref)
            return None
        meta.refs.append(ref)
        if kind is StatusChange:
            self._status(meta, record)  # type: ignore[arg-type]
        elif kind is AddPartitions:
            for p in record.partitions:  # type: ignore[union-attr]
                meta.partitions[p] = True
        else:
            for s in record.subscriptions:  # type: ignore[union-attr]
                meta.subscriptions[s] = True
        return meta

    def _status(self, meta: TxnMeta, record: StatusChange) -> None:
        new = record.state
        if new is meta.state:
            return  # a repeat (a retried append of the same decision)
        if not is_transition_valid(meta.state, new):
            # The first decision logged wins; a later contrary one can only come
            # from an append whose failure the writer did not see succeed.
            log.warning("%s: ignoring %s logged after %s", meta.txn, new.name, meta.state.name)
            return
        meta.state = new
        meta.pending = None
        if new in ending_states:  # sets, not the properties: this runs per replayed record
            meta.reason = record.reason
            meta.ending_since_ms = record.at_ms
        elif new in final_states:
            meta.ended_at_ms = record.at_ms
            self.active -= 1
            self.finished.append(meta)

    def _reserve(self, ref: LogRef, next_counter: int) -> None:
        # An equal one is a copy logged to move the reservation forward in the
        # log (so the ledger can be trimmed): the newer record takes over.
        if next_counter >= self.reserved:
            if self.reserve_ref is not None:
                self.garbage.append(self.reserve_ref)  # superseded by a durable, higher one
            self.reserved, self.reserve_ref = next_counter, ref
        else:
            self.garbage.append(ref)

    def forget(self, meta: TxnMeta) -> None:
        """Drop a finished transaction whose records are being deleted."""
        self.txns.pop(meta.txn, None)

    def unfinished(self) -> list[TxnMeta]:
        return [m for m in self.txns.values() if not m.state.is_final]

    def oldest_ending_ms(self, state: TxnState) -> int | None:
        """When the longest-waiting transaction in ``state`` (COMMITTING, ABORTING) entered it."""
        return min((m.ending_since_ms for m in self.txns.values() if m.state is state), default=None)
