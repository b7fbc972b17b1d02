"""Benchmark of the PIP-160 buffered writer (``make bench-log``).

Closed-loop asyncio writers append 200-byte records, each awaiting its write
before the next, with 1 and with 64 writers, on the file backend (a temp dir)
and the kafka backend (a tansu broker started here), in three modes:

* ``unbatched`` — batching off, one record per entry (the ledger still
  group-commits concurrent appends);
* ``fixed`` — Pulsar's policy: a 1 ms timer from each batch's first record;
* ``auto`` — no timer while the log is idle, gather while an append is in flight.

Run from the repo root (``make bench-log``): ``tests.support`` comes from the checkout.
``--seconds`` (or ``BENCH_SECONDS``) sets each case's duration (default 3);
the three modes run interleaved, in slices of ``--slice`` seconds (default 0.1),
so that the noise of a shared machine falls on every mode alike.
The last line sums up the ratios the design targets.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support; streamtx is installed

from tests.support.procs import tansu_broker

from streamtx.batching import BufferedWriter
from streamtx.ledger import open_ledger_factory

MODES = ("unbatched", "fixed", "auto")
RECORD = bytes(range(1, 201))  # 200 bytes, never starting with the batch magic


@dataclass(frozen=True)
class Case:
    backend: str
    writers: int
    mode: str
    records_per_s: float
    entries: int
    records: int
    p50_ms: float
    p99_ms: float

    @property
    def records_per_entry(self) -> float:
        return self.records / self.entries if self.entries else 0.0

    def line(self) -> str:
        return (
            f"{self.backend:<6} x{self.writers:<3} {self.mode:<10} "
            f"records/s={self.records_per_s:>10.0f} entries={self.entries:>8} "
            f"records/entry={self.records_per_entry:>7.2f} "
            f"p50={self.p50_ms:7.3f}ms p99={self.p99_ms:7.3f}ms"
        )


def _identity(data: bytes) -> bytes:
    return data


class _Run:
    """One mode's writer and what it measured so far."""

    def __init__(self, writer: BufferedWriter[bytes]) -> None:
        self.writer = writer
        self.latencies: list[float] = []
        self.elapsed = 0.0
        self.entries = 0
        self.records = 0

    async def slice(self, writers: int, seconds: float) -> None:
        writer, latencies = self.writer, self.latencies
        entries0, records0 = writer.entries_written, writer.records_written
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        clock = time.perf_counter

        async def closed_loop() -> None:
            write, note = writer.write, latencies.append
            while loop.time() < deadline:
                t0 = clock()
                await write(RECORD)
                note(clock() - t0)

        start = clock()
        await asyncio.gather(*(closed_loop() for _ in range(writers)))
        self.elapsed += clock() - start
        self.entries += writer.entries_written - entries0
        self.records += writer.records_written - records0


async def run_cases(url: str, backend: str, writers: int, seconds: float, slice_s: float) -> list[Case]:
    """The three modes, each for ``seconds`` in all, interleaved in slices of ``slice_s``.

    Interleaving spreads the drift of a shared machine (disk and CPU noise) over
    every mode alike, rather than over whichever ran last.
    """
    ledgers = open_ledger_factory(url)
    try:
        runs: dict[str, _Run] = {}
        for mode in MODES:
            ledger = await ledgers.open(f"bench-{mode}-{writers}-{uuid.uuid4().hex[:8]}")
            writer = BufferedWriter(
                ledger, _identity, enabled=mode != "unbatched",
                policy="fixed" if mode == "fixed" else "auto", max_delay_s=0.001,
            )
            # Warm up (connections, topic metadata, first segment) outside the timing.
            await asyncio.gather(*(writer.write(RECORD) for _ in range(writers)))
            runs[mode] = _Run(writer)
        rounds = max(1, round(seconds / slice_s))
        for _ in range(rounds):
            for mode in MODES:
                await runs[mode].slice(writers, seconds / rounds)
        cases = []
        for mode, run in runs.items():
            await run.writer.close()
            cuts = statistics.quantiles(run.latencies, n=100, method="inclusive")
            cases.append(Case(
                backend, writers, mode, run.records / run.elapsed, run.entries, run.records,
                cuts[49] * 1000, cuts[98] * 1000,
            ))
        return cases
    finally:
        await ledgers.close()


@contextlib.contextmanager
def backend_url(backend: str) -> Iterator[str]:
    if backend == "file":
        with tempfile.TemporaryDirectory(prefix="bench-log-") as tmp:
            yield f"file://{tmp}"
    else:
        with tansu_broker() as bootstrap:
            prefix = f"b{uuid.uuid4().hex[:8]}."
            yield (
                f"kafka://{bootstrap}?idempotence=false&delete_records=false"
                f"&topic_prefix={prefix}"
            )


def _ratio(cases: dict[tuple[str, int, str], Case], backend: str, writers: int, mode: str) -> float:
    base = cases[(backend, writers, "unbatched")].records_per_s
    return cases[(backend, writers, mode)].records_per_s / base if base else 0.0


def summary(cases: dict[tuple[str, int, str], Case], backends: list[str]) -> str:
    def low(values: list[float]) -> float:
        return min(values) if values else float("nan")

    kafka_x64 = _ratio(cases, "kafka", 64, "auto") if ("kafka", 64, "auto") in cases else float("nan")
    file_x64 = _ratio(cases, "file", 64, "auto") if ("file", 64, "auto") in cases else float("nan")
    lone = low([_ratio(cases, b, 1, "auto") for b in backends if (b, 1, "auto") in cases])
    per_entry = low([cases[(b, 64, "auto")].records_per_entry for b in backends if (b, 64, "auto") in cases])
    fixed = low([_ratio(cases, b, 64, "fixed") for b in backends if (b, 64, "fixed") in cases])
    return (
        f"bench buffered_writer: kafka_x64={kafka_x64:.2f} file_x64={file_x64:.2f} "
        f"lone_x1={lone:.2f} records_per_entry={per_entry:.2f} fixed_x64={fixed:.2f}"
    )


async def main_async(args: argparse.Namespace) -> None:
    backends = args.backends.split(",")
    writer_counts = [int(w) for w in args.writers.split(",")]
    cases: dict[tuple[str, int, str], Case] = {}
    for backend in backends:
        with backend_url(backend) as url:
            for writers in writer_counts:
                for case in await run_cases(url, backend, writers, args.seconds, args.slice):
                    cases[(backend, writers, case.mode)] = case
                    print(case.line(), flush=True)
    print(summary(cases, backends), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=float, default=float(os.environ.get("BENCH_SECONDS", "3")),
        help="duration of each case (env BENCH_SECONDS; default 3)",
    )
    parser.add_argument(
        "--slice", type=float, default=0.1, help="seconds a mode runs before the next one's turn"
    )
    parser.add_argument("--backends", default="file,kafka", help="comma-separated: file,kafka")
    parser.add_argument("--writers", default="1,64", help="comma-separated writer counts")
    args = parser.parse_args()
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
