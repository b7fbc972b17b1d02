"""Latency percentiles and the summary table of the demo (docs/background.md).

Seed 003's table for a 500 ms commit interval (YDB / Kafka, 100 MB/s, 8 hosts):
write latency p50 4 / 28 ms, p99 153 / 96 ms; end-to-end p50 367 / 321 ms,
p99 644 / 577 ms. We print the same columns for this machine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

quantiles = (0.50, 0.95, 0.99, 0.999)


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of ``samples`` (0 < q <= 1); NaN for no samples."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = max(1, math.ceil(q * len(ordered)))
    return float(ordered[rank - 1])


def percentiles(samples: Sequence[float]) -> dict[float, float]:
    ordered = sorted(samples)
    return {q: percentile(ordered, q) for q in quantiles}


@dataclass(frozen=True)
class DemoResult:
    """What one demo run measured and what the checker found."""

    records: int
    bytes_written: int
    seconds: float
    commits: int
    aborts: int
    kills: int
    write_ms: Sequence[float]
    e2e_ms: Sequence[float]
    lost: int = 0
    duplicate: int = 0
    aborted_read: int = 0
    nonmonotonic: int = 0

    @property
    def mb_per_s(self) -> float:
        return self.bytes_written / 1e6 / self.seconds if self.seconds > 0 else 0.0

    @property
    def commits_per_s(self) -> float:
        return self.commits / self.seconds if self.seconds > 0 else 0.0

    @property
    def e2e_p99_ms(self) -> float:
        return percentile(self.e2e_ms, 0.99)


def _fmt(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def render_table(result: DemoResult) -> str:
    """The latency table (like the talk's) and the throughput lines."""
    head = f"{'':<22}" + "".join(f"{f'p{q * 100:g} ms':>12}" for q in quantiles)
    rows = [head]
    for name, samples in (("write latency", result.write_ms), ("end-to-end latency", result.e2e_ms)):
        pct = percentiles(samples)
        rows.append(f"{name:<22}" + "".join(f"{_fmt(pct[q]):>12}" for q in quantiles))
    rows.append(
        f"records {result.records}  in {result.seconds:.1f} s  {result.mb_per_s:.2f} MB/s  "
        f"commits {result.commits} ({result.commits_per_s:.1f}/s)  aborts {result.aborts}  "
        f"kills {result.kills}"
    )
    return "\n".join(rows)


def summary_line(result: DemoResult) -> str:
    """The demo's last line, in the exact format the issue fixes."""
    return (
        f"demo reshard: records={result.records} mb_per_s={result.mb_per_s:.2f} "
        f"e2e_p99_ms={_fmt(result.e2e_p99_ms)} kills={result.kills} lost={result.lost} "
        f"duplicate={result.duplicate} aborted_read={result.aborted_read} "
        f"nonmonotonic={result.nonmonotonic}"
    )
