"""The anomaly checker: pure, over a history of what was written and what is visible.

Inputs (no I/O here; ``verify`` gathers them):

- ``written``: every record the generator saw acknowledged, as
  ``(src_partition, seq, user_id)``; the sequence per source partition has no gaps.
- ``observed``: every message visible in the destination topic with committed
  isolation, in destination order (per destination partition, by position), each
  carrying the source identity of its record and the transaction that wrote it.
- ``aborted``: ids of transactions that did not commit (workers log every
  transaction they abort or whose commit is refused; a restarted worker logs the
  orphans of its previous life it aborted).

Anomalies, named as Jepsen names them:

- **lost-write**: an acknowledged source record never appears.
- **duplicate**: a record appears more than once (at distinct positions).
- **aborted-read** (G1a): a visible message was written by an aborted transaction.
- **nonmonotonic**: for one user, the destination holds that user's records in
  another order than the source did (a record appears after one with a higher
  sequence number from the same source partition).

Also reported, but not anomalies of the promise: records routed to a partition
other than the one of their user-id range (``misrouted``, an application bug,
still non-zero exit) and visible records the generator never saw acknowledged
(``indeterminate``: a write whose reply was lost, like Jepsen's ``:info``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

max_examples = 5


@dataclass(frozen=True, slots=True)
class Written:
    """A source record the generator saw acknowledged."""

    src_partition: int
    seq: int
    user_id: int


@dataclass(frozen=True, slots=True)
class Observed:
    """A message visible in the destination, with the record it carries."""

    dest_partition: int
    message_id: str
    src_partition: int
    seq: int
    user_id: int
    txn_id: str | None


@dataclass
class Anomaly:
    """One kind of anomaly: how many, and a few examples in words."""

    name: str
    count: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, example: str, n: int = 1) -> None:
        self.count += n
        if len(self.examples) < max_examples:
            self.examples.append(example)


@dataclass
class Report:
    """The checker's verdict."""

    written: int
    observed: int
    lost: Anomaly = field(default_factory=lambda: Anomaly("lost-write"))
    duplicate: Anomaly = field(default_factory=lambda: Anomaly("duplicate"))
    aborted_read: Anomaly = field(default_factory=lambda: Anomaly("aborted-read (G1a)"))
    nonmonotonic: Anomaly = field(default_factory=lambda: Anomaly("nonmonotonic"))
    misrouted: Anomaly = field(default_factory=lambda: Anomaly("misrouted"))
    indeterminate: Anomaly = field(default_factory=lambda: Anomaly("indeterminate (info)"))

    @property
    def anomalies(self) -> list[Anomaly]:
        return [self.lost, self.duplicate, self.aborted_read, self.nonmonotonic, self.misrouted]

    @property
    def ok(self) -> bool:
        """No anomaly over at least one record: a run that wrote nothing showed nothing."""
        return self.written > 0 and all(a.count == 0 for a in self.anomalies)

    def render(self) -> str:
        lines = [f"checker: {self.written} records written, {self.observed} messages visible"]
        for a in [*self.anomalies, self.indeterminate]:
            lines.append(f"  {a.name:<22} {a.count}")
            lines.extend(f"      e.g. {e}" for e in a.examples)
        if not self.written:
            lines.append("checker: NOTHING CHECKED: no record was written (--rate 0?)")
        else:
            lines.append("checker: OK, exactly once" if self.ok else "checker: ANOMALIES FOUND")
        return "\n".join(lines)


def check(
    written: Iterable[Written],
    observed: Iterable[Observed],
    aborted: Iterable[str],
    expected_partition: Callable[[int], int] | None = None,
) -> Report:
    """Compare the two histories; ``observed`` must be in destination order per partition."""
    sources = {(w.src_partition, w.seq): w for w in written}
    seen = list(observed)
    aborted_ids = set(aborted)
    report = Report(written=len(sources), observed=len(seen))

    copies: Counter[tuple[int, int]] = Counter((o.src_partition, o.seq) for o in seen)
    for (p, s), w in sources.items():
        if (p, s) not in copies:
            report.lost.add(f"user {w.user_id} partition {p} seq {s} never appears")
    for (p, s), n in copies.items():
        if n > 1:
            report.duplicate.add(f"partition {p} seq {s} appears {n} times")
        if (p, s) not in sources:
            report.indeterminate.add(f"partition {p} seq {s} visible but never acknowledged")

    for o in seen:
        if o.txn_id is not None and o.txn_id in aborted_ids:
            report.aborted_read.add(
                f"{o.message_id} (partition {o.src_partition} seq {o.seq}) written by aborted txn {o.txn_id}"
            )
        if expected_partition is not None and expected_partition(o.user_id) != o.dest_partition:
            report.misrouted.add(
                f"user {o.user_id} in destination partition {o.dest_partition}, "
                f"range says {expected_partition(o.user_id)}"
            )

    # Order: per (destination partition, user, source partition), the first copy of
    # each record must come in increasing seq. Duplicates are counted above, once.
    highest: dict[tuple[int, int, int], int] = defaultdict(lambda: -1)
    first_seen: set[tuple[int, int]] = set()
    for o in seen:
        if (o.src_partition, o.seq) in first_seen:
            continue
        first_seen.add((o.src_partition, o.seq))
        k = (o.dest_partition, o.user_id, o.src_partition)
        if o.seq < highest[k]:
            report.nonmonotonic.add(
                f"user {o.user_id}: seq {o.seq} of partition {o.src_partition} after seq {highest[k]} "
                f"({o.message_id})"
            )
        else:
            highest[k] = o.seq
    return report
