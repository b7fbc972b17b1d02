"""The pending-ack rules against a model of what each transaction consumes.

Every message is one concrete position ``(partition ledger, entry,
batch_index)``; a whole-entry id names all of an entry's indexes, and a
cumulative ack at ``c`` consumes every position of ``c``'s partition at or
below ``c`` that no earlier cumulative commit consumed (the range YDB's check
guards); one request may name a cumulative position on each partition.
Prepare, commit and abort are separate steps, so a prepared transaction's
reservation, and its release by an abort, count.

Two properties, whatever the order of the steps:
- safety: no position is ever consumed by two committed transactions;
- no refusal without a reason: a prepare is refused only when what the
  transaction would consume overlaps what was committed or what another
  prepared transaction reserved (so an aborted prepare reserves nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from streamtx.contracts.txnid import TxnId
from streamtx.errors import ConflictError
from streamtx.records.pendingack import MessageId, RecordKind
from streamtx.records.pendingack_state import SubscriptionState

LEDGERS, ENTRIES, INDEXES = (1, 2), 2, 2  # small, so steps collide often
Pos = tuple[int, int, int]


def concrete(mid: MessageId) -> set[Pos]:
    if mid.batch_index == -1:
        return {(mid.ledger_id, mid.entry_id, i) for i in range(INDEXES)}
    return {(mid.ledger_id, mid.entry_id, mid.batch_index)}


def below(c: MessageId) -> set[Pos]:
    """What a cumulative ack at ``c`` acknowledges (its partition only)."""
    return {(c.ledger_id, e, i) for e in range(ENTRIES) for i in range(INDEXES)
            if e < c.entry_id or (e == c.entry_id and (c.batch_index == -1 or i <= c.batch_index))}


@dataclass
class Model:
    """What the transactions acked, reserved and committed, kept apart from the state under test."""

    ids: dict[TxnId, set[MessageId]] = field(default_factory=dict)
    cumulative: dict[TxnId, dict[int, MessageId]] = field(default_factory=dict)
    prepared: set[TxnId] = field(default_factory=set)
    committed: dict[Pos, TxnId] = field(default_factory=dict)
    by_cumulative: set[Pos] = field(default_factory=set)  # consumed by committed cumulative acks

    def ack(self, txn: TxnId, ids: list[MessageId], cumulative: bool) -> None:
        if cumulative:
            self.ids.setdefault(txn, set())
            mine = self.cumulative.setdefault(txn, {})
            for mid in ids:
                mine[mid.ledger_id] = max(mid, mine.get(mid.ledger_id, mid))
        else:
            self.ids.setdefault(txn, set()).update(ids)

    def claim(self, txn: TxnId) -> set[Pos]:
        """What ``txn`` would consume if it committed now."""
        out: set[Pos] = set()
        for mid in self.ids[txn]:
            out |= concrete(mid)
        for c in self.cumulative.get(txn, {}).values():
            out |= below(c) - self.by_cumulative
        return out

    def taken(self, txn: TxnId) -> set[Pos]:
        """Positions ``txn`` may not consume: committed by others, or reserved by a prepared one."""
        out = {p for p, owner in self.committed.items() if owner != txn} | self.by_cumulative
        for other in self.prepared - {txn}:
            out |= self.claim(other)
        return out

    def refusal_has_reason(self, txn: TxnId) -> bool:
        if any(concrete(c) <= self.by_cumulative for c in self.cumulative.get(txn, {}).values()):
            return True  # the cumulative id itself was already acknowledged
        return bool(self.claim(txn) & self.taken(txn))

    def commit(self, txn: TxnId) -> None:
        claim = self.claim(txn)
        double = {p: self.committed[p] for p in claim if self.committed.get(p, txn) != txn}
        assert not double, f"{txn} commits positions already committed by {double}"
        for p in claim:
            self.committed[p] = txn
        for c in self.cumulative.get(txn, {}).values():
            self.by_cumulative |= below(c)
        self.end(txn)

    def end(self, txn: TxnId) -> None:
        self.ids.pop(txn, None)
        self.cumulative.pop(txn, None)
        self.prepared.discard(txn)


mids = st.builds(MessageId, st.sampled_from(LEDGERS), st.integers(0, ENTRIES - 1),
                 st.integers(-1, INDEXES - 1))
steps = st.lists(st.tuples(
    st.sampled_from(["ack", "cum", "prepare", "commit", "abort"]), st.integers(1, 2),
    st.lists(mids, min_size=1, max_size=2),
), max_size=20)


def prepare(s: SubscriptionState, model: Model, txn: TxnId) -> bool:
    """The store's prepare: the check, then the reservation; False when refused."""
    try:
        s.check_prepare(txn)
    except ConflictError:
        assert model.refusal_has_reason(txn), f"prepare of {txn} refused with no overlap"
        return False
    assert not model.claim(txn) & model.taken(txn), f"prepare of {txn} passed an overlap"
    s.prepare(txn)
    model.prepared.add(txn)
    return True


def end(s: SubscriptionState, model: Model, txn: TxnId, kind: RecordKind) -> None:
    if kind is RecordKind.COMMITTED:
        model.commit(txn)
    else:
        model.end(txn)
    s.begin_end(txn)
    s.finish_end(txn, kind)


@settings(max_examples=1000, deadline=None)
@given(steps)
def test_prepare_commit_abort_keep_every_position_consumed_once(
    script: list[tuple[str, int, list[MessageId]]],
) -> None:
    s = SubscriptionState()
    model = Model()
    for op, t, ids in script:
        txn = TxnId(0, t)
        if op in ("ack", "cum"):
            cumulative = op == "cum"
            if cumulative:  # at most one position per partition in one request
                ids = list({m.ledger_id: m for m in ids}.values())
            try:
                s.check_ack(txn, ids, cumulative)
            except ConflictError:
                continue
            s.add_ack(txn, ids, cumulative)
            model.ack(txn, ids, cumulative)
            continue
        if txn not in model.ids:
            continue
        if op == "prepare":
            if prepare(s, model, txn):
                assert prepare(s, model, txn), "a repeated prepare was refused"
        elif op == "commit":
            if txn in model.prepared or prepare(s, model, txn):
                end(s, model, txn, RecordKind.COMMITTED)
            else:
                end(s, model, txn, RecordKind.ABORTED)  # the TC aborts after a refused prepare
        else:
            end(s, model, txn, RecordKind.ABORTED)
