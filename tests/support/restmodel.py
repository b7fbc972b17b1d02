"""A pure model of what the REST API promises its clients (issue 21 item 14).

No I/O: the stateful test (tests/e2e/test_rest_model.py) makes each call, asks this model which
statuses the contract allows for it, and tells the model what the service answered. The model
then knows, for every subscription, which messages may be delivered now and which must be:

* each committed message is delivered to each subscription until an ack that named it (its id,
  or a cumulative ack at or after it, outside a transaction or in one that committed);
* nothing of an open or aborted transaction is ever delivered, nor anything behind an open
  transaction's message on its partition (read-committed: Pulsar's maxReadPosition);
* a message is delivered once unless something let it go again (an aborted transaction's ack,
  a consumer that closed): the suite's ack timeout is far longer than a run;
* a subscription is deleted only when no open transaction holds acks on it and (unless
  forced) no consumer is connected; created again, it starts anew;
* a transaction changes only through its owner's calls: the other subject gets 403, a
  transaction that is not open 409, an unknown one 404.

Where the contract leaves two answers open (an ack of an id that was never delivered may be
refused or ignored) the model allows both and follows the answer; where an answer leaves the
effect open, the messages concerned become *unsure* (neither required nor forbidden).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: (ledger, entry, batch index or -1): the order of a partition's messages.
Pos = tuple[int, int, int]

OPEN, COMMITTED, ABORTED = "OPEN", "COMMITTED", "ABORTED"
#: Answers to an ack of an id that names no message delivered here: refused, or ignored (200).
REFUSED_OR_IGNORED = frozenset({200, 400, 404, 409})


def parse_id(mid: str) -> Pos | None:
    """The position a well-formed message id names; None when it is malformed."""
    parts = mid.split(":")
    if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2]) if len(parts) == 3 else -1


@dataclass
class Msg:
    """A message a produce stored: where, and in which transaction (None: committed at once)."""

    mid: str
    partition: int
    pos: Pos
    value: str
    txn: str | None


@dataclass
class Txn:
    """A transaction as its owner made it."""

    txn_id: str
    owner: str
    state: str = OPEN
    partitions: set[int] = field(default_factory=set)
    produced: list[str] = field(default_factory=list)
    # (sub, name acked on: None for the topic's, i for its partition i's) registered in it
    subs: set[tuple[str, int | None]] = field(default_factory=set)
    holds: dict[str, set[str]] = field(default_factory=dict)  # sub -> ids its acks hold
    cumulative: dict[tuple[str, int], Pos] = field(default_factory=dict)  # (sub, partition) -> through


@dataclass
class Sub:
    """What one subscription was handed and told."""

    name: str
    acked: set[str] = field(default_factory=set)
    out: dict[str, str] = field(default_factory=dict)  # delivered, not acked nor held -> consumer
    ever: set[str] = field(default_factory=set)  # delivered at least once
    released: set[str] = field(default_factory=set)  # let go again: must come again (once more)
    maydup: set[str] = field(default_factory=set)  # out, but may come again (its consumer closed)
    unsure: set[str] = field(default_factory=set)  # an answer left open whether it was acked
    consumers: set[str] = field(default_factory=set)  # fetched here, not closed since


class Model:
    """The state of one topic, its subscriptions and the transactions of two subjects."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.msgs: dict[str, Msg] = {}
        self.by_value: dict[str, Msg] = {}
        self.txns: dict[str, Txn] = {}
        self.subs: dict[str, Sub] = {}
        self.ledgers: dict[int, int] = {}  # partition -> its ledger id, once a produce showed it
        self.entries: dict[tuple[int, int], list[str]] = {}  # (ledger, entry) -> its messages' ids

    # --- reading the state -------------------------------------------------------------------

    def status(self, m: Msg) -> str:
        return COMMITTED if m.txn is None else self.txns[m.txn].state

    def held_by(self, sub: str, mid: str) -> str | None:
        for t in self.txns.values():
            if t.state == OPEN and mid in t.holds.get(sub, ()):
                return t.txn_id
        return None

    def blocked(self, m: Msg) -> bool:
        """Behind a message of an open transaction on its partition (not readable yet)."""
        return any(o.partition == m.partition and o.pos < m.pos and o.txn is not None
                   and self.txns[o.txn].state == OPEN for o in self.msgs.values())

    def on_partition(self, partition: int, through: Pos) -> list[Msg]:
        return [m for m in self.msgs.values() if m.partition == partition and m.pos <= through]

    def max_delivered(self, sub: str, partition: int) -> Pos | None:
        got = [self.msgs[i].pos for i in self.subs[sub].ever if self.msgs[i].partition == partition]
        return max(got, default=None)

    def partition_of(self, mid: str) -> int | None:
        pos = parse_id(mid)
        if pos is None:
            return None
        return next((p for p, lid in self.ledgers.items() if lid == pos[0]), None)

    def expand(self, mid: str) -> list[str]:
        """The messages an id names (issue 32): a whole-entry id ``L:E`` of a batch entry is all
        of its messages, ``L:E:0`` of a one-message entry that message; any other id itself."""
        pos = parse_id(mid)
        if pos is None:
            return [mid]
        members = self.entries.get(pos[:2])
        if members is None:
            return [mid]
        if pos[2] == -1 and len(members) > 1:
            return list(members)
        if pos[2] == 0 and len(members) == 1:
            return list(members)
        return [mid]

    def expand_all(self, ids: list[str], cumulative: bool) -> list[str]:
        """The ids an ack names, expanded; a cumulative ``L:E`` of a batch entry reaches
        through the entry's end: its last message."""
        out: list[str] = []
        for i in ids:
            got = self.expand(i)
            out += got[-1:] if cumulative else got
        return list(dict.fromkeys(out))

    def required(self, sub: str) -> list[Msg]:
        """Messages a drained subscription must have delivered by now."""
        s = self.subs[sub]
        return [m for m in self.msgs.values()
                if self.status(m) == COMMITTED and m.mid not in s.acked and m.mid not in s.out
                and m.mid not in s.unsure and self.held_by(sub, m.mid) is None and not self.blocked(m)
                and (m.mid not in s.ever or m.mid in s.released)]

    # --- produce -----------------------------------------------------------------------------

    def txn_door(self, subject: str, txn_id: str, registered: bool) -> set[int]:
        """The refusals a produce or ack in ``txn_id`` by ``subject`` must get (empty: admitted)."""
        t = self.txns.get(txn_id)
        if t is None:
            return {404}
        wrong = set()
        if t.owner != subject:
            wrong.add(403)
        if t.state != OPEN or not registered:
            wrong.add(409)
        return wrong

    def produce_expect(self, subject: str, txn_id: str | None, partition: int) -> set[int]:
        if txn_id is None:
            return {200}
        t = self.txns.get(txn_id)
        return self.txn_door(subject, txn_id, t is not None and partition in t.partitions) or {200}

    def produced(self, mid: str, partition: int, value: str, txn_id: str | None) -> None:
        pos = parse_id(mid)
        assert pos is not None, f"produce answered a malformed id {mid!r}"
        assert mid not in self.msgs, f"produce answered an id already given: {mid}"
        known = self.ledgers.setdefault(partition, pos[0])
        assert known == pos[0], f"partition {partition} answered ledger {pos[0]}, before {known}"
        m = Msg(mid, partition, pos, value, txn_id)
        self.msgs[mid] = self.by_value[value] = m
        self.entries.setdefault(pos[:2], []).append(mid)
        if txn_id is not None:
            self.txns[txn_id].produced.append(mid)

    # --- transactions ------------------------------------------------------------------------

    def opened(self, txn_id: str, owner: str) -> None:
        assert txn_id not in self.txns, f"transaction id {txn_id} given twice"
        self.txns[txn_id] = Txn(txn_id, owner)

    def register_expect(self, subject: str, txn_id: str) -> set[int]:
        t = self.txns.get(txn_id)
        if t is None:
            return {404}
        if t.owner != subject:
            return {403}
        return {200} if t.state == OPEN else {409}

    def end_expect(self, subject: str, txn_id: str, commit: bool) -> set[int]:
        t = self.txns.get(txn_id)
        if t is None:
            return {404}
        if t.owner != subject:
            return {403}
        if t.state == OPEN:
            # A prepare may find its acks overlapping another transaction's: 409, then aborted.
            return {200, 409} if commit and (t.holds or t.cumulative) else {200}
        return {200} if t.state == (COMMITTED if commit else ABORTED) else {409}

    def ended(self, txn_id: str, commit: bool) -> None:
        t = self.txns[txn_id]
        if t.state != OPEN:
            return
        t.state = COMMITTED if commit else ABORTED
        for name, ids in t.holds.items():
            s = self.subs.get(name)
            if s is None:  # deleted since (holding nothing: a delete waits for held acks)
                continue
            for mid in ids:
                if commit:
                    s.acked.add(mid)
                else:
                    s.released.add(mid)
        if commit:
            for (name, partition), through in t.cumulative.items():
                if name in self.subs:
                    self._ack_through(name, partition, through)

    # --- fetch -------------------------------------------------------------------------------

    def fetched(self, sub: str, consumer: str, got: list[tuple[str, int, str]]) -> list[str]:
        """Messages ``(id, partition, value)`` handed to ``consumer``: what breaks a promise."""
        s, wrong = self.subs[sub], []
        s.consumers.add(consumer)  # a fetch connects its consumer, whatever it hands out
        for mid, partition, value in got:
            m = self.by_value.get(value)
            if m is None:
                wrong.append(f"{sub}: delivered {value!r} ({mid}), which no produce stored")
                continue
            if (m.mid, m.partition) != (mid, partition):
                wrong.append(f"{sub}: {value!r} delivered as {mid} of partition {partition}, "
                             f"stored as {m.mid} of {m.partition}")
            state = self.status(m)
            if state != COMMITTED:
                wrong.append(f"{sub}: delivered {m.mid} of transaction {m.txn}, which is {state}")
            elif self.blocked(m):
                wrong.append(f"{sub}: delivered {m.mid} behind an open transaction's message")
            if m.mid in s.acked:
                wrong.append(f"{sub}: delivered {m.mid} after an ack that named it")
            holder = self.held_by(sub, m.mid)
            if holder is not None:
                wrong.append(f"{sub}: delivered {m.mid}, held by open transaction {holder}'s ack")
            if m.mid in s.out and m.mid not in s.maydup:
                wrong.append(f"{sub}: delivered {m.mid} again, out with {s.out[m.mid]} and never let go")
            s.out[m.mid] = consumer
            s.ever.add(m.mid)
            s.released.discard(m.mid)
            s.maydup.discard(m.mid)
            s.unsure.discard(m.mid)
        return wrong

    def broker_restarted(self) -> None:
        """The broker came back: nothing is out with anyone (what was out comes again), no
        consumer is connected, and every message readable now counts as dispatched (an ack of
        it may land: docs/api.md "Acks name only messages delivered"). Holds and acks stay."""
        readable = [m for m in self.msgs.values() if self.status(m) == COMMITTED and not self.blocked(m)]
        for s in self.subs.values():
            s.released |= set(s.out) | s.maydup
            s.out.clear()
            s.maydup.clear()
            s.consumers.clear()
            for m in readable:
                if m.mid not in s.ever:
                    s.ever.add(m.mid)
                    s.released.add(m.mid)

    def consumer_closed(self, sub: str, consumer: str) -> None:
        s = self.subs[sub]
        s.maydup |= {mid for mid, c in s.out.items() if c == consumer}
        s.consumers.discard(consumer)

    # --- subscriptions -----------------------------------------------------------------------

    def delete_expect(self, sub: str, force: bool) -> set[int]:
        """Unsubscribe: 404 when it does not exist; 409 while an open transaction's acks hold
        something on it (even with ``force``), or while a consumer is connected (unless ``force``)."""
        s = self.subs.get(sub)
        if s is None:
            return {404}
        open_txns = [t for t in self.txns.values() if t.state == OPEN]
        if any(t.holds.get(sub) or any(k[0] == sub for k in t.cumulative) for t in open_txns):
            return {409}
        allowed = {409} if s.consumers and not force else {200}
        # A transactional ack answered 200 that the model holds nothing for (of an id acked
        # already) may hold it on the broker all the same.
        if any(sub in t.holds for t in open_txns):
            allowed.add(409)
        return allowed

    def deleted(self, sub: str) -> None:
        """Deleted: created again under its name, it starts anew (from the earliest position)."""
        del self.subs[sub]

    # --- acks --------------------------------------------------------------------------------

    def ack_expect(self, subject: str, sub: str, ids: list[str], txn_id: str | None,
                   cumulative: bool, on: int | None = None) -> set[int]:
        """The statuses an ack may get; the test calls :meth:`acked` with the one it got.
        ``on``: the name acked on, the topic's (None) or partition ``on``'s: one state."""
        door: set[int] = set()
        other_name: set[int] = set()
        if txn_id is not None:
            t = self.txns.get(txn_id)
            door = self.txn_door(subject, txn_id, t is not None and (sub, on) in t.subs)
            if door == {409} and t is not None and t.state == OPEN and any(n == sub for n, _ in t.subs):
                # Registered under the subscription's other name only: the door may take the
                # names as one (one subscription state) or ask for the name acked on.
                other_name = {409}
                door = set()
        if any(parse_id(i) is None for i in ids):
            return {400} | door | other_name  # which refusal comes first is the service's choice
        return self._ack_expect(sub, self.expand_all(ids, cumulative), txn_id, cumulative, door) | other_name

    def _ack_expect(self, sub: str, ids: list[str], txn_id: str | None, cumulative: bool,
                    door: set[int]) -> set[int]:
        kinds = {self._kind(sub, i, txn_id) for i in ids}
        if door:
            return door | (set(REFUSED_OR_IGNORED) - {200} if kinds - {"out"} else set())
        if kinds - {"out", "own", "acked", "held"}:
            return set(REFUSED_OR_IGNORED)  # names something never delivered here, or let go
        if "held" in kinds:  # another open transaction's ack holds it
            return {409}
        if txn_id is not None:
            if cumulative and any(
                    o.state == OPEN and o.txn_id != txn_id and (sub, p) in o.cumulative
                    for i in ids if (p := self.partition_of(i)) is not None for o in self.txns.values()):
                return {409}  # another open transaction holds a cumulative ack on that partition
            if cumulative or kinds & {"acked", "own"}:
                return {200, 409}
            return {200}
        if cumulative:
            held = any(self.held_by(sub, m.mid) for i in ids if (p := self.partition_of(i)) is not None
                       for m in self.on_partition(p, parse_id(i)))  # type: ignore[arg-type]
            return {409} if held else ({200, 409} if "acked" in kinds else {200})
        return {200, 409} if "acked" in kinds else {200}

    def _kind(self, sub: str, mid: str, txn_id: str | None) -> str:
        s = self.subs[sub]
        holder = self.held_by(sub, mid)
        if holder is not None:
            return "own" if holder == txn_id else "held"
        if mid in s.acked:
            return "acked"
        if mid in s.out:
            return "out"
        if mid in s.ever:
            return "let-go"  # delivered once, let go again: dispatched or not, as one reads it
        return "never"

    def acked(self, sub: str, ids: list[str], txn_id: str | None, cumulative: bool, status: int) -> None:
        """Apply an ack's answer (``status`` among those :meth:`ack_expect` allowed)."""
        s = self.subs[sub]
        ids = self.expand_all(ids, cumulative)
        if status != 200:
            if txn_id is not None and status == 409:
                # Refused by the pending-ack store after the broker took them back to hold:
                # given back (docs/api.md), so what is out there may come again.
                for mid in ids:
                    p, pos = self.partition_of(mid), parse_id(mid)
                    if p is not None and pos is not None:
                        named = (self.on_partition(p, pos) if cumulative
                                 else [self.msgs[mid]] if mid in self.msgs else [])
                        s.maydup |= {m.mid for m in named if m.mid in s.out}
            return
        kinds = {i: self._kind(sub, i, txn_id) for i in ids}
        t = self.txns[txn_id] if txn_id is not None else None
        for mid, kind in kinds.items():
            partition = self.partition_of(mid)
            if kind in ("never", "let-go"):
                # Refused or ignored was allowed; a 200 leaves its effect open where it may
                # have taken one (a cumulative ack clamped to what was dispatched). An
                # individual ack of a message never delivered here takes none: it must come.
                if partition is not None and (cumulative or kind == "let-go"):
                    top = self.max_delivered(sub, partition)
                    pos = parse_id(mid)
                    assert pos is not None
                    if cumulative and top is not None:
                        s.unsure |= {m.mid for m in self.on_partition(partition, min(pos, top))
                                     if m.mid not in s.acked}
                    elif kind == "let-go":
                        s.unsure.add(mid)
                continue
            if partition is None:
                continue
            pos = self.msgs[mid].pos
            if t is None:
                if cumulative:
                    self._ack_through(sub, partition, pos)
                else:
                    s.acked.add(mid)
                    s.out.pop(mid, None)
                    s.released.discard(mid)
                continue
            hold = t.holds.setdefault(sub, set())
            if cumulative:
                t.cumulative[(sub, partition)] = max(pos, t.cumulative.get((sub, partition), pos))
                # What is out and what was let go to come again (a nack): the ack covers both.
                hold |= {m.mid for m in self.on_partition(partition, pos)
                         if m.mid in s.out or m.mid in s.released}
            elif kind == "out":
                hold.add(mid)
            for h in hold:
                s.out.pop(h, None)
                s.maydup.discard(h)

    # --- nacks -------------------------------------------------------------------------------

    def nack_expect(self, sub: str, ids: list[str]) -> set[int]:
        """A nack lets go what is out; of anything else it does nothing (or refuses it)."""
        if any(parse_id(i) is None for i in ids):
            return {400}
        if any(self.partition_of(i) is None for i in ids):
            return {400, 404}  # of no partition of this topic (acks answer 400, nacks 404)
        ids = self.expand_all(ids, False)
        return {200} if all(i in self.subs[sub].out for i in ids) else {200, 400}

    def nacked(self, sub: str, ids: list[str], status: int) -> None:
        s = self.subs[sub]
        for mid in self.expand_all(ids, False) if status == 200 else ():
            if s.out.pop(mid, None) is not None:
                s.released.add(mid)
                s.maydup.discard(mid)

    def _ack_through(self, sub: str, partition: int, through: Pos) -> None:
        s = self.subs[sub]
        for m in self.on_partition(partition, through):
            if self.held_by(sub, m.mid) is None:
                s.acked.add(m.mid)
                s.out.pop(m.mid, None)
                s.released.discard(m.mid)
                s.maydup.discard(m.mid)
