"""Recovery after a crash, from the histories of one demo run (pure: no I/O).

A kill's **recovery** is the time from the kill -9 until the job is whole again:
every source partition that is committed again after the kill has been advanced
by a transaction *opened* after it (a transaction opened before the kill may
well commit without the killed process; one opened after needs begin, produce,
acks and commit to work again). With two workers, the other worker's next
commit comes at once after a worker kill, but the killed worker's partitions
wait for its restart or their failover: "whole" counts those too. The
**longest stall** is the longest stretch between two consecutive commits of
the job (any partition); the longest stretch of one partition is reported
beside it.

Each kill may also carry the times its process was restarted and ready (the
supervisor's view: spawned, then answering ``/readyz`` or, for a worker, saying
what it owns), which splits a recovery into *restart* (kill to ready: process
start, imports, ledger open and replay) and *rejoin* (ready to whole again:
retries, back-offs, leases, failover).
"""

from __future__ import annotations

import itertools
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from streamtx.demo.stats import percentile

kinds = ("broker", "coordinator", "pendingack", "worker")


def kind_of(name: str) -> str:
    """``worker-1`` → ``worker``, ``broker-1`` (a replica) → ``broker``; a single service's name
    is its kind."""
    return re.sub(r"-\d+$", "", name)


@dataclass(frozen=True)
class Kill:
    """One kill -9: which process, when (wall clock, s), and when it was back."""

    name: str
    at: float
    ready_at: float | None = None  # restarted and ready (None: not known)

    @property
    def kind(self) -> str:
        return kind_of(self.name)


@dataclass(frozen=True)
class Commit:
    """One committed transaction: when it was opened and committed (wall clock, s), and the
    source partitions it advanced."""

    opened: float
    at: float
    partitions: frozenset[int]


def first_commits(since: float, commits: Iterable[Commit]) -> dict[int, float]:
    """Per source partition, the first commit of a transaction opened at or after ``since``."""
    first: dict[int, float] = {}
    for c in commits:
        if c.opened < since:
            continue
        for p in c.partitions:
            if c.at < first.get(p, math.inf):
                first[p] = c.at
    return first


def whole_since(since: float, commits: Iterable[Commit]) -> set[int]:
    """The source partitions committed by a transaction opened at or after ``since``."""
    return set(first_commits(since, commits))


def recovery_s(kill: Kill, commits: Sequence[Commit]) -> float | None:
    """Seconds from ``kill`` until every partition committed again after it has a commit of
    a transaction opened after the kill; None when nothing opened after it ever committed."""
    first = first_commits(kill.at, commits)
    return max(first.values()) - kill.at if first else None


def kill_stall_s(kill: Kill, commits: Sequence[Commit], recovery: float | None) -> float:
    """The longest stretch without a commit of the job around ``kill``: over the job's commits
    from the last one before the kill to the first one once it is whole again (to the last
    commit when it never is). With replicas this is what a kill costs the job: its recovery
    cannot be shorter than a transaction's life (opened after the kill, committed an interval
    later) even when nothing stalled."""
    end = math.inf if recovery is None else kill.at + recovery
    times = sorted(c.at for c in commits)
    before = [t for t in times if t < kill.at][-1:]
    after = [t for t in times if kill.at <= t <= end]
    later = [t for t in times if t > end][:1]
    if not after and not later:
        return math.inf  # the job never committed again
    return longest_gap_s([*before, *after, *(later if not after else [])])


def longest_gap_s(times: Iterable[float]) -> float:
    """The longest stretch between two consecutive instants (0 for fewer than two)."""
    ordered = sorted(times)
    return max((b - a for a, b in itertools.pairwise(ordered)), default=0.0)


