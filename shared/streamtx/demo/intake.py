"""A demo worker's intake: which source partitions it owns, where each resumes, and the records in hand.

The fetch side of the worker, apart from the transaction loop: a prefetcher
fetches all the time from the Failover subscription (so reading overlaps
writing), takes over the partitions it is handed at their committed progress
(read from the progress topic), forgets those that moved away, re-reads the
progress of a partition whose head shows a gap, and puts what comes in a
:class:`~streamtx.demo.reorder.ReorderBuffer` from which each transaction takes
what is ready in sequence order (why each piece is there: :mod:`streamtx.demo.worker`).
A mixin of :class:`streamtx.demo.worker.Worker`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections import defaultdict

from streamtx.demo.layout import RunConfig
from streamtx.demo.records import read
from streamtx.demo.reorder import ReorderBuffer
from streamtx.demo.rest import Rest, last_per_partition, retry_retriable
from streamtx.errors import StreamtxError
from streamtx.wire import batch as wire

fetch_max = 10_000  # records per fetch: a backlog comes in a few large answers
max_held = 80_000  # records in hand beyond which prefetching pauses: two full transactions
assignment_check_s = 1.0  # how often a worker asks which partitions are still its own
resync_after_s = 1.0  # a gap at a partition's head this long: re-read its committed progress
keepalive_s = 0.5  # fetch at least this often even when holding many records (Failover liveness)


#: A source record in hand, per record in the reorder buffer: ``(message id, user id, sent
#: at ms, value)``. A plain tuple: a named tuple's constructor cost as much as the record's
#: JSON decode, and a worker holds a backlog's worth of them.
Held = tuple[str, int, int, bytes]


class Intake:
    """Partition ownership, progress reading and prefetching into the reorder buffer (state set
    by the worker)."""

    cfg: RunConfig
    rest: Rest
    name: str
    sub: str
    consumer: str
    known: set[int]
    resync_wanted: set[int]
    progress_sub: str
    progress_seen: dict[int, int]
    stuck_since: dict[int, float]
    assignment_at: float
    last_fetch: float
    fetch_max: int
    stopping: bool
    arrived: asyncio.Event
    arrived_at: float
    ready_since: float
    buf: ReorderBuffer[Held]
    timing: defaultdict[str, float]

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

    # -- fetching into the buffer ------------------------------------------------------
    async def fetch(self, wait_ms: int) -> wire.Values:
        t0 = self.last_fetch = time.monotonic()
        try:
            # The Failover subscription hands out only the partitions we are active on. Values
            # and ids alone: the record's decode is the job's (no message object per record).
            got = await self.rest.fetch_values(self.cfg.source_topic, self.sub, self.consumer,
                                               self.fetch_max, wait_ms, ids=True)
            n = len(got.values)
            self.timing["fetch"] += time.monotonic() - t0 - (wait_ms / 1000 if not n else 0)
            self.timing["fetched"] += n
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
            return wire.Values([], {}, [], [])

    def offer(self, got: wire.Values) -> list[str]:
        """Put fetched records of partitions we hold in the buffer. Return copies of records
        a committed transaction already wrote (stale: to ack outside any transaction)."""
        stale: list[str] = []
        known, offer, committed = self.known, self.buf.offer, self.buf.is_committed
        assert got.ids is not None and got.partitions is not None
        for value, mid, partition in zip(got.values, got.ids, got.partitions, strict=True):
            user, src, seq, sent = read(value)
            if partition not in known:
                continue  # it moved away while the fetch ran: its new owner gets it
            if not offer(src, seq, (mid, user, sent, value)):
                # A copy of a record the open transaction wrote is left alone: its ack
                # belongs to that transaction, which may still abort.
                if committed(src, seq):
                    stale.append(mid)
        return stale

    async def ack_stale(self, stale: list[str]) -> None:
        """Already written: ack outside any transaction (a copy at an already acked position
        may get 409: fine; a failure: redelivered later)."""
        t0 = time.monotonic()
        with contextlib.suppress(StreamtxError):
            await self.rest.ack(self.cfg.source_topic, self.sub, stale)
        self.timing["ack_other"] += time.monotonic() - t0

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
            got = await self.fetch(200)
            if not got.last_ids:
                continue
            new = sorted(got.last_ids.keys() - self.known)
            if new:
                try:
                    await self.acquire(new)
                except StreamtxError:
                    continue  # not offered, not acked: they come back
            stale = self.offer(got)
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
