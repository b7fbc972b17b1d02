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
import math
import os
import signal
import sys
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from streamtx.demo.intake import Held, Intake, fetch_max
from streamtx.demo.layout import RunConfig, worker_consumer, worker_log
from streamtx.demo.outputs import Outputs, max_txn_records, write_chunk
from streamtx.demo.procs import LOOPS, run_async
from streamtx.demo.reorder import ReorderBuffer
from streamtx.demo.rest import Rest, full_name, partition_name, retry_retriable
from streamtx.demo.shared_job import SharedJob
from streamtx.demo.txnlog import Uncertain
from streamtx.errors import StreamtxError
from streamtx.service import startclock
from streamtx.service.serve import tune_gc

stall_exit_s = 30.0  # records held, none ready this long: exit and re-read the progress
max_write_gap_s = 0.1  # within a transaction, write at most this often (a quarter interval if shorter)


@dataclass
class Committing:
    """A transaction whose commit runs in the background."""

    txn: str
    taken: list[tuple[int, int, Held]]
    timing: defaultdict[str, float]
    task: asyncio.Task[tuple[bool, float, float]]  # committed, seconds taken, wall time of the answer
    started: float = field(default_factory=time.monotonic)
    started_wall_ms: float = field(default_factory=lambda: time.time() * 1000)


class Worker(SharedJob, Intake, Outputs):
    """One resharding worker: its state, the transaction loop and the pipelined commits; the
    intake (:mod:`.intake`), the writes (:mod:`.outputs`), the transaction log
    (:mod:`.txnlog`) and the contrasting Shared job (:mod:`.shared_job`) are its mixins."""

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
        self.assignment_at = -math.inf  # the first check runs at once, however young the machine's clock
        self.last_fetch = time.monotonic()
        self.commit_interval_s = commit_interval_ms / 1000
        self.txn_timeout_ms = txn_timeout_ms
        self.ranges = cfg.ranges()
        self.log_path = worker_log(run_dir, index)
        self.consumer_path = worker_consumer(run_dir, index)
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
                    # Encoded while the one before commits: the worker is idle meanwhile.
                    sends = self.prepare_outputs(txn, taken)
                    # Outputs, progress and acks go at the end: a destination partition's
                    # readers see nothing past the first record of a transaction still
                    # open there (read-committed), so outputs written all through the
                    # interval would hold back the other workers' committed records too.
                    # The outputs go while the one before commits (they follow its outputs
                    # in every partition, and are invisible if either aborts): a worker's
                    # writes and commits alternated, each waiting for the other.
                    t0 = time.monotonic()
                    producing = asyncio.ensure_future(self.produce_outputs(sends))
                    try:
                        # The acks wait for the one before to end: the pending-ack store
                        # lets one open transaction at a time hold a partition's cumulative ack.
                        settled = await self.settle()
                    except BaseException:
                        await asyncio.gather(producing, return_exceptions=True)
                        raise
                    if not settled:
                        # All finish before the abort, failed or not: a write still in flight
                        # when the transaction aborts could land after it.
                        await asyncio.gather(producing, return_exceptions=True)
                        await self.give_up(txn, taken, "the transaction before it aborted")
                        return
                    self._log(txn, "wrote", n=len(taken))  # it does something now
                    late = sorted({p for p, _, _ in taken} - registered)
                    if late:
                        try:
                            await self.rest.add_partitions(
                                txn, [full_name(partition_name(cfg.progress_topic, p)) for p in late])
                        except BaseException:
                            await asyncio.gather(producing, return_exceptions=True)
                            raise
                    # All finish before we go on, failed or not: an ack still in flight
                    # when the transaction aborts could land after the abort (a late ack).
                    results = await asyncio.gather(
                        self.ack_positions(txn, taken), producing,
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

    async def _commit(self, txn: str) -> tuple[bool, float, float]:
        t0 = time.monotonic()
        committed = await self._resolve(txn, commit=True)
        return committed, time.monotonic() - t0, time.time()

    async def settle(self) -> bool:
        """Wait for the transaction being committed, if any, and apply its outcome. False
        when it did not commit: then everything not committed has been rolled back."""
        c, self.committing = self.committing, None
        if c is None:
            return True
        committed, commit_s, answered_at = await c.task
        self.last_commit_s = commit_s
        timing = {k: round(v * 1000) if k != "fetched" else int(v) for k, v in c.timing.items()}
        if committed:
            self.buf.commit_oldest()
            # How old its records were when the commit was asked: the rest of their
            # end-to-end latency is the commit and the reader.
            at = c.started_wall_ms
            ages = ({"age_max": round(at - min(h[2] for *_, h in c.taken)),
                     "age_min": round(at - max(h[2] for *_, h in c.taken))} if c.taken else {})
            # ``at``: when the commit was answered (this line is written when the loop next
            # looks, up to a fetch's wait later); a job's window ends there (bench/peer.py).
            self._log(c.txn, "committed", n=len(c.taken), p=sorted({p for p, _, _ in c.taken}),
                      commit=round(commit_s * 1000), at=answered_at, **timing, **ages)
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

    async def fence_previous_life(self) -> None:
        """Close the Failover consumer of this worker's previous life (its transactions are
        ended already): the broker hands its partitions, with what it had out, to a live
        consumer at once, as Kafka's InitProducerId fences a restarted producer's previous
        epoch. Left alone, the dead consumer stayed active on its partitions until it had been
        silent for the broker's failover_idle_ms, and the restart joined as a third consumer."""
        try:
            previous = self.consumer_path.read_text().strip()
        except OSError:
            previous = ""
        if previous and previous != self.consumer:
            try:
                await retry_retriable(
                    lambda: self.rest.close_consumer(self.cfg.source_topic, self.sub, previous),
                    give_up_s=self.txn_timeout_ms / 1000)
            except StreamtxError as exc:  # unknown to the broker (restarted meanwhile): nothing held
                print(f"{self.name}: previous consumer {previous} not closed ({type(exc).__name__})",
                      file=sys.stderr, flush=True)
        self.consumer_path.write_text(self.consumer + "\n")

    async def run(self, *, shared: bool = False) -> None:
        with self.log_path.open("a") as self.log:
            await self.resolve_orphans()
            startclock.mark("orphans-ended")
            if shared:
                await self.run_shared()
                return
            await retry_retriable(lambda: self.rest.subscribe(self.cfg.progress_topic, self.progress_sub,
                                                              "earliest", "Exclusive"))
            await retry_retriable(lambda: self.rest.subscribe(self.cfg.source_topic, self.sub, "earliest",
                                                              "Failover"))
            await self.fence_previous_life()
            startclock.mark("subscribed")
            print(f"{self.name}: owns the partitions {self.sub} (Failover) gives it; "
                  f"{startclock.startup_line()}", flush=True)
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
    startclock.mark("imported")
    cfg = RunConfig.load(args.run_dir)
    tune_gc()  # as the services: a record's objects made the default thresholds collect often

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
