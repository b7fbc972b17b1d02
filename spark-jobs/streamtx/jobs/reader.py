"""Reading ledgers in parallel on Spark, with the services' replay rules.

Two passes over the splits of :mod:`.sources`:

1. each task walks its split's frame headers (file: :func:`.scan.walk_headers`;
   Kafka: the offsets and frames of its range); the driver puts them in log
   order per ledger and judges them with the ledger layer's own
   :class:`~streamtx.ledger.frames.FenceTracker`, starting from the fence
   state the last trim persisted: fences, zombie writers' frames and
   duplicates of retried appends are dropped exactly as a service's replay
   drops them, entries below the logical start (trimmed) are skipped;
2. each :class:`~.sources.Task` then yields its live entries
   (:func:`live_entries`), and the job decodes them with the project's codecs
   (batched and unbatched alike, :func:`streamtx.batching.replay.replay_entries`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from streamtx.jobs import scan
from streamtx.jobs.session import slices
from streamtx.jobs.sources import LedgerRef, Split, Task, plan
from streamtx.ledger import frames as framing
from streamtx.ledger import open_ledger_factory
from streamtx.ledger.frames import FenceState, FenceTracker

_kafka_chunk = 2000


def _kafka_frames(split: Split) -> list[tuple[int, bytes]]:
    async def go() -> list[tuple[int, bytes]]:
        ledgers = open_ledger_factory(split.ledger.url)
        out: list[tuple[int, bytes]] = []
        try:
            raw = ledgers.raw_log(split.ledger.name)  # type: ignore[attr-defined]
            try:
                pos = split.lo
                while pos < split.hi:
                    frames = await raw.read_raw(pos, min(_kafka_chunk, split.hi - pos))
                    frames = [f for f in frames if split.lo <= f[0] < split.hi]
                    if not frames:
                        break
                    out.extend(frames)
                    pos = frames[-1][0] + 1
            finally:
                await raw.close()
        finally:
            await ledgers.close()
        return out

    return asyncio.run(go())


def header_pass(split: Split) -> tuple[Split, int, list[tuple[int, tuple[int, int, int, int]]]]:
    """Task, pass 1: ``(split, first position, [(entry id or -1, frame header)])``."""
    if split.path:
        first, heads = scan.walk_headers(split.path, split.lo, split.hi)
        return split, first, [(-1, h) for h in heads]
    out = []
    for offset, raw in _kafka_frames(split):
        f = framing.decode(raw)
        out.append((offset, (int(f.kind), f.writer_id, f.epoch, f.seq)))
    return split, split.lo, out


def judge(ledger_results: list[tuple[Split, int, list[tuple[int, tuple[int, int, int, int]]]]],
          start: int, state: FenceState) -> list[Task]:
    """Driver: the tasks of one ledger, its frames judged in log order by the ledger layer's rule."""
    tracker = FenceTracker(FenceState.decode(state.encode()))
    tasks: list[Task] = []
    next_id: dict[str, int] = {}  # file: the next entry id per segment
    for split, first, heads in sorted(ledger_results, key=lambda r: r[0].order):
        drop: set[int] = set()
        entry_id = next_id.get(split.path, split.base) if split.path else split.lo
        first_id = entry_id
        for offset, (kind, writer, epoch, seq) in heads:
            if offset >= 0:
                entry_id = offset
            if entry_id >= start:
                frame = framing.Frame(framing.FrameKind(kind), writer, epoch, seq)
                if not tracker.accept(frame):
                    drop.add(entry_id)
            else:
                drop.add(entry_id)  # trimmed: below the logical start
            entry_id += 1
        if split.path:
            next_id[split.path] = entry_id
        else:
            entry_id = split.hi  # Kafka offsets may have gaps
        tasks.append(Task(split, first, first_id, entry_id, frozenset(drop)))
    return tasks


def plan_tasks(spark: Any, refs: list[LedgerRef], *, split_bytes: int = 32 << 20,
               split_entries: int = 50_000) -> list[Task]:
    """Both passes' planning: the tasks whose live entries the job then reads."""
    planned = {ref.name: plan(ref, split_bytes=split_bytes, split_entries=split_entries) for ref in refs}
    splits = [s for _, _, ss in planned.values() for s in ss]
    if not splits:
        return []
    results = spark.sparkContext.parallelize(splits, slices(spark, len(splits))).map(header_pass).collect()
    by_ledger: dict[str, list[Any]] = {}
    for r in results:
        by_ledger.setdefault(r[0].ledger.name, []).append(r)
    tasks: list[Task] = []
    for name, rs in by_ledger.items():
        start, state, _ = planned[name]
        tasks.extend(judge(rs, start, state))
    return tasks


def live_entries(task: Task) -> Iterator[tuple[int, bytes]]:
    """Task, pass 2: ``(entry id, payload)`` of every live entry of the task, in order."""
    split = task.split
    if split.path:
        yield from scan.read_entries(split.path, task.first, split.hi, task.first_id, task.drop)
        return
    for offset, raw in _kafka_frames(split):
        if offset not in task.drop:
            yield offset, raw[framing.HEADER_SIZE :]
