"""Producer dedup and fencing state of one partition. Pure: no I/O.

A producer names itself, an epoch and a per-request sequence. Per partition,
a request whose sequence is not above the last one seen for that epoch is a
duplicate: it is dropped and answered with the original message ids (kept for
the last ``recent_max`` sequences). An epoch older than the latest one seen on
any partition of the topic is fenced (the topic checks that across partitions).
The state is rebuilt by replaying the entries (each carries its producer) or
restored from a snapshot.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

recent_max = 32  # sequences per producer whose ids are kept for duplicate answers


@dataclass
class ProducerRecord:
    epoch: int
    last_sequence: int
    recent: OrderedDict[int, list[tuple[int, str]]] = field(default_factory=OrderedDict)


class Verdict:
    NEW = "new"
    DUPLICATE = "duplicate"
    FENCED = "fenced"


@dataclass
class ProducerTable:
    producers: dict[str, ProducerRecord] = field(default_factory=dict)

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
        return None if rec is None else rec.recent.get(sequence)

    def record(self, name: str, epoch: int, sequence: int, ids: list[tuple[int, str]]) -> None:
        rec = self.producers.get(name)
        if rec is None or epoch > rec.epoch:
            rec = self.producers[name] = ProducerRecord(epoch, sequence)
        if epoch < rec.epoch:
            return  # a zombie's entry replayed after the fence: nothing to learn
        if sequence >= rec.last_sequence:
            rec.last_sequence = sequence
        got = rec.recent.setdefault(sequence, [])
        got.extend(ids)
        rec.recent.move_to_end(sequence)
        while len(rec.recent) > recent_max:
            rec.recent.popitem(last=False)

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {"name": n, "epoch": r.epoch, "last_sequence": r.last_sequence,
             "recent": [[s, [list(p) for p in ids]] for s, ids in r.recent.items()]}
            for n, r in self.producers.items()
        ]

    @classmethod
    def from_json(cls, data: list[dict[str, Any]]) -> ProducerTable:
        table = cls()
        for p in data:
            rec = ProducerRecord(int(p["epoch"]), int(p["last_sequence"]))
            for seq, ids in p["recent"]:
                rec.recent[int(seq)] = [(int(i), str(m)) for i, m in ids]
            table.producers[str(p["name"])] = rec
        return table
