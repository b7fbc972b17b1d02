"""The pure half of ``bench/peer.py``: medians over rounds, the per-process CPU table, the last line.

No I/O and no clock here (the bench measures; this module only computes and formats),
so each figure's arithmetic is unit-tested (tests/unit/test_bench_peer_report.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from streamtx.demo.stats import percentile


def median(values: Sequence[float]) -> float:
    """The median of the rounds' figures, NaN rounds left out (NaN when none is left)."""
    kept = [v for v in values if not math.isnan(v)]
    return float(statistics.median(kept)) if kept else math.nan


def cpu_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """CPU seconds each process spent between two snapshots (``after``'s processes; one absent
    from ``before`` started in between and counts from 0). A process restarted in between
    would read lower after than before: its delta is clamped at 0 rather than negative."""
    return {name: max(0.0, cpu - before.get(name, 0.0)) for name, cpu in after.items()}


@dataclass(frozen=True)
class Usage:
    """The CPU seconds each process of one system spent on one run's records."""

    system: str
    mode: str
    records: int
    cpu_s: Mapping[str, float]

    def us_per_record(self, process: str | None = None) -> float:
        """µs of CPU per record of ``process``, or of all the system's processes together."""
        cpu = sum(self.cpu_s.values()) if process is None else self.cpu_s.get(process, math.nan)
        return cpu / self.records * 1e6 if self.records else math.nan


def _num(x: float, digits: int = 1) -> str:
    return "-" if math.isnan(x) else f"{x:.{digits}f}"


def cpu_table(usages: Sequence[Usage]) -> str:
    """One row per process of each system (and its total), a column pair per mode: CPU
    seconds and µs per record. The modes appear in the order first seen."""
    modes = list(dict.fromkeys(u.mode for u in usages))
    by_key = {(u.system, u.mode): u for u in usages}
    head = f"{'cpu':<22}" + "".join(f"{m + ' s':>12}{m + ' µs/rec':>16}" for m in modes)
    rows = [head]
    for system in dict.fromkeys(u.system for u in usages):
        processes = list(dict.fromkeys(p for u in usages if u.system == system for p in u.cpu_s))
        for process in [*processes, None]:
            cells = []
            for mode in modes:
                u = by_key.get((system, mode))
                if u is None:
                    cells.append(f"{'-':>12}{'-':>16}")
                    continue
                cpu = sum(u.cpu_s.values()) if process is None else u.cpu_s.get(process, math.nan)
                cells.append(f"{_num(cpu, 2):>12}{_num(u.us_per_record(process)):>16}")
            rows.append(f"{system + ' ' + (process or 'total'):<22}" + "".join(cells))
    return "\n".join(rows)


def median_usages(rounds: Sequence[Sequence[Usage]]) -> list[Usage]:
    """Per (system, mode), a usage whose every process's CPU seconds per record is the median
    over the rounds (expressed over the median record count, so the table reads the same)."""
    keys = list(dict.fromkeys((u.system, u.mode) for r in rounds for u in r))
    out = []
    for system, mode in keys:
        same = [u for r in rounds for u in r if (u.system, u.mode) == (system, mode)]
        records = int(median([u.records for u in same]))
        processes = list(dict.fromkeys(p for u in same for p in u.cpu_s))
        cpu = {p: median([u.us_per_record(p) for u in same]) * records / 1e6 for p in processes}
        out.append(Usage(system, mode, records, cpu))
    return out


def p99_by_tenth(sent_ms: Sequence[float], e2e_ms: Sequence[float]) -> list[float]:
    """End-to-end p99 over each tenth of the records in the order they were sent: a latency
    that grows during the run shows as rising tenths (a steady one stays flat)."""
    ordered = [e for _, e in sorted(zip(sent_ms, e2e_ms, strict=True))]
    n = len(ordered)
    return [percentile(ordered[i * n // 10:(i + 1) * n // 10], 0.99) for i in range(10)]


@dataclass(frozen=True)
class Figures:
    """What the last line reports, for one round or as the rounds' medians (each field its
    own median: the ratio is the median of the rounds' ratios, each round's two systems
    having run side by side under the same conditions)."""

    backlog_ratio: float
    streamtx_mb_per_s: float
    kafka_mb_per_s: float
    live_p99_ms: float
    kafka_live_p99_ms: float
    streamtx_cpu_us_per_record: float
    kafka_cpu_us_per_record: float

    @classmethod
    def of_round(cls, streamtx_mb_per_s: float, kafka_mb_per_s: float, live_p99_ms: float,
                 kafka_live_p99_ms: float, streamtx_cpu_us_per_record: float,
                 kafka_cpu_us_per_record: float) -> Figures:
        ratio = streamtx_mb_per_s / kafka_mb_per_s if kafka_mb_per_s > 0 else math.nan
        return cls(ratio, streamtx_mb_per_s, kafka_mb_per_s, live_p99_ms, kafka_live_p99_ms,
                   streamtx_cpu_us_per_record, kafka_cpu_us_per_record)

    def row(self, label: str) -> str:
        return (f"{label:<8} {_num(self.backlog_ratio, 2):>8} {_num(self.streamtx_mb_per_s, 2):>10} "
                f"{_num(self.kafka_mb_per_s, 2):>10} {_num(self.live_p99_ms, 0):>10} "
                f"{_num(self.kafka_live_p99_ms, 0):>10} {_num(self.streamtx_cpu_us_per_record):>10} "
                f"{_num(self.kafka_cpu_us_per_record):>10}")


figures_head = (f"{'round':<8} {'ratio':>8} {'st MB/s':>10} {'k MB/s':>10} {'st p99':>10} "
                f"{'k p99':>10} {'st µs/rec':>10} {'k µs/rec':>10}")


def median_figures(rounds: Sequence[Figures]) -> Figures:
    """Each figure's median over the rounds."""
    return Figures(*(median([getattr(f, name) for f in rounds]) for name in Figures.__dataclass_fields__))


def last_line(f: Figures) -> str:
    """``bench peer: ...``, the issue's exact format, one line."""
    return (f"bench peer: backlog_ratio={_num(f.backlog_ratio, 2)} "
            f"streamtx_mb_per_s={_num(f.streamtx_mb_per_s, 2)} kafka_mb_per_s={_num(f.kafka_mb_per_s, 2)} "
            f"live_p99_ms={_num(f.live_p99_ms, 0)} kafka_live_p99_ms={_num(f.kafka_live_p99_ms, 0)} "
            f"streamtx_cpu_us_per_record={_num(f.streamtx_cpu_us_per_record)} "
            f"kafka_cpu_us_per_record={_num(f.kafka_cpu_us_per_record)}")
