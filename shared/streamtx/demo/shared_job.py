"""The naive resharding job, for contrast (``--assignment shared``): one Shared subscription.

Every worker consumes the one Shared subscription and writes what it gets in
arrival order, one transaction per interval: no lost writes, no duplicates, but
a user's records out of order (the checker reports ``nonmonotonic``). Kept apart
from the Failover job it contrasts with (:mod:`streamtx.demo.worker`): the two
share only the transaction log. A mixin of :class:`streamtx.demo.worker.Worker`.
"""

from __future__ import annotations

import asyncio
import time

from streamtx.demo.intake import Held
from streamtx.demo.layout import RunConfig
from streamtx.demo.outputs import max_txn_records, write_chunk
from streamtx.demo.partitioner import RangePartitioner
from streamtx.demo.records import read, user_key
from streamtx.demo.rest import Fetched, full_name, partition_name, retry_retriable
from streamtx.demo.txnlog import TxnLog
from streamtx.errors import StreamtxError


class SharedJob(TxnLog):
    """The Shared-subscription job's loop and writes (state set by the worker)."""

    cfg: RunConfig
    name: str
    sub: str
    stopping: bool
    commit_interval_s: float
    ranges: RangePartitioner

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
                    ready: list[tuple[int, int, Held]] = [
                        (src, seq, (m.message_id, user, sent, m.value))
                        for m in msgs for user, src, seq, sent in [read(m.value)]]
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

    async def write(self, txn: str, ready: list[tuple[int, int, Held]], *, sub: str | None = None) -> None:
        """Produce the records to their ranges and ack their sources, in ``txn``, in
        requests of at most ``write_chunk`` records."""
        props = {"txn": txn, "w": self.name}
        for i in range(0, len(ready), write_chunk):
            chunk = ready[i:i + write_chunk]
            messages = [
                {"key": user_key(user), "value": value, "properties": props,
                 "partition": self.ranges.partition_of(user)}
                for _, _, (_, user, _, value) in chunk
            ]
            # Both finish before we go on, failed or not: an ack still in flight when the
            # transaction aborts could land after the abort (a late ack).
            results = await asyncio.gather(
                self.rest.produce(self.cfg.dest_topic, messages, txn),
                self.rest.ack(self.cfg.source_topic, sub or self.sub, [h[0] for *_, h in chunk], txn),
                return_exceptions=True,
            )
            for r in results:
                if isinstance(r, BaseException):
                    raise r
