"""One resharding worker: consume the source partitions a Failover subscription gives it, re-split
produce and ack in one transaction per commit interval.

Run as its own process (``python -m streamtx.demo.worker``); the supervisor runs
several and kill -9s them. Why each piece is there:

- **Ownership: one Failover subscription.** All workers consume the source
  through one Failover subscription (``reshard-failover``): the broker makes one
  worker at a time active on a partition (live workers sorted by name, partition
  mod count) and moves a partition when its worker dies, pauses (its fetches stop
  for the broker's ``failover_idle_ms``) or comes back. One writer per partition
  at a time keeps a user's records in order (a Shared subscription would hand
  them to two workers whose transactions commit in either order,
  docs/background.md). A worker learns what it owns from what it is handed, and
  asks the broker every second which partitions are still its own (it forgets
  the records it holds of one that moved).
- **Order under redelivery.** An abort, a partition moving or a restart hands
  records back out of order; a :class:`~streamtx.demo.reorder.ReorderBuffer`
  writes them in sequence order, each once.
- **Progress in the transaction.** With its outputs and its acks, each
  transaction writes the next sequence number of every partition it advanced to
  the progress topic (partition ``p`` for source partition ``p``). Before it
  takes records of a partition it did not own, a worker reads that partition's
  committed progress (read-committed, so an open transaction's progress is not
  seen), and resumes there.
- **Acks: one cumulative position per partition per transaction**, plus the
  first record of each partition individually. Why this is exactly once when
  partitions move (the fence): the generator writes a partition's records in
  sequence order, one position per sequence number (its resends are deduplicated
  by the broker), so a transaction ``T`` that writes sequence numbers
  ``a..b`` of partition ``p`` acks positions ``pos(a)`` (individually) and
  ``..pos(b)`` (cumulatively), in the same transaction as its outputs and
  progress. Suppose two committed transactions both wrote some record of ``p``:
  their ranges overlap, so one's first record ``a`` lies within the other's
  range. The pending-ack store lets only one open transaction hold a cumulative
  ack on ``p``; whichever of the two reaches its acks or its prepare second
  finds the other's range committed (its mark-delete is past ``pos(a)``: the
  broker refuses the ack as already acknowledged, or the prepare fails on the
  committed floor) or prepared (the prepare fails on the prepared cumulative
  range or the prepared individual id): it aborts and nothing of it is
  visible. So the committed ranges of a partition never overlap; and they
  leave no hole, since a worker starts at the committed progress it read (a
  stale, lower reading is caught by the fence; progress is never read too
  high). A worker that took over with a stale reading finds the records below
  the true progress gone from the subscription: it sees a gap at the head of
  the partition and re-reads the progress after ``resync_after_s``; after any
  abort it re-reads the progress of every partition it holds.
- **Failures.** Any error before the commit aborts the transaction and the next
  one redoes the same records (still in hand). A commit whose reply is lost is
  retried until the coordinator answers (commit is idempotent); 409 means the
  transaction was aborted (timed out: a zombie) and nothing of it is visible.
  Every transaction is logged as opened before it is used, so a restarted worker
  first aborts the orphans of its previous life.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import signal
import sys
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from streamtx.demo.layout import RunConfig, read_jsonl, worker_log
from streamtx.demo.procs import LOOPS, run_async
from streamtx.demo.records import SearchRecord, decode
from streamtx.demo.reorder import ReorderBuffer
from streamtx.demo.rest import (
    Fetched,
    Rest,
    full_name,
    last_per_partition,
    partition_name,
    retry_retriable,
)
from streamtx.errors import ConflictError, NotFoundError, StreamtxError

resolve_give_up_s = 90.0  # a coordinator down longer than this: exit, the restart resolves it
stall_exit_s = 30.0  # records held, none ready this long: exit and re-read the progress
write_chunk = 10_000  # records per produce / ack request (the broker takes at most 10,000): one hop each
fetch_max = 10_000  # records per fetch: a backlog comes in a few large answers
max_txn_records = 10_000  # a backlog is worked off in bounded transactions (well within the timeout)
max_held = 50_000  # records in hand beyond which prefetching pauses
max_write_gap_s = 0.1  # within a transaction, write at most this often (a quarter interval if shorter)
assignment_check_s = 1.0  # how often a worker asks which partitions are still its own
resync_after_s = 1.0  # a gap at a partition's head this long: re-read its committed progress
keepalive_s = 0.5  # fetch at least this often even when holding many records (Failover liveness)


class Uncertain(Exception):
    """The outcome of a transaction could not be learned."""


@dataclass
class Committing:
    """A transaction whose commit runs in the background."""

    txn: str
    taken: list[tuple[int, int, Held]]
    timing: defaultdict[str, float]
    task: asyncio.Task[tuple[bool, float]]
    started: float = field(default_factory=time.monotonic)
    started_wall_ms: float = field(default_factory=lambda: time.time() * 1000)


class Held(NamedTuple):
    """A source message in hand (a named tuple: one per record, and a frozen dataclass's
    ``__init__`` costs several times more)."""

    message_id: str
    record: SearchRecord
    value: bytes


class Worker:
    def __init__(self, cfg: RunConfig, run_dir: Path, rest: Rest, index: int, workers: int,
                 commit_interval_ms: int, txn_timeout_ms: int) -> None:
        self.cfg, self.rest, self.index = cfg, rest, index
        self.name = f"worker-{index}"
        self.sub = f"{cfg.subscription}-failover"
        # A consumer name per life: what a killed life had out unacked stays with its name
        # until that consumer expires, and then moves (to this life, or another worker).
        # The index first keeps the broker's name order, so partitions spread as before.
        self.consumer = f"{self.name}-{uuid.uuid4().hex[:6]}"
        self.known: set[int] = set()  # partitions it is active on whose progress it has read
        self.resync_wanted: set[int] = set()  # re-read these partitions' progress when not in flight
        self.progress_sub = f"progress-{self.name}-{uuid.uuid4().hex[:8]}"
        self.progress_seen: dict[int, int] = {}  # highest committed next read per partition
        self.stuck_since: dict[int, float] = {}
        self.assignment_at = 0.0
        self.last_fetch = time.monotonic()
        self.commit_interval_s = commit_interval_ms / 1000
        self.txn_timeout_ms = txn_timeout_ms
        self.ranges = cfg.ranges()
        self.log_path = worker_log(run_dir, index)
        self.log: TextIO | None = None
        self.stopping = False
        self.arrived = asyncio.Event()  # the prefetcher offered new records
        self.arrived_at = time.monotonic()  # when it first did since the event was cleared
        self.ready_since = time.monotonic()  # when what the last take returned had arrived
        self.committing: Committing | None = None
        self.last_commit_s = math.inf  # how long the last commit took: pipeline only while it is short
        # Commits longer than this stop the pipelining: the next transaction would wait for
        # the one before it so long that it risks its own timeout. A commit longer than the
        # interval still overlaps (as a Kafka client's next batch overlaps its commit): under
        # load, or with a backlog's full transactions, commits take about an interval.
        self.fetch_max = fetch_max
        self.pipeline_limit_s = max(self.commit_interval_s, txn_timeout_ms / 1000 / 5)
        self.buf: ReorderBuffer[Held] = ReorderBuffer()
        self.timing: defaultdict[str, float] = defaultdict(float)  # seconds per phase, this transaction

    # -- the transaction log of this worker ------------------------------------------
    def _log(self, txn: str, outcome: str, **kw: Any) -> None:
        assert self.log is not None
        self.log.write(json.dumps({"txn": txn, "o": outcome, "t": time.time(), **kw},
                                  separators=(",", ":")) + "\n")
        self.log.flush()

    async def _resolve(self, txn: str, *, commit: bool) -> bool:
        """Drive ``txn`` to an end; True if it committed. Retries while the TC is away."""
        deadline = time.monotonic() + resolve_give_up_s
        delay = 0.05
        while time.monotonic() < deadline:
            try:
                if commit:
                    await self.rest.commit(txn)
                    return True
                await self.rest.abort(txn)
                return False
            except NotFoundError:
                return False  # the TC never made it durable: nothing of it can commit
            except ConflictError:
                if commit:
                    return False  # aborted, aborting or timed out
                # abort refused: it is committing or committed; wait for the end.
                with contextlib.suppress(StreamtxError):
                    state = await self.rest.txn_state(txn)
                    if state == "COMMITTED":
                        return True
                    if state in ("ABORTED", "TIMEOUT"):
                        return False
            except StreamtxError:
                pass
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 1.0)
        raise Uncertain(txn)

    async def resolve_orphans(self) -> None:
        last: dict[str, str] = {}
        for line in read_jsonl(self.log_path):
            last[line["txn"]] = line["o"]
        for txn, outcome in last.items():
            if outcome in ("open", "wrote", "committing"):
                committed = await self._resolve(txn, commit=False)
                self._log(txn, "committed" if committed else "aborted", n=-1, why="orphan of a previous life")

    # -- progress: where the last committed transaction of a partition ended -------------
    async def read_progress(self, partitions: list[int]) -> None:
        """Read what is new on the progress topic's ``partitions`` into ``progress_seen``
        (one subscription for the worker's life, read on: each partition's records are
        read once, the highest next kept)."""
        empty_wait_ms = 50  # a fetch that waited this long and found nothing: read to the end
        while True:
            msgs = await retry_retriable(lambda: self.rest.fetch(
                self.cfg.progress_topic, self.progress_sub, self.name, 1000, empty_wait_ms,
                partitions=partitions))
            if not msgs:
                return
            for m in msgs:
                d = json.loads(m.value)
                p = int(d["p"])
                self.progress_seen[p] = max(self.progress_seen.get(p, 0), int(d["next"]))
            with contextlib.suppress(StreamtxError):  # only trims the topic
                await self.rest.ack(self.cfg.progress_topic, self.progress_sub, last_per_partition(msgs),
                                    cumulative=True)

    async def acquire(self, partitions: list[int]) -> None:
        """Partitions newly handed to this worker: resume each at its committed progress."""
        await self.read_progress(partitions)
        for p in partitions:
            self.known.add(p)
            if self.buf.in_flight(p):  # an uncommitted transaction of ours still has some
                self.resync_wanted.add(p)
            else:
                self.buf.resync(p, self.progress_seen.get(p, 0))
        print(f"{self.name}: took over partitions {partitions}, resuming at "
              f"{ {p: self.buf.committed.get(p) for p in partitions} }", flush=True)

    async def sync_partitions(self) -> None:
        """Forget partitions that moved away, and re-read the progress of those that need it."""
        now = time.monotonic()
        if now - self.assignment_at >= assignment_check_s:
            self.assignment_at = now
            with contextlib.suppress(StreamtxError):
                mine = set(await self.rest.assigned(self.cfg.source_topic, self.sub, self.consumer))
                for p in sorted(self.known - mine):
                    self.known.discard(p)
                    self.resync_wanted.discard(p)
                    self.buf.drop(p)
                    print(f"{self.name}: partition {p} moved away", flush=True)
        stuck = set(self.buf.stuck())
        for p in list(self.stuck_since):
            if p not in stuck:
                del self.stuck_since[p]
        for p in stuck:
            since = self.stuck_since.setdefault(p, now)
            if now - since >= resync_after_s:
                self.resync_wanted.add(p)
                self.stuck_since[p] = now
        await self.catch_up()

    async def catch_up(self) -> None:
        """Re-read the progress of the partitions that want it, and adopt it (those with
        nothing in flight: the transaction loop calls this before it takes again, so a
        partition another worker advanced is not taken again from a stale start)."""
        wanted = sorted(p for p in self.resync_wanted if p in self.known and not self.buf.in_flight(p))
        if not wanted:
            return
        await self.read_progress(wanted)
        for p in wanted:
            if p in self.known and not self.buf.in_flight(p):  # still true after the await
                self.buf.resync(p, self.progress_seen.get(p, 0))
                self.resync_wanted.discard(p)

    # -- the loop -----------------------------------------------------------------------
    async def fetch(self, wait_ms: int) -> list[Fetched]:
        t0 = self.last_fetch = time.monotonic()
        try:
            # The Failover subscription hands out only the partitions we are active on.
            got = await self.rest.fetch(self.cfg.source_topic, self.sub, self.consumer, self.fetch_max,
                                        wait_ms)
            self.timing["fetch"] += time.monotonic() - t0 - (wait_ms / 1000 if not got else 0)
            self.timing["fetched"] += len(got)
            return got
        except StreamtxError as exc:
            print(f"{self.name}: fetch failed ({type(exc).__name__}); leaving the subscription",
                  file=sys.stderr, flush=True)
            # A fetch that timed out may have been answered: the broker handed its records
            # to us, and a Failover subscription never redelivers to a consumer that stays
            # (no ack timeout). Leaving makes the broker hand them out again, in order, to
            # whoever is active on their partitions next (we rejoin with the next fetch).
            with contextlib.suppress(StreamtxError):
                await self.rest.close_consumer(self.cfg.source_topic, self.sub, self.consumer)
            await asyncio.sleep(0.1)
            return []

    def offer(self, msgs: list[Fetched]) -> list[str]:
        """Put fetched records of partitions we hold in the buffer. Return copies of records
        a committed transaction already wrote (stale: to ack outside any transaction)."""
        stale: list[str] = []
        for m in msgs:
            rec = decode(m.value)
            if m.partition not in self.known:
                continue  # it moved away while the fetch ran: its new owner gets it
            if not self.buf.offer(rec.src_partition, rec.seq, Held(m.message_id, rec, m.value)):
                # A copy of a record the open transaction wrote is left alone: its ack
                # belongs to that transaction, which may still abort.
                if self.buf.is_committed(rec.src_partition, rec.seq):
                    stale.append(m.message_id)
        return stale

    async def ack_stale(self, stale: list[str]) -> None:
        """Already written: ack outside any transaction (a copy at an already acked position
        may get 409: fine; a failure: redelivered later)."""
        t0 = time.monotonic()
        with contextlib.suppress(StreamtxError):
            await self.rest.ack(self.cfg.source_topic, self.sub, stale)
        self.timing["ack_other"] += time.monotonic() - t0

    async def begin(self) -> str:
        txn = str(await retry_retriable(lambda: self.rest.begin(self.txn_timeout_ms),
                                        give_up_s=resolve_give_up_s))
        self._log(txn, "open")
        return txn

    async def write(self, txn: str, ready: list[tuple[int, int, Held]], *, sub: str | None = None) -> None:
        """Produce the records to their ranges and ack their sources, in ``txn``, in
        requests of at most ``write_chunk`` records."""
        props = {"txn": txn, "w": self.name}
        for i in range(0, len(ready), write_chunk):
            chunk = ready[i:i + write_chunk]
            messages = [
                {"key": h.record.key, "value": h.value, "properties": props,
                 "partition": self.ranges.partition_of(h.record.user_id)}
                for _, _, h in chunk
            ]
            # Both finish before we go on, failed or not: an ack still in flight when the
            # transaction aborts could land after the abort (a late ack).
            results = await asyncio.gather(
                self.rest.produce(self.cfg.dest_topic, messages, txn),
                self.rest.ack(self.cfg.source_topic, sub or self.sub, [h.message_id for *_, h in chunk], txn),
                return_exceptions=True,
            )
            for r in results:
                if isinstance(r, BaseException):
                    raise r

    async def ack_positions(self, txn: str, taken: list[tuple[int, int, Held]]) -> None:
        """Ack the records' sources in ``txn``: per partition, the first record individually
        and everything up to the last cumulatively (the fence: see the module doc)."""
        first: dict[int, str] = {}
        last: dict[int, str] = {}
        for p, _, h in taken:  # a partition's records are taken in sequence (= position) order
            first.setdefault(p, h.message_id)
            last[p] = h.message_id
        results = await asyncio.gather(
            self.rest.ack(self.cfg.source_topic, self.sub, list(first.values()), txn),
            self.rest.ack(self.cfg.source_topic, self.sub, list(last.values()), txn, cumulative=True),
            return_exceptions=True,
        )
        for r in results:
            if isinstance(r, BaseException):
                raise r

    async def produce_outputs(self, txn: str, taken: list[tuple[int, int, Held]]) -> None:
        """Produce every record of ``txn`` to its range's partition, in requests of at most
        ``write_chunk`` records: each carries one section per destination partition (the
        broker appends them in parallel, a partition's records in order), so a
        transaction's outputs are one hop, not one per partition."""
        props = {"txn": txn, "w": self.name}
        partition_of = self.ranges.partition_of
        for i in range(0, len(taken), write_chunk):
            await self.rest.produce(self.cfg.dest_topic, [
                {"key": h.record.key, "value": h.value, "properties": props,
                 "partition": partition_of(h.record.user_id)}
                for _, _, h in taken[i:i + write_chunk]
            ], txn)

    async def prefetch(self) -> None:
        """Fetch all the time, so reading overlaps writing: take over partitions handed to
        us, offer what comes to the buffer, ack stale copies in the background, wake the
        transaction loop."""
        acking: set[asyncio.Task[None]] = set()
        while not self.stopping:
            if self.buf.held() > max_held and time.monotonic() - self.last_fetch < keepalive_s:
                await asyncio.sleep(0.05)  # a gap holds back many records: let it fill first
                continue
            try:
                await self.sync_partitions()
            except StreamtxError:
                await asyncio.sleep(0.1)
            msgs = await self.fetch(200)
            if not msgs:
                continue
            new = sorted({m.partition for m in msgs} - self.known)
            if new:
                try:
                    await self.acquire(new)
                except StreamtxError:
                    continue  # not offered, not acked: they come back
            stale = self.offer(msgs)
            if stale:
                if len(acking) >= 8:
                    await asyncio.wait(acking, return_when=asyncio.FIRST_COMPLETED)
                task = asyncio.create_task(self.ack_stale(stale))
                acking.add(task)
                task.add_done_callback(acking.discard)
            if not self.arrived.is_set():
                self.arrived_at = time.monotonic()
                self.arrived.set()

    async def ready(self, timeout_s: float, limit: int) -> list[tuple[int, int, Held]]:
        """What can be written in order now (at most ``limit``), waiting up to ``timeout_s``."""
        since = self.arrived_at if self.arrived.is_set() else time.monotonic()
        self.arrived.clear()
        ready = self.buf.take_ready(limit)
        if not ready and timeout_s > 0 and limit > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), timeout_s)
            since = self.arrived_at if self.arrived.is_set() else time.monotonic()
            ready = self.buf.take_ready(limit)
        self.ready_since = since
        return ready

    async def one_transaction(self) -> None:
        """Wait for records, then run one transaction over one commit interval. Its commit
        runs in the background while the next transaction writes (pipelining); a
        transaction asks to commit only once the one before it has committed."""
        held_since = time.monotonic()
        ready: list[tuple[int, int, Held]] = []
        while not ready:
            if self.committing is not None and self.committing.task.done():
                await self.settle()
            if self.stopping:
                return
            if self.resync_wanted:
                try:
                    await self.catch_up()
                except StreamtxError:
                    await asyncio.sleep(0.1)
                    continue
            ready = await self.ready(0.5, max_txn_records)
            # Records that came while no transaction took them have waited since then.
            first_ready_at = self.ready_since
            if not ready and self.buf.held() and time.monotonic() - held_since > stall_exit_s:
                raise Uncertain(f"{self.buf.held()} records held, none in order for {stall_exit_s}s")
        c = self.committing
        slow = max(self.last_commit_s, time.monotonic() - c.started if c is not None else 0.0)
        if c is not None and slow > self.pipeline_limit_s:
            # Commits are slow: a transaction opened now would wait for this one past the
            # point where overlapping helps, and could time out waiting. Settle first.
            if not await self.settle():
                return  # rolled back, ``ready`` included: the next transaction takes them again
        txn = await self.begin()
        taken: list[tuple[int, int, Held]] = []
        try:
            cfg = self.cfg
            registered = set(self.known)  # their progress partitions, registered now
            partitions = [
                *(full_name(partition_name(cfg.dest_topic, d)) for d in range(cfg.dest_partitions)),
                *(full_name(partition_name(cfg.progress_topic, p)) for p in sorted(registered)),
            ]
            subs = [(full_name(cfg.source_topic), self.sub)]
            await asyncio.gather(
                self.rest.add_partitions(txn, partitions), self.rest.add_subscriptions(txn, subs)
            )
            # The interval counts from when the first records were in hand, not from after
            # begin and the registrations: it bounds how long a record waits for its commit.
            deadline = first_ready_at + self.commit_interval_s
            write_gap_s = min(max_write_gap_s, self.commit_interval_s / 4)
            while True:
                t0 = time.monotonic()
                final = (deadline <= t0 or self.stopping
                         or len(taken) + len(ready) >= max_txn_records)
                taken.extend(ready)
                if final:
                    # The one before must have ended first: the pending-ack store lets one
                    # open transaction at a time hold a partition's cumulative ack.
                    if not await self.settle():
                        await self.give_up(txn, taken, "the transaction before it aborted")
                        return
                    self._log(txn, "wrote", n=len(taken))  # it does something now
                    late = sorted({p for p, _, _ in taken} - registered)
                    if late:
                        await self.rest.add_partitions(
                            txn, [full_name(partition_name(cfg.progress_topic, p)) for p in late])
                    # Outputs, progress and acks go at the end: a destination partition's
                    # readers see nothing past the first record of a transaction still
                    # open there (read-committed), so outputs written all through the
                    # interval would hold back the other workers' committed records too.
                    # All finish before we go on, failed or not: an ack still in flight
                    # when the transaction aborts could land after the abort (a late ack).
                    t0 = time.monotonic()
                    results = await asyncio.gather(
                        self.ack_positions(txn, taken), self.produce_outputs(txn, taken),
                        self.write_progress(txn), return_exceptions=True)
                    for r in results:
                        if isinstance(r, BaseException):
                            raise r
                    self.timing["write"] += time.monotonic() - t0
                    break
                # Take in a few larger steps, not one per fetch; everything is written
                # at the deadline, so nothing waits for the next txn.
                pause = min(t0 + write_gap_s, deadline) - time.monotonic()
                if ready and pause > 0 and self.buf.held() < write_chunk:
                    await asyncio.sleep(pause)
                remaining = deadline - time.monotonic()
                ready = await self.ready(max(remaining, 0.0), max_txn_records - len(taken))
        except StreamtxError as exc:
            await self.settle()  # the one before first: its outcome decides what to undo
            await self.give_up(txn, taken, f"{type(exc).__name__}: {exc}"[:300])
            return
        if not await self.settle():
            # The one before aborted; this one builds on its progress: abort it too.
            await self.give_up(txn, taken, "the transaction before it aborted")
            return
        self.buf.seal()
        self._log(txn, "committing")
        timing, self.timing = self.timing, defaultdict(float)
        self.committing = Committing(txn, taken, timing, asyncio.create_task(self._commit(txn)))

    async def write_progress(self, txn: str) -> None:
        """The next sequence number of every partition this transaction advanced, to the progress topic."""
        progress = [
            {"key": f"p{p}", "value": json.dumps({"p": p, "next": n}).encode(),
             "properties": {"txn": txn}, "partition": p}
            for p, n in self.buf.tentative().items() if n != self.buf.committed.get(p)
        ]
        if progress:
            await self.rest.produce(self.cfg.progress_topic, progress, txn)

    async def _commit(self, txn: str) -> tuple[bool, float]:
        t0 = time.monotonic()
        committed = await self._resolve(txn, commit=True)
        return committed, time.monotonic() - t0

    async def settle(self) -> bool:
        """Wait for the transaction being committed, if any, and apply its outcome. False
        when it did not commit: then everything not committed has been rolled back."""
        c, self.committing = self.committing, None
        if c is None:
            return True
        committed, commit_s = await c.task
        self.last_commit_s = commit_s
        timing = {k: round(v * 1000) if k != "fetched" else int(v) for k, v in c.timing.items()}
        if committed:
            self.buf.commit_oldest()
            # How old its records were when the commit was asked: the rest of their
            # end-to-end latency is the commit and the reader.
            sent = [h.record.sent_at_ms for *_, h in c.taken]
            at = c.started_wall_ms
            ages = {"age_max": round(at - min(sent)), "age_min": round(at - max(sent))} if sent else {}
            self._log(c.txn, "committed", n=len(c.taken), commit=round(commit_s * 1000), **timing, **ages)
            return True
        self.buf.rollback(keep=self.known)
        self.resync_wanted |= self.known  # refused: another worker may have written these
        self._log(c.txn, "refused", n=len(c.taken), why="commit refused",
                  r=[[p, s] for p, s, _ in c.taken])
        return False

    async def give_up(self, txn: str, taken: list[tuple[int, int, Held]], why: str) -> None:
        """Abort ``txn`` (no commit of it was asked) and undo what it took."""
        committed = await self._resolve(txn, commit=False)
        self.timing = defaultdict(float)
        if committed:  # cannot happen: nobody asked to commit it; trust the coordinator anyway
            self.buf.commit()
            self._log(txn, "committed", n=len(taken))
        else:
            self.buf.rollback(keep=self.known)
            self.resync_wanted |= self.known  # a conflict may mean another worker wrote these
            self._log(txn, "aborted", n=len(taken), why=why, r=[[p, s] for p, s, _ in taken])

    async def run_shared(self) -> None:
        """The naive job, for contrast (``--assignment shared``): every worker consumes the
        one Shared subscription ``reshard`` and writes what it gets, in arrival order, in
        one transaction per interval. Transactions alone keep it free of lost writes and
        duplicates; the order of a user's records is another matter (the checker reports
        ``nonmonotonic``)."""
        sub, cfg = self.cfg.subscription, self.cfg
        await retry_retriable(lambda: self.rest.subscribe(cfg.source_topic, sub, "earliest"))
        partitions = [full_name(partition_name(cfg.dest_topic, d)) for d in range(cfg.dest_partitions)]
        print(f"{self.name}: shares subscription {sub} with the other workers", flush=True)
        while not self.stopping:
            msgs = await self.rest_fetch_shared(500)
            if not msgs:
                continue
            txn = await self.begin()
            taken: list[tuple[int, int, Held]] = []
            try:
                await asyncio.gather(self.rest.add_partitions(txn, partitions),
                                     self.rest.add_subscriptions(txn, [(full_name(cfg.source_topic), sub)]))
                deadline = time.monotonic() + self.commit_interval_s
                while msgs:
                    held = [Held(m.message_id, r, m.value) for m in msgs for r in [decode(m.value)]]
                    ready = [(h.record.src_partition, h.record.seq, h) for h in held]
                    await self.write(txn, ready, sub=sub)
                    taken.extend(ready)
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or self.stopping or len(taken) >= max_txn_records:
                        break
                    msgs = await self.rest_fetch_shared(int(min(remaining, 0.2) * 1000))
            except StreamtxError as exc:
                committed = await self._resolve(txn, commit=False)
                self._log(txn, "committed" if committed else "aborted", n=len(taken),
                          why=f"{type(exc).__name__}: {exc}"[:300], r=[[p, s] for p, s, _ in taken])
                continue
            self._log(txn, "committing")
            committed = await self._resolve(txn, commit=True)
            self._log(txn, "committed" if committed else "refused", n=len(taken),
                      **({} if committed else {"r": [[p, s] for p, s, _ in taken]}))

    async def rest_fetch_shared(self, wait_ms: int) -> list[Fetched]:
        try:
            cfg = self.cfg
            return await self.rest.fetch(cfg.source_topic, cfg.subscription, self.name, 1000, wait_ms)
        except StreamtxError:
            await asyncio.sleep(0.1)
            return []

    async def run(self, *, shared: bool = False) -> None:
        with self.log_path.open("a") as self.log:
            await self.resolve_orphans()
            if shared:
                await self.run_shared()
                return
            await retry_retriable(lambda: self.rest.subscribe(self.cfg.progress_topic, self.progress_sub,
                                                              "earliest", "Exclusive"))
            await retry_retriable(lambda: self.rest.subscribe(self.cfg.source_topic, self.sub, "earliest",
                                                              "Failover"))
            print(f"{self.name}: owns the partitions {self.sub} (Failover) gives it", flush=True)
            fetching = asyncio.create_task(self.prefetch())
            try:
                while not self.stopping:
                    await self.one_transaction()
                await self.settle()
            finally:
                fetching.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await fetching


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--broker", required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--commit-interval-ms", type=int, default=500)
    parser.add_argument("--txn-timeout-ms", type=int, default=10_000)
    parser.add_argument("--assignment", choices=("failover", "shared"), default="failover")
    parser.add_argument("--loop", choices=LOOPS, default="uvloop")
    parser.add_argument("--fetch-max", type=int, default=fetch_max, help="records per fetch")
    args = parser.parse_args(argv)
    cfg = RunConfig.load(args.run_dir)

    async def go() -> int:
        rest = Rest(args.coordinator, args.broker, timeout_s=5.0)
        worker = Worker(cfg, args.run_dir, rest, args.index, args.workers, args.commit_interval_ms,
                        args.txn_timeout_ms)
        worker.fetch_max = args.fetch_max

        def stop() -> None:
            worker.stopping = True

        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop)
        try:
            await worker.run(shared=args.assignment == "shared")
        except Uncertain as exc:
            print(f"{worker.name}: exiting to restart clean: {exc}", file=sys.stderr, flush=True)
            return 3
        finally:
            await rest.aclose()
        return 0

    code = run_async(go(), args.loop)
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
