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
from streamtx.demo.records import key_bytes
from streamtx.demo.reorder import ReorderBuffer
from streamtx.demo.rest import Rest

write_chunk = 10_000  # records per produce / ack request (the broker takes at most 10,000): one hop each
Send = Callable[[], Awaitable[object]]  # a produce encoded, to send
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
        # A partition's records are taken in sequence (= position) order.
        last = {p: h[0] for p, _, h in taken}
        first = {p: h[0] for p, _, h in reversed(taken)}
        results = await asyncio.gather(
            self.rest.ack(self.cfg.source_topic, self.sub, list(first.values()), txn),
            self.rest.ack(self.cfg.source_topic, self.sub, list(last.values()), txn, cumulative=True),
            return_exceptions=True,
        )
        for r in results:
            if isinstance(r, BaseException):
                raise r

    def prepare_outputs(self, txn: str, taken: list[tuple[int, int, Held]]) -> list[list[Send]]:
        """The produce requests of every record of ``txn`` to its range's partition, encoded now
        (while the transaction before commits) and sent by :meth:`produce_outputs`, as lanes:
        the requests of one lane go one after the other, the lanes side by side. A request
        carries at most ``write_chunk`` records, in one section per destination partition
        (one hop for many partitions), and each partition's records are in one lane, in
        order: whole partitions are packed into requests of a lane each (the broker appends
        them in parallel); a partition with more than a request's worth is a lane of its own."""
        partition_of = self.ranges.partition_of
        by_dest: dict[int, tuple[list[bytes], list[bytes]]] = {}
        for _, _, (_, user, _, value) in taken:
            dest = partition_of(user)
            group = by_dest.get(dest)
            if group is None:
                group = by_dest[dest] = ([], [])
            group[0].append(value)
            group[1].append(key_bytes(user))
        props = {"txn": txn, "w": self.name}

        def request(sections: list[tuple[int, list[bytes], list[bytes]]]) -> Send:
            return self.rest.prepare_keyed(self.cfg.dest_topic, sections, props, txn)

        lanes: list[list[Send]] = []
        packed: list[tuple[int, list[bytes], list[bytes]]] = []
        size = 0
        for dest, (values, keys) in by_dest.items():
            if len(values) > write_chunk:
                lanes.append([request([(dest, values[i:i + write_chunk], keys[i:i + write_chunk])])
                              for i in range(0, len(values), write_chunk)])
                continue
            if size + len(values) > write_chunk:
                lanes.append([request(packed)])
                packed, size = [], 0
            packed.append((dest, values, keys))
            size += len(values)
        if packed:
            lanes.append([request(packed)])
        return lanes

    @staticmethod
    async def produce_outputs(lanes: list[list[Send]]) -> None:
        """Send what :meth:`prepare_outputs` encoded: each lane's requests in order, the lanes
        side by side (all finish, failed or not, before an error is raised: nothing of this
        transaction may still be in flight when it aborts)."""

        async def lane(sends: list[Send]) -> None:
            for send in sends:
                await send()

        results = await asyncio.gather(*(lane(sends) for sends in lanes), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r

    async def write_progress(self, txn: str) -> None:
        """The next sequence number of every partition this transaction advanced, to the progress topic."""
        progress = [
            {"key": f"p{p}", "value": json.dumps({"p": p, "next": n}).encode(),
             "properties": {"txn": txn}, "partition": p}
            for p, n in self.buf.tentative().items() if n != self.buf.committed.get(p)
        ]
        if progress:
            await self.rest.produce(self.cfg.progress_topic, progress, txn)
