"""One resharding worker: consume owned source partitions, re-split by user-id range,
produce and ack in one transaction per commit interval.

Run as its own process (``python -m streamtx.demo.worker``); the supervisor runs
several and kill -9s them. Why each piece is there:

- **Ownership.** Worker ``i`` of ``n`` owns the source partitions ``p`` with
  ``p mod n == i``. The broker's subscriptions span every partition of a topic
  (no per-partition Failover or Key_Shared dispatch yet), and a Shared
  subscription spread over all workers would hand one user's records to two
  workers whose transactions commit in either order, breaking the per-user
  order the resharding task demands (docs/background.md). So each worker reads the source through its own
  subscription (``reshard-w<i>``, kept across restarts) and acks what it does
  not own outside any transaction; a single owner per partition keeps order.
- **Order under redelivery.** An abort, an ack timeout or a restart hands records
  back out of order; a :class:`~streamtx.demo.reorder.ReorderBuffer` writes them
  in sequence order, each once.
- **Progress in the transaction.** With its outputs and its acks, each
  transaction writes the next sequence number of every partition it advanced to
  the progress topic, so a restarted worker resumes exactly where its last
  committed transaction ended (and drops source duplicates by sequence number).
- **Failures.** Any error before the commit aborts the transaction and the next
  one redoes the same records (still in hand). A commit whose reply is lost is
  retried until the coordinator answers (commit is idempotent); 409 means the
  transaction was aborted (timed out: a zombie) and nothing of it is visible.
  Every transaction is logged as opened before it is used, so a restarted worker
  first aborts the orphans of its previous life and waits for a COMMITTING one
  to finish before it reads the progress.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
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
from typing import Any, TextIO

from streamtx.demo.layout import RunConfig, read_jsonl, worker_log
from streamtx.demo.records import SearchRecord, decode
from streamtx.demo.reorder import ReorderBuffer
from streamtx.demo.rest import (
    Fetched,
    Rest,
    full_name,
    last_per_partition,
    partition_name,
    position_of,
    retry_retriable,
)
from streamtx.errors import ConflictError, NotFoundError, StreamtxError

resolve_give_up_s = 90.0  # a coordinator down longer than this: exit, the restart resolves it
stall_exit_s = 30.0  # records held, none ready this long: exit and re-read the progress
write_chunk = 2_000  # records per produce / ack request (the broker takes at most 10,000)
max_txn_records = 10_000  # a backlog is worked off in bounded transactions (well within the timeout)
max_held = 50_000  # records in hand beyond which prefetching pauses
max_write_gap_s = 0.1  # within a transaction, write at most this often (a quarter interval if shorter)


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


@dataclass(frozen=True, slots=True)
class Held:
    """A source message in hand."""

    message_id: str
    record: SearchRecord
    value: bytes


class Worker:
    def __init__(self, cfg: RunConfig, run_dir: Path, rest: Rest, index: int, workers: int,
                 commit_interval_ms: int, txn_timeout_ms: int) -> None:
        self.cfg, self.rest, self.index = cfg, rest, index
        self.name = f"worker-{index}"
        self.owned = [p for p in range(cfg.source_partitions) if p % workers == index]
        self.sub = f"{cfg.subscription}-w{index}"
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

    # -- start-up: where the last committed transaction ended ------------------------------
    async def read_progress(self) -> dict[int, int]:
        sub = f"progress-{self.name}-{uuid.uuid4().hex[:8]}"
        nxt = {p: 0 for p in self.owned}
        await retry_retriable(lambda: self.rest.subscribe(self.cfg.progress_topic, sub, "earliest"))
        empty = 0
        while empty < 2:
            msgs = await retry_retriable(
                lambda: self.rest.fetch(self.cfg.progress_topic, sub, self.name, 1000, 300))
            empty = 0 if msgs else empty + 1
            for m in msgs:
                d = json.loads(m.value)
                if d["p"] in nxt:
                    nxt[d["p"]] = max(nxt[d["p"]], int(d["next"]))
            if msgs:  # the only consumer, reading in order: one cumulative ack per partition
                ids = last_per_partition(msgs)
                await retry_retriable(functools.partial(self.rest.ack, self.cfg.progress_topic, sub, ids,
                                               cumulative=True))
        return nxt

    # -- the loop -----------------------------------------------------------------------
    async def fetch(self, wait_ms: int) -> list[Fetched]:
        t0 = time.monotonic()
        try:
            # Only the partitions we own: the broker need not hand out (nor we decode and
            # ack) the other workers' records; our subscription's cursor on those is unused.
            got = await self.rest.fetch(self.cfg.source_topic, self.sub, self.name, 1000, wait_ms,
                                        partitions=self.owned)
            self.timing["fetch"] += time.monotonic() - t0 - (wait_ms / 1000 if not got else 0)
            self.timing["fetched"] += len(got)
            return got
        except StreamtxError:
            await asyncio.sleep(0.1)
            return []

    def offer(self, msgs: list[Fetched]) -> tuple[list[str], list[str]]:
        """Put fetched records of owned partitions in the buffer. Return what to ack outside
        the transaction: the last message of each partition we do not own (everything
        there is someone else's: acked cumulatively), and copies of records a committed
        transaction already wrote (stale: acked one by one)."""
        foreign: dict[int, str] = {}
        stale: list[str] = []
        for m in msgs:
            rec = decode(m.value)
            if rec.src_partition not in self.buf.committed:
                last = foreign.get(m.partition)
                if last is None or position_of(m.message_id) > position_of(last):
                    foreign[m.partition] = m.message_id
            elif not self.buf.offer(rec.src_partition, rec.seq, Held(m.message_id, rec, m.value)):
                # A copy of a record the open transaction wrote is left alone: its ack
                # belongs to that transaction, which may still abort.
                if self.buf.is_committed(rec.src_partition, rec.seq):
                    stale.append(m.message_id)
        return list(foreign.values()), stale

    async def ack_other(self, acks: tuple[list[str], list[str]]) -> None:
        """Not ours, or already written: ack outside any transaction (a copy at an
        already acked position may get 409: fine; a failure: redelivered later)."""
        foreign, stale = acks
        t0 = time.monotonic()
        for ids, cumulative in ((foreign, True), (stale, False)):
            if ids:
                with contextlib.suppress(StreamtxError):
                    await self.rest.ack(self.cfg.source_topic, self.sub, ids, cumulative=cumulative)
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

    async def ack_inputs(self, txn: str, ready: list[tuple[int, int, Held]]) -> None:
        """Ack the records' sources in ``txn``, in requests of at most ``write_chunk`` ids."""
        for i in range(0, len(ready), write_chunk):
            ids = [h.message_id for *_, h in ready[i:i + write_chunk]]
            await self.rest.ack(self.cfg.source_topic, self.sub, ids, txn)

    async def produce_outputs(self, txn: str, taken: list[tuple[int, int, Held]]) -> None:
        """Produce every record of ``txn`` to its range's partition: one request per
        destination partition, in parallel (a partition's records stay in order)."""
        props = {"txn": txn, "w": self.name}
        by_dest: defaultdict[int, list[dict[str, Any]]] = defaultdict(list)
        for _, _, h in taken:
            d = self.ranges.partition_of(h.record.user_id)
            by_dest[d].append({"key": h.record.key, "value": h.value, "properties": props, "partition": d})
        results = await asyncio.gather(
            *(self.rest.produce(self.cfg.dest_topic, msgs, txn) for msgs in by_dest.values()),
            return_exceptions=True,
        )
        for r in results:
            if isinstance(r, BaseException):
                raise r

    async def prefetch(self) -> None:
        """Fetch all the time, so reading overlaps writing: offer what comes to the buffer,
        ack what is not ours in the background, wake the transaction loop."""
        acking: set[asyncio.Task[None]] = set()
        while not self.stopping:
            if self.buf.held() > max_held:
                await asyncio.sleep(0.05)  # a gap holds back many records: let it fill first
                continue
            msgs = await self.fetch(200)
            if not msgs:
                continue
            foreign, stale = self.offer(msgs)
            if foreign or stale:
                if len(acking) >= 8:
                    await asyncio.wait(acking, return_when=asyncio.FIRST_COMPLETED)
                task = asyncio.create_task(self.ack_other((foreign, stale)))
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
            ready = await self.ready(0.5, max_txn_records)
            # Records that came while no transaction took them have waited since then.
            first_ready_at = self.ready_since
            if not ready and self.buf.held() and time.monotonic() - held_since > stall_exit_s:
                raise Uncertain(f"{self.buf.held()} records held, none in order for {stall_exit_s}s")
        c = self.committing
        slow = max(self.last_commit_s, time.monotonic() - c.started if c is not None else 0.0)
        if c is not None and slow > self.commit_interval_s:
            # Commits are slow: a transaction opened now would wait for this one past the
            # point where overlapping helps, and could time out waiting. Settle first.
            if not await self.settle():
                return  # rolled back, ``ready`` included: the next transaction takes them again
        txn = await self.begin()
        taken: list[tuple[int, int, Held]] = []
        try:
            cfg = self.cfg
            partitions = [
                *(full_name(partition_name(cfg.dest_topic, d)) for d in range(cfg.dest_partitions)),
                *(full_name(partition_name(cfg.progress_topic, p)) for p in self.owned),
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
                writes = [self.ack_inputs(txn, ready)] if ready else []
                taken.extend(ready)
                if final:
                    # The outputs go at the end, with the progress: a destination
                    # partition's readers see nothing past the first record of a
                    # transaction still open there (read-committed), so outputs written
                    # all through the interval would hold back the other workers'
                    # committed records too, by up to an interval.
                    writes += [self.produce_outputs(txn, taken), self.write_progress(txn)]
                # Both finish before we go on, failed or not: an ack still in flight when
                # the transaction aborts could land after the abort (a late ack).
                results = await asyncio.gather(*writes, return_exceptions=True)
                for r in results:
                    if isinstance(r, BaseException):
                        raise r
                if ready:
                    self.timing["write"] += time.monotonic() - t0
                    if len(taken) == len(ready):
                        self._log(txn, "wrote", n=len(ready))  # it has done something now
                if final:
                    break
                # A few larger writes, not one per fetch: every request costs the broker
                # (and, for the acks, the pending-ack store) far more than a record does.
                # The last write happens at the deadline, so nothing waits for the next txn.
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
        self.buf.rollback()
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
            self.buf.rollback()
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
            self.buf = ReorderBuffer(committed=await self.read_progress())
            await retry_retriable(lambda: self.rest.subscribe(self.cfg.source_topic, self.sub, "earliest"))
            print(f"{self.name}: owns {self.owned}, resumes at {self.buf.committed}", flush=True)
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
    parser.add_argument("--assignment", choices=("owned", "shared"), default="owned")
    args = parser.parse_args(argv)
    cfg = RunConfig.load(args.run_dir)

    async def go() -> int:
        rest = Rest(args.coordinator, args.broker, timeout_s=5.0)
        worker = Worker(cfg, args.run_dir, rest, args.index, args.workers, args.commit_interval_ms,
                        args.txn_timeout_ms)

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

    code = asyncio.run(go())
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
