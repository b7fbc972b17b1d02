"""``streamtx verify``: gather the histories of a run and hand them to the checker.

The destination is read with committed isolation through a fresh subscription
from the earliest position (every visible message once; redelivered copies of
the same message id are dropped), then ordered per destination partition by
position. The generator's and the workers' logs come from the run directory.
"""

from __future__ import annotations

import functools
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from streamtx.demo.checker import Observed, Report, Written, check
from streamtx.demo.layout import RunConfig, generator_log, read_jsonl, worker_logs
from streamtx.demo.records import decode
from streamtx.demo.recovery import Commit
from streamtx.demo.rest import Fetched, Rest, last_per_partition, position_of, retry_retriable

T = TypeVar("T")


@dataclass
class WorkerHistory:
    """Transactions by final outcome, from the workers' logs."""

    committed: int = 0
    aborted: set[str] = field(default_factory=set)  # aborted or refused: must stay invisible
    refused: int = 0  # commits the coordinator refused (zombies, timeouts)
    orphans: int = 0  # left open by a killed worker, ended by its next life
    last: dict[str, str] = field(default_factory=dict)
    window: tuple[float, float] | None = None  # wall clock of the first open and the last commit


def load_workers(run_dir: Path) -> WorkerHistory:
    h = WorkerHistory()
    for path in worker_logs(run_dir):
        for line in read_jsonl(path):
            txn, outcome = line["txn"], line["o"]
            h.last[txn] = outcome
            if outcome == "open" and "t" in line:
                first = line["t"] if h.window is None else min(h.window[0], line["t"])
                h.window = (first, h.window[1] if h.window is not None else first)
            if outcome == "committed":
                h.committed += 1
                if h.window is not None and "t" in line:
                    h.window = (h.window[0], max(h.window[1], line["t"]))
            elif outcome in ("aborted", "refused"):
                h.aborted.add(txn)
                h.refused += outcome == "refused"
            if line.get("n") == -1:
                h.orphans += 1
    return h


def load_commits(run_dir: Path) -> list[Commit]:
    """Every committed transaction of the workers' logs that says which source partitions it
    advanced (an orphan ended by a worker's next life says none), with its open time."""
    commits: list[Commit] = []
    for path in worker_logs(run_dir):
        opened: dict[str, float] = {}
        for line in read_jsonl(path):
            if line["o"] == "open":
                opened[line["txn"]] = line["t"]
            elif line["o"] == "committed" and line.get("p") and line["txn"] in opened:
                commits.append(Commit(opened[line["txn"]], line["t"], frozenset(line["p"])))
    return commits


def load_written(run_dir: Path) -> tuple[list[Written], list[float]]:
    """The acknowledged records, and one write latency (ms) per record."""
    written: list[Written] = []
    latencies: list[float] = []
    for line in read_jsonl(generator_log(run_dir)):
        recs = line["r"]
        written.extend(Written(p, s, u) for p, s, u in recs)
        latencies.extend([float(line["lat_ms"])] * len(recs))
    return written, latencies


async def read_destination(rest: Rest, cfg: RunConfig, *, idle_fetches: int = 3,
                           give_up_s: float = 300.0) -> list[Observed]:
    """Every committed message of the destination, in order per partition."""
    sub = f"verify-{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + give_up_s

    def left() -> float:
        return deadline - time.monotonic()

    await retry_retriable(lambda: rest.subscribe(cfg.dest_topic, sub, "earliest"), give_up_s=left())
    seen: dict[str, Fetched] = {}
    empty = 0
    while empty < idle_fetches:
        msgs: list[Fetched] = await retry_retriable(
            lambda: rest.fetch(cfg.dest_topic, sub, "verify", 1000, 500), give_up_s=left())
        empty = 0 if msgs else empty + 1
        for m in msgs:
            seen.setdefault(m.message_id, m)
        if msgs:  # the only consumer, reading in order: one cumulative ack per partition
            ids = last_per_partition(msgs)
            await retry_retriable(functools.partial(rest.ack, cfg.dest_topic, sub, ids, cumulative=True),
                                  give_up_s=left())
    ordered = sorted(seen.values(), key=lambda m: (m.partition, position_of(m.message_id)))
    out: list[Observed] = []
    for m in ordered:
        rec = decode(m.value)
        out.append(Observed(m.partition, m.message_id, rec.src_partition, rec.seq, rec.user_id,
                            m.properties.get("txn")))
    return out


async def verify(rest: Rest, run_dir: Path) -> Report:
    cfg = RunConfig.load(run_dir)
    written, _ = load_written(run_dir)
    workers = load_workers(run_dir)
    observed = await read_destination(rest, cfg)
    return check(written, observed, workers.aborted, expected_partition=cfg.ranges().partition_of)
