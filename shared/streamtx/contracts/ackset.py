"""Acknowledgement sets that travel between clusters (beyond PIP-33): pure, no I/O.

A replicated message is known in every cluster by its *origin*: the cluster it
was produced in and its position there (the :class:`~streamtx.records.partition.SourceInfo`
of a replicated entry; an entry produced here is its own origin, with this
cluster's name and position). An :class:`AckSet` says which messages a
subscription acknowledged, by origin, so that every other cluster finds them
among its own entries whatever their local positions.

The broker builds and applies them (:mod:`streamtx.broker.replication.markers`); the
replication controller only compares them, to write a marker only when it says
something new. Wire form (the ``origins`` of an ``acks`` marker)::

    [{"cluster": "a", "ledger": 7, "ranges": [[3, 9], [12, 12]],
      "batches": [[15, 4, "5"]]}, ...]

* ``ranges``: inclusive ranges of origin entry ids whose every message was
  acknowledged, sorted and disjoint. A range may span origin ids the writer
  never held (aborted messages, markers kept at their source), never one it
  holds unacknowledged: it is built from runs of entries deleted together in
  the writer's cursor (:meth:`AckSet.build`). Since every cluster receives an
  origin's entries through the same filter and in the same order, another
  cluster holds no entry of that origin inside a range that the writer did not
  hold, so acknowledging every entry of the origin it finds in the range is exact;
* ``batches``: batched entries partly acknowledged: ``[entry id, batch size,
  bits]``, bit i of the hexadecimal ``bits`` set when message i was (a hex
  string because a batch may hold more than 64 messages and JSON numbers are 64-bit).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

Origin = tuple[str, int]  # (cluster, ledger id there)
Ref = tuple[str, int, int]  # (cluster, ledger id, entry id): a message's entry, known everywhere


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


@dataclass
class AckSet:
    """Acknowledged messages by origin: whole entries as id ranges, partial batches as bitsets."""

    ranges: dict[Origin, list[tuple[int, int]]] = field(default_factory=dict)
    batches: dict[Origin, dict[int, tuple[int, int]]] = field(default_factory=dict)  # id -> (size, bits)

    @classmethod
    def build(cls, runs: Iterable[Iterable[Ref]], partial: Iterable[tuple[Ref, int, int]]) -> AckSet:
        """From the writer's cursor: ``runs`` are the message entries of each run of deleted
        entries (in local order, nothing undeleted inside), ``partial`` its partly deleted
        batches ``(ref, size, bits)``."""
        found: dict[Origin, list[tuple[int, int]]] = {}
        for run in runs:
            spans: dict[Origin, tuple[int, int]] = {}
            for cluster, ledger, entry in run:
                key = (cluster, ledger)
                lo, hi = spans.get(key, (entry, entry))
                spans[key] = (min(lo, entry), max(hi, entry))
            for key, span in spans.items():
                found.setdefault(key, []).append(span)
        out = cls({k: _merge(v) for k, v in found.items()})
        for (cluster, ledger, entry), size, bits in partial:
            if bits and not out.lookup((cluster, ledger, entry)):
                out.batches.setdefault((cluster, ledger), {})[entry] = (size, bits)
        return out

    def __bool__(self) -> bool:
        return bool(self.ranges) or bool(self.batches)

    def lookup(self, ref: Ref) -> bool | tuple[int, int]:
        """True if the entry was wholly acknowledged, ``(size, bits)`` if partly, else False."""
        key = (ref[0], ref[1])
        spans = self.ranges.get(key)
        if spans:
            i = bisect.bisect_right(spans, (ref[2], 1 << 64)) - 1
            if i >= 0 and spans[i][0] <= ref[2] <= spans[i][1]:
                return True
        return self.batches.get(key, {}).get(ref[2], False)

    def last(self) -> dict[Origin, int]:
        """The highest entry id named, per origin: a reader looking for them stops past it."""
        out: dict[Origin, int] = {k: v[-1][1] for k, v in self.ranges.items() if v}
        for key, entries in self.batches.items():
            if entries:
                out[key] = max(out.get(key, -1), max(entries))
        return out

    def covers(self, other: AckSet) -> bool:
        """Whether every message ``other`` names is named here too (then it says nothing new)."""
        for (cluster, ledger), spans in other.ranges.items():
            mine = self.ranges.get((cluster, ledger), [])
            for lo, hi in spans:
                i = bisect.bisect_right(mine, (lo, 1 << 64)) - 1
                if i < 0 or mine[i][1] < hi:
                    return False
        for (cluster, ledger), entries in other.batches.items():
            for entry, (_, bits) in entries.items():
                got = self.lookup((cluster, ledger, entry))
                if got is not True and (not got or bits & ~got[1]):
                    return False
        return True

    def union(self, other: AckSet) -> AckSet:
        """Every message named in either."""
        out = AckSet({k: _merge(self.ranges.get(k, []) + other.ranges.get(k, []))
                      for k in {*self.ranges, *other.ranges}})
        for src in (self, other):
            for key, entries in src.batches.items():
                for entry, (size, bits) in entries.items():
                    got = out.lookup((key[0], key[1], entry))
                    if got is not True:
                        out.batches.setdefault(key, {})[entry] = (size, bits | (got[1] if got else 0))
        return out

    def only(self, origins: Iterable[Origin]) -> AckSet:
        """What is named of these origins alone."""
        keys = set(origins)
        return AckSet({k: list(v) for k, v in self.ranges.items() if k in keys},
                      {k: dict(v) for k, v in self.batches.items() if k in keys})

    def to_wire(self) -> list[dict[str, Any]]:
        keys = sorted({*self.ranges, *self.batches})
        return [{"cluster": c, "ledger": lid, "ranges": [list(r) for r in self.ranges.get((c, lid), [])],
                 "batches": [[e, size, format(bits, "x")]
                             for e, (size, bits) in sorted(self.batches.get((c, lid), {}).items())]}
                for c, lid in keys]

    @classmethod
    def from_wire(cls, origins: Any) -> AckSet:
        """Parse and check the wire form; ValueError says what is wrong."""
        if not isinstance(origins, list):
            raise ValueError("origins must be a list")
        out = cls()
        for o in origins:
            if not isinstance(o, dict) or not isinstance(o.get("cluster"), str) or not o["cluster"]:
                raise ValueError(f"bad origin {o!r}")
            key = (o["cluster"], _id(o.get("ledger")))
            spans = [(_id(lo), _id(hi)) for lo, hi in _pairs(o.get("ranges", []), 2)]
            if any(lo > hi for lo, hi in spans):
                raise ValueError(f"empty range in {spans!r}")
            if spans:
                out.ranges[key] = _merge(out.ranges.get(key, []) + spans)
            for entry, size, bits in _pairs(o.get("batches", []), 3):
                # Hex digits as to_wire writes them, and nothing else int() would take
                # ("0x1", "1_0", " 1"): the API's schema says exactly this.
                if not isinstance(bits, str) or not _hex_bits.fullmatch(bits):
                    raise ValueError(f"bad batch bits {bits!r}")
                value = int(bits, 16)
                if _id(size) < 1 or value < 0 or value >> _id(size):
                    raise ValueError(f"bits {bits!r} do not fit a batch of {size}")
                if value:
                    out.batches.setdefault(key, {})[_id(entry)] = (_id(size), value)
        return out


_hex_bits = re.compile(r"[0-9a-f]+")


def _id(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 64:
        raise ValueError(f"bad id {value!r}")
    return value


def _pairs(items: Any, width: int) -> list[list[Any]]:
    if not isinstance(items, list) or any(not isinstance(i, list) or len(i) != width for i in items):
        raise ValueError(f"expected a list of {width}-element lists, not {items!r}")
    return items
