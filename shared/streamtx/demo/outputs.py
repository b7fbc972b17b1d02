"""What a demo worker's transaction writes at its end: the outputs, the source acks, the progress.

The produce side of the worker, apart from the transaction loop that decides
when: every record to its range's partition of the destination topic, the acks
of the sources (per partition the first record individually and the last
cumulatively: the fence of :mod:`streamtx.demo.worker`'s doc), and the next
sequence number of every partition the transaction advanced. A mixin of
:class:`streamtx.demo.worker.Worker`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from streamtx.demo.intake import Held
from streamtx.demo.layout import RunConfig
from streamtx.demo.partitioner import RangePartitioner
from streamtx.demo.reorder import ReorderBuffer
from streamtx.demo.rest import Rest
from streamtx.wire.batch import Msg

write_chunk = 10_000  # records per produce / ack request (the broker takes at most 10,000): one hop each
Send = Callable[[], Awaitable[list[str]]]  # a produce encoded, to send
# A backlog is worked off in bounded transactions, well within the timeout: about what a Kafka
# worker commits per 500 ms interval here (45,000); 10,000 left the services idle between commits.
max_txn_records = 40_000


class Outputs:
    """The writes of a transaction (state set by the worker)."""

    cfg: RunConfig
    rest: Rest
    name: str
    sub: str
    ranges: RangePartitioner
    buf: ReorderBuffer[Held]

    async def ack_positions(self, txn: str, taken: list[tuple[int, int, Held]]) -> None:
        """Ack the records' sources in ``txn``: per partition, the first record individually
        and everything up to the last cumulatively (the fence: see :mod:`streamtx.demo.worker`'s doc)."""
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

    def prepare_outputs(self, txn: str, taken: list[tuple[int, int, Held]]) -> list[Send]:
        """The produce requests of every record of ``txn`` to its range's partition, encoded now
        (while the transaction before commits) and sent by :meth:`produce_outputs`; at most
        ``write_chunk`` records each: a request carries one section per destination
        partition (the broker appends them in parallel, a partition's records in order), so
        a transaction's outputs are one hop, not one per partition."""
        props = {"txn": txn, "w": self.name}
        partition_of = self.ranges.partition_of
        return [
            self.rest.prepare_routed(self.cfg.dest_topic, [
                (partition_of(h.record.user_id), Msg(h.value, h.record.key, props))
                for _, _, h in taken[i:i + write_chunk]
            ], txn, ids=False)
            for i in range(0, len(taken), write_chunk)
        ]

    @staticmethod
    async def produce_outputs(sends: list[Send]) -> None:
        """Send what :meth:`prepare_outputs` encoded, one request after the other."""
        for send in sends:
            await send()

    async def write_progress(self, txn: str) -> None:
        """The next sequence number of every partition this transaction advanced, to the progress topic."""
        progress = [
            {"key": f"p{p}", "value": json.dumps({"p": p, "next": n}).encode(),
             "properties": {"txn": txn}, "partition": p}
            for p, n in self.buf.tentative().items() if n != self.buf.committed.get(p)
        ]
        if progress:
            await self.rest.produce(self.cfg.progress_topic, progress, txn)