@dataclass
class KindStats:
    """The recoveries of one kind of process (ms); None for a kill the job never recovered from."""

    recovery_ms: list[float | None] = field(default_factory=list)
    restart_ms: list[float] = field(default_factory=list)  # kill to ready
    rejoin_ms: list[float] = field(default_factory=list)  # ready to whole again
    stall_ms: list[float] = field(default_factory=list)  # the job's longest stretch without a commit

    def recovered(self) -> list[float]:
        return [r for r in self.recovery_ms if r is not None]

    def q(self, q: float, what: str = "recovery") -> float:
        """Percentile ``q`` of ``recovery`` (a kill never recovered from counts as infinite),
        ``restart`` or ``rejoin``; NaN without samples."""
        if what == "recovery":
            return percentile([math.inf if r is None else r for r in self.recovery_ms], q)
        return percentile(self.restart_ms if what == "restart" else self.rejoin_ms, q)


@dataclass
class RecoveryReport:
    """Per kind of process killed, its recoveries; and the job's longest stalls (ms)."""

    by_kind: dict[str, KindStats]
    longest_stall_ms: float
    longest_partition_stall_ms: float

    def p99_ms(self, kind: str) -> float:
        return self.by_kind[kind].q(0.99) if kind in self.by_kind else math.nan


def analyse(kills: Sequence[Kill], commits: Sequence[Commit]) -> RecoveryReport:
    """Recovery per kill, grouped by kind; longest stall over the commits."""
    by_kind: dict[str, KindStats] = defaultdict(KindStats)
    for k in kills:
        stats = by_kind[k.kind]
        rec = recovery_s(k, commits)
        stats.recovery_ms.append(None if rec is None else rec * 1000)
        stats.stall_ms.append(kill_stall_s(k, commits, rec) * 1000)
        if k.ready_at is not None:
            stats.restart_ms.append((k.ready_at - k.at) * 1000)
            if rec is not None:
                stats.rejoin_ms.append(max(0.0, rec * 1000 - (k.ready_at - k.at) * 1000))
    per_partition: dict[int, list[float]] = defaultdict(list)
    for c in commits:
        for p in c.partitions:
            per_partition[p].append(c.at)
    partition_stall_s = max((longest_gap_s(t) for t in per_partition.values()), default=0.0)
    return RecoveryReport(by_kind=dict(by_kind), longest_stall_ms=longest_gap_s(c.at for c in commits) * 1000,
                          longest_partition_stall_ms=partition_stall_s * 1000)


def _ms(x: float) -> str:
    return "-" if math.isnan(x) else "never" if math.isinf(x) else f"{x:.0f}"


def render(report: RecoveryReport) -> str:
    """The summary's recovery lines: per kind killed, kill to whole again (p50, p99, max), its
    split into restart (kill to ready) and rejoin (ready to whole again), and the job's longest
    stretch without a commit around a kill of that kind; the stalls of the whole run."""
    rows = [f"{'recovery (ms)':<22}{'kills':>6}{'p50':>8}{'p99':>8}{'max':>8}"
            f"{'restart p50':>13}{'p99':>8}{'rejoin p50':>12}{'p99':>8}{'stall max':>11}"]
    for kind in (*kinds, *sorted(set(report.by_kind) - set(kinds))):
        s = report.by_kind.get(kind)
        if s is None:
            continue
        rows.append(
            f"{'kill -9 ' + kind:<22}{len(s.recovery_ms):>6}{_ms(s.q(0.5)):>8}{_ms(s.q(0.99)):>8}"
            f"{_ms(s.q(1.0)):>8}{_ms(s.q(0.5, 'restart')):>13}{_ms(s.q(0.99, 'restart')):>8}"
            f"{_ms(s.q(0.5, 'rejoin')):>12}{_ms(s.q(0.99, 'rejoin')):>8}"
            f"{_ms(max(s.stall_ms, default=math.nan)):>11}")
    rows.append(f"longest stall: {_ms(report.longest_stall_ms)} ms without a commit of the job, "
                f"{_ms(report.longest_partition_stall_ms)} ms of one source partition")
    return "\n".join(rows)


def bench_line(report: RecoveryReport, prefix: str = "bench recovery") -> str:
    """``make bench-recovery``'s last line, in the exact format issue 25 fixes (``prefix``:
    ``bench recovery replicas`` for the replicas' run)."""
    return (f"{prefix}: "
            + " ".join(f"{k}_p99_ms={_ms(report.p99_ms(k))}" for k in kinds)
            + f" longest_stall_ms={_ms(report.longest_stall_ms)}")
