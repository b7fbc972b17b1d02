"""Producer dedup and fencing state of one partition. Pure: no I/O.

A producer names itself, an epoch and a per-request sequence. Per partition,
a request whose sequence is not above the last one seen for that epoch is a
duplicate: it is dropped and answered with the original message ids (kept for
the last ``recent_max`` sequences). An epoch older than the latest one seen on
any partition of the topic is fenced (the topic checks that across partitions).
The state is rebuilt by replaying the entries (each carries its producer) or
restored from a snapshot.

Bounded: a request's ids are remembered as where its entry landed (ledger,
entry, message count and, only when they are not ``0..count-1``, the request
indexes), not one message id per message; and a name is forgotten once it has
been idle for ``idle_ms`` (by its entries' publish times, so a replay forgets
the same names) or when more than ``max_names`` are known (least recently used
first). A forgotten producer's next request is simply new: its retry of an
older request is no longer recognised, and its old epoch no longer fenced -
as with Pulsar's producer inactivity timeout.

Snapshot form (:meth:`ProducerTable.to_json`), one object per producer::

    {"n": name, "e": epoch, "s": last_sequence, "t": last_seen_ms,
     "r": [[sequence, ledger_id, entry_id, count], ...]}

where the last sequence's item may carry a fifth element, its request indexes.
Older sequences whose indexes are not ``0..count-1`` are left out of the
snapshot (a named SDK producer sends one request at a time, so only its last
request can be retried). The format written before (``name``, ``recent`` with
every message id) is still read, without its recent ids.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from streamtx.records.partition import message_id

recent_max = 32  # sequences per producer whose ids are kept for duplicate answers


@dataclass(frozen=True, slots=True)
class Written:
    """Where (part of) a request landed: its entry and which request indexes it holds."""

    ledger_id: int
    entry_id: int
    count: int
    request_indexes: tuple[int, ...] | None = None  # None: 0..count-1

    def ids(self) -> list[tuple[int, str]]:
        indexes = self.request_indexes if self.request_indexes is not None else range(self.count)
        return [(ri, message_id(self.ledger_id, self.entry_id, bi, self.count))
                for bi, ri in enumerate(indexes)]

    def to_json(self, sequence: int, *, with_indexes: bool) -> list[Any]:
        out: list[Any] = [sequence, self.ledger_id, self.entry_id, self.count]
        if self.request_indexes is not None and with_indexes:
            out.append(list(self.request_indexes))
        return out


@dataclass
class ProducerRecord:
    epoch: int
    last_sequence: int
    last_seen_ms: int = 0
    recent: OrderedDict[int, list[Written]] = field(default_factory=OrderedDict)


class Verdict:
    NEW = "new"
    DUPLICATE = "duplicate"
    FENCED = "fenced"


def written(ledger_id: int, entry_id: int, count: int, request_indexes: list[int] | None) -> Written:
    """A :class:`Written`, with the indexes kept only when they are not ``0..count-1``."""
    if request_indexes is None or request_indexes == list(range(count)):
        return Written(ledger_id, entry_id, count)
    return Written(ledger_id, entry_id, count, tuple(request_indexes))


@dataclass
class ProducerTable:
    """The producers of one partition, least recently seen first."""

    idle_ms: int = 6 * 3600 * 1000  # Pulsar's producer inactivity timeout: 6 h
    max_names: int = 10_000
    producers: OrderedDict[str, ProducerRecord] = field(default_factory=OrderedDict)

    def check(self, name: str, epoch: int, sequence: int) -> str:
        rec = self.producers.get(name)
        if rec is None or epoch > rec.epoch:
            return Verdict.NEW
        if epoch < rec.epoch:
            return Verdict.FENCED
        return Verdict.DUPLICATE if sequence <= rec.last_sequence else Verdict.NEW

    def max_epoch(self, name: str) -> int | None:
        rec = self.producers.get(name)
        return rec.epoch if rec else None

    def original_ids(self, name: str, sequence: int) -> list[tuple[int, str]] | None:
        """``(request_index, message_id)`` pairs of an earlier request, if still known."""
        rec = self.producers.get(name)
        got = None if rec is None else rec.recent.get(sequence)
        return None if got is None else [pair for w in got for pair in w.ids()]

    def record(self, name: str, epoch: int, sequence: int, where: Written | None, now_ms: int) -> None:
        """Learn a request (``where`` None: it stored no messages) seen at ``now_ms``."""
        rec = self.producers.get(name)
        if rec is None or epoch > rec.epoch:
            rec = self.producers[name] = ProducerRecord(epoch, sequence)
        if epoch < rec.epoch:
            return  # a zombie's entry replayed after the fence: nothing to learn
        if sequence >= rec.last_sequence:
            rec.last_sequence = sequence
        rec.last_seen_ms = max(rec.last_seen_ms, now_ms)
        self.producers.move_to_end(name)
        got = rec.recent.setdefault(sequence, [])
        if where is not None:
            got.append(where)
        rec.recent.move_to_end(sequence)
        while len(rec.recent) > recent_max:
            rec.recent.popitem(last=False)
        self.evict(now_ms)

    def evict(self, now_ms: int) -> int:
        """Forget names idle for ``idle_ms`` and the least recent beyond ``max_names``; how many."""
        dropped = 0
        horizon = now_ms - self.idle_ms
        producers = self.producers
        while producers:
            name, rec = next(iter(producers.items()))
            if rec.last_seen_ms >= horizon and len(producers) <= self.max_names:
                break
            del producers[name]
            dropped += 1
        return dropped

    def to_json(self) -> list[dict[str, Any]]:
        out = []
        for name, rec in self.producers.items():
            recent = []
            for seq, parts in rec.recent.items():
                last = seq == rec.last_sequence
                if not last and any(w.request_indexes is not None for w in parts):
                    continue  # bounded: only the last request keeps its indexes
                recent += [w.to_json(seq, with_indexes=last) for w in parts] or [[seq]]
            out.append({"n": name, "e": rec.epoch, "s": rec.last_sequence, "t": rec.last_seen_ms,
                        "r": recent})
        return out

    @classmethod
    def from_json(cls, data: list[dict[str, Any]], *, seen_ms: int = 0, idle_ms: int | None = None,
                  max_names: int | None = None) -> ProducerTable:
        """The table a snapshot holds; ``seen_ms`` (the snapshot's time) for producers it has no time of."""
        table = cls()
        if idle_ms is not None:
            table.idle_ms = idle_ms
        if max_names is not None:
            table.max_names = max_names
        rows = [_from_old(p, seen_ms) if "name" in p else p for p in data]
        for p in sorted(rows, key=lambda p: int(p["t"])):
            rec = ProducerRecord(int(p["e"]), int(p["s"]), int(p["t"]))
            for item in p["r"]:
                parts = rec.recent.setdefault(int(item[0]), [])
                if len(item) >= 4:
                    indexes = tuple(int(i) for i in item[4]) if len(item) > 4 else None
                    parts.append(Written(int(item[1]), int(item[2]), int(item[3]), indexes))
            table.producers[str(p["n"])] = rec
        return table


def _from_old(p: dict[str, Any], seen_ms: int) -> dict[str, Any]:
    """A producer in the snapshot form written before: its fence and last sequence.

    Its recent requests' ids are dropped: a retry of a request sent before the
    upgrade answers 409 ("ids no longer known") instead of a duplicate's ids.
    """
    return {"n": p["name"], "e": p["epoch"], "s": p["last_sequence"], "t": seen_ms, "r": []}
