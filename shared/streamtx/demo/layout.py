"""One demo run on disk: its configuration and the histories the checker reads.

``<run dir>/run.json`` holds :class:`RunConfig`; ``generator.jsonl`` is the
generator's record of every acknowledged produce request; ``worker-<i>.jsonl``
is each worker's transaction log (opened, committed, aborted, refused); the
checker needs nothing else besides the destination topic itself.

generator.jsonl, one line per acknowledged request::

    {"lat_ms": <request latency>, "r": [[src_partition, seq, user_id], ...]}

worker-<i>.jsonl, one line per transaction event::

    {"txn": "<id>", "o": "open" | "wrote" | "committing" | "committed" | "aborted" | "refused",
     "n": <records>, "why": "<error>", "r": [[src_partition, seq], ...],  # "r": aborted/refused
     "p": [src_partition, ...], "t": <wall clock, s>}  # "p": committed, the partitions it advanced
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from streamtx.demo.partitioner import RangePartitioner


@dataclass(frozen=True)
class RunConfig:
    """What every process of one run agrees on."""

    run_id: str
    source_topic: str
    dest_topic: str
    progress_topic: str
    source_partitions: int = 8
    dest_partitions: int = 4
    user_space: int = 100_000
    subscription: str = "reshard"
    record_size: int = 200

    def ranges(self) -> RangePartitioner:
        return RangePartitioner(self.user_space, self.dest_partitions)

    @classmethod
    def new(cls, run_id: str, **kw: Any) -> RunConfig:
        return cls(run_id, f"search-logs-{run_id}", f"search-logs-by-range-{run_id}",
                   f"reshard-progress-{run_id}", **kw)

    def save(self, run_dir: Path) -> None:
        (run_dir / "run.json").write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, run_dir: Path) -> RunConfig:
        return cls(**json.loads((run_dir / "run.json").read_text()))


def generator_log(run_dir: Path) -> Path:
    return run_dir / "generator.jsonl"


def worker_log(run_dir: Path, worker: int) -> Path:
    return run_dir / f"worker-{worker}.jsonl"


def worker_consumer(run_dir: Path, worker: int) -> Path:
    """The Failover consumer name of worker ``worker``'s current life: its next life closes it."""
    return run_dir / f"worker-{worker}.consumer"


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The complete lines of a JSON-lines file (a torn last line from a kill -9 is skipped)."""
    if not path.exists():
        return
    with path.open() as f:
        for line in f:
            if line.endswith("\n"):
                yield json.loads(line)


def worker_logs(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("worker-*.jsonl"))
