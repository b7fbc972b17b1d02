"""The worker's transaction logic against an in-memory suite: order, aborts, refusals, pipelining."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from streamtx.demo import outputs
from streamtx.demo.layout import RunConfig, read_jsonl, worker_log
from streamtx.demo.records import SearchRecord, decode, encode
from streamtx.demo.rest import Fetched, Rest, as_values
from streamtx.demo.worker import Worker
from streamtx.errors import ConflictError, UnavailableError
from streamtx.wire.batch import Values


class FakeSuite:
    """Just enough coordinator and broker: transactions buffer their writes until commit."""

    def __init__(self) -> None:
        self.n = 0
        self.txns: dict[str, dict[str, Any]] = {}
        self.visible: list[dict[str, Any]] = []  # committed destination messages, in order
        self.acked: list[str] = []
        self.refuse: set[str] = set()  # commit of these: 409
        self.fail_produce = 0  # the next N produce calls fail with 503
        self.commit_delay_s = 0.0
        self.conflict_acks = 0  # the next N transactional acks: 409
        self.progress: list[dict[str, int]] = []  # committed progress records not yet read
        self.assignment: list[int] = list(range(8))  # what the Failover subscription gives worker-0
        self.closed: list[str] = []  # Failover consumers closed
        self.encoded: list[list[tuple[int, list[bytes], list[bytes]]]] = []  # produce sections, per request

    async def fetch(self, topic: str, sub: str, consumer: str, max_messages: int = 500, wait_ms: int = 200,
                    partitions: list[int] | None = None) -> list[Fetched]:
        assert topic.startswith("reshard-progress")
        out = [d for d in self.progress if partitions is None or d["p"] in partitions]
        self.progress = [d for d in self.progress if d not in out]
        return [Fetched(f"9:{i}", d["p"], None, json.dumps(d).encode(), {}) for i, d in enumerate(out)]

    async def assigned(self, topic: str, sub: str, consumer: str) -> list[int]:
        return list(self.assignment)

    async def close_consumer(self, topic: str, sub: str, consumer: str) -> None:
        self.closed.append(consumer)

    async def begin(self, timeout_ms: int) -> str:
        self.n += 1
        txn = f"0:{self.n}"
        self.txns[txn] = {"state": "OPEN", "produced": [], "acked": []}
        return txn

    async def add_partitions(self, txn: str, partitions: list[str]) -> None:
        pass

    async def add_subscriptions(self, txn: str, subs: list[tuple[str, str]]) -> None:
        pass

    async def produce(self, topic: str, messages: list[dict[str, Any]], txn_id: str | None = None,
                      producer: dict[str, Any] | None = None) -> list[str]:
        if self.fail_produce:
            self.fail_produce -= 1
            raise UnavailableError("broker down")
        assert txn_id is not None and self.txns[txn_id]["state"] == "OPEN"
        self.txns[txn_id]["produced"] += [{**m, "topic": topic} for m in messages]
        return [f"1:{i}" for i in range(len(messages))]

    def prepare_keyed(self, topic: str, sections: list[tuple[int, list[bytes], list[bytes]]],
                      properties: dict[str, str], txn_id: str) -> Callable[[], Awaitable[list[str]]]:
        messages = [{"key": k.decode(), "value": v, "properties": dict(properties), "partition": p}
                    for p, values, keys in sections for v, k in zip(values, keys, strict=True)]
        self.encoded.append(sections)
        return lambda: self.produce(topic, messages, txn_id)

    async def ack(self, topic: str, sub: str, message_ids: list[str], txn_id: str | None = None,
                  cumulative: bool = False) -> None:
        if topic.startswith("reshard-progress"):
            return  # the worker's own reading of the progress
        if txn_id is not None and self.conflict_acks:
            self.conflict_acks -= 1
            raise ConflictError("message 7:0 is already acknowledged")
        ids = [f"c:{m}" for m in message_ids] if cumulative else message_ids
        if txn_id is None:
            self.acked += ids
        else:
            self.txns[txn_id]["acked"] += ids

    async def commit(self, txn: str) -> None:
        await asyncio.sleep(self.commit_delay_s)
        t = self.txns[txn]
        if txn in self.refuse:
            t["state"] = "ABORTED"
            raise ConflictError("timed out")
        if t["state"] != "COMMITTED":
            t["state"] = "COMMITTED"
            self.visible += t["produced"]
            self.acked += t["acked"]

    async def abort(self, txn: str) -> None:
        if self.txns[txn]["state"] == "COMMITTED":
            raise ConflictError("committed")
        self.txns[txn]["state"] = "ABORTED"

    async def txn_state(self, txn: str) -> str:
        return str(self.txns[txn]["state"])

    def destination(self) -> list[tuple[int, int]]:
        out = []
        for m in self.visible:
            if m["topic"].startswith("search-logs-by-range"):
                r = decode(m["value"])
                out.append((r.src_partition, r.seq))
        return out


def msgs(*seqs: tuple[int, int], user: int = 8) -> Values:
    """Source messages ``(partition, seq)``, as a fetch reads them; users are chosen so
    ``user % 8 == partition``."""
    return as_values([Fetched(f"7:{p * 1000 + s}", p, None, encode(SearchRecord(user + p, p, s, 0, "q")), {})
                      for p, s in seqs])


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[tuple[Worker, FakeSuite]]:
    cfg = RunConfig.new("t", user_space=1000)
    suite = FakeSuite()
    w = Worker(cfg, tmp_path, cast(Rest, suite), index=0, workers=1, commit_interval_ms=20,
               txn_timeout_ms=1000)
    w.buf.committed.update({p: 0 for p in range(8)})
    w.known.update(range(8))
    with worker_log(tmp_path, 0).open("a") as log:
        w.log = log
        yield w, suite


def outcomes(w: Worker) -> list[str]:
    return [line["o"] for line in read_jsonl(w.log_path) if line["o"] in ("committed", "aborted", "refused")]


async def test_out_of_order_delivery_is_written_in_order_once(worker: tuple[Worker, FakeSuite]) -> None:
    w, suite = worker
    w.offer(msgs((0, 2), (0, 1), (1, 0)))
    await w.one_transaction()  # only partition 1's seq 0 is in order
    w.offer(msgs((0, 0), (0, 2)))  # the gap fills; seq 2 arrives twice
    await w.one_transaction()
    await w.settle()
    assert suite.destination() == [(1, 0), (0, 0), (0, 1), (0, 2)]
    progress = [json.loads(m["value"]) for m in suite.visible if m["topic"].startswith("reshard-progress")]
    assert {"p": 0, "next": 3} in progress and {"p": 1, "next": 1} in progress
    assert outcomes(w) == ["committed", "committed"]


def test_outputs_go_in_lanes_that_keep_each_partitions_records_in_order(
    worker: tuple[Worker, FakeSuite], monkeypatch: pytest.MonkeyPatch,
) -> None:
    w, suite = worker
    monkeypatch.setattr(outputs, "write_chunk", 4)
    # Destination partitions of 250 users each: 6 records for 0, then 1, 2, 1, 3, 3.
    users = [0, 1, 2, 3, 4, 5, 300, 600, 301, 900, 901]
    taken = [(0, i, (f"7:{i}", u, 0, b"v%d" % i)) for i, u in enumerate(users)]
    lanes = w.prepare_outputs("0:1", taken)
    assert [len(lane) for lane in lanes] == [2, 1, 1]  # partition 0 alone, over two requests

    def request(*sections: tuple[int, list[int]]) -> list[tuple[int, list[bytes], list[bytes]]]:
        return [(d, [b"v%d" % i for i in idx], [b"u%08d" % users[i] for i in idx]) for d, idx in sections]

    assert suite.encoded == [
        request((0, [0, 1, 2, 3])), request((0, [4, 5])),
        request((1, [6, 8]), (2, [7])),  # whole partitions packed while they fit a request
        request((3, [9, 10])),
    ]


async def test_a_failed_write_aborts_and_the_next_transaction_redoes_it(
    worker: tuple[Worker, FakeSuite],
) -> None:
    w, suite = worker
    w.offer(msgs((0, 0), (0, 1)))
    suite.fail_produce = 1
    await w.one_transaction()
    assert outcomes(w) == ["aborted"] and suite.destination() == []
    await w.one_transaction()
    await w.settle()
    assert suite.destination() == [(0, 0), (0, 1)]
    assert suite.txns["0:1"]["state"] == "ABORTED"


async def test_a_refused_commit_takes_the_pipelined_one_with_it(worker: tuple[Worker, FakeSuite]) -> None:
    w, suite = worker
    w.last_commit_s = 0.0  # commits have been fast: pipeline
    suite.commit_delay_s = 0.05
    suite.refuse.add("0:1")
    w.offer(msgs((0, 0), (0, 1)))
    await w.one_transaction()  # txn 0:1 commits in the background (and will be refused) ...
    w.offer(msgs((0, 2)))
    await w.one_transaction()  # ... while 0:2 writes; 0:2 builds on 0:1, so it aborts too
    assert outcomes(w) == ["refused", "aborted"]
    assert suite.destination() == []
    suite.commit_delay_s = 0.0
    await w.one_transaction()  # everything is redone, in order
    await w.settle()
    assert suite.destination() == [(0, 0), (0, 1), (0, 2)]
    # Nothing the source delivered was acked outside a transaction; the committed one acked
    # partition 0's first record and, cumulatively, its last.
    assert sorted(suite.acked) == ["7:0", "c:7:2"]


async def test_copies_of_committed_records_are_acked_outside_the_transaction(
    worker: tuple[Worker, FakeSuite],
) -> None:
    w, _ = worker
    w.offer(msgs((0, 0)))
    await w.one_transaction()
    await w.settle()
    stale = w.offer(msgs((0, 0), (1, 0)))  # a redelivered copy; partition 1 is ours too
    assert stale == ["7:0"]
    w.known.discard(2)  # moved away while the fetch ran: not offered, not acked
    assert w.offer(msgs((2, 0))) == [] and w.buf.held() == 1


async def test_one_ack_per_partition_and_transaction(worker: tuple[Worker, FakeSuite]) -> None:
    w, suite = worker
    w.offer(msgs(*((p, s) for p in (0, 1) for s in range(5))))
    await w.one_transaction()
    await w.settle()
    assert sorted(suite.acked) == ["7:0", "7:1000", "c:7:1004", "c:7:4"]


async def test_a_partition_taken_over_resumes_at_its_committed_progress(
    worker: tuple[Worker, FakeSuite],
) -> None:
    w, suite = worker
    w.known.discard(3)
    suite.progress = [{"p": 3, "next": 4}, {"p": 3, "next": 6}, {"p": 5, "next": 9}]
    await w.acquire([3])
    assert w.buf.committed[3] == 6 and 3 in w.known
    assert w.offer(msgs((3, 5), (3, 6), (3, 7))) == ["7:3005"]  # written by the previous owner
    await w.one_transaction()
    await w.settle()
    assert suite.destination() == [(3, 6), (3, 7)]
    assert sorted(suite.acked) == ["7:3006", "c:7:3007"]


async def test_a_partition_that_moved_away_is_forgotten(worker: tuple[Worker, FakeSuite]) -> None:
    w, suite = worker
    w.offer(msgs((1, 1), (1, 2)))  # a gap: nothing ready
    suite.assignment = [0, 2, 4, 6]
    await w.sync_partitions()
    assert 1 not in w.known and w.buf.held() == 0


async def test_a_partition_that_moved_away_while_in_flight_does_not_come_back_on_abort(
    worker: tuple[Worker, FakeSuite],
) -> None:
    w, suite = worker
    w.last_commit_s = 0.0
    suite.commit_delay_s = 0.05
    suite.refuse.add("0:1")
    w.offer(msgs((0, 0), (1, 0), (1, 1)))
    await w.one_transaction()  # 0:1 commits in the background, and will be refused ...
    suite.assignment = [0, 2, 4, 6]
    await w.sync_partitions()  # ... while partition 1 moves to another worker
    await w.settle()
    # Back in hand: partition 0's record only. Partition 1's would be taken by every
    # transaction again, whose acks of them its new owner's commits refuse, forever.
    assert outcomes(w) == ["refused"] and w.buf.held() == 1
    await w.one_transaction()
    await w.settle()
    assert suite.destination() == [(0, 0)]


async def test_a_gap_at_the_head_rereads_the_progress(worker: tuple[Worker, FakeSuite]) -> None:
    w, suite = worker
    w.offer(msgs((0, 5), (0, 6)))  # 0..4 were written by a transaction that committed after we read
    suite.progress = [{"p": 0, "next": 5}]
    await w.sync_partitions()
    assert w.buf.committed[0] == 0  # not yet: a gap may also be records on their way back
    w.stuck_since[0] -= 10
    await w.sync_partitions()
    assert w.buf.committed[0] == 5
    await w.one_transaction()
    await w.settle()
    assert suite.destination() == [(0, 5), (0, 6)]


async def test_after_a_conflict_the_next_transaction_starts_at_the_reread_progress(
    worker: tuple[Worker, FakeSuite],
) -> None:
    w, suite = worker
    w.offer(msgs((0, 0), (0, 1), (0, 2)))  # 0 and 1 were written meanwhile by the partition's previous owner
    suite.conflict_acks = 1
    suite.progress = [{"p": 0, "next": 2}]
    await w.one_transaction()
    assert outcomes(w) == ["aborted"]
    await w.one_transaction()  # re-reads the progress first: never takes 0 and 1 again
    await w.settle()
    assert suite.destination() == [(0, 2)]
    assert sorted(suite.acked) == ["7:2", "c:7:2"]


async def test_the_first_assignment_check_runs_on_a_machine_booted_a_moment_ago(
    worker: tuple[Worker, FakeSuite], monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Monotonic time may start near 0 (issue 21 item 16): "last checked at 0.0" skipped the check.
    import streamtx.demo.intake as intake

    monkeypatch.setattr(intake.time, "monotonic", lambda: 0.5)
    w, suite = worker
    w.offer(msgs((1, 1), (1, 2)))
    suite.assignment = [0, 2, 4, 6]
    await w.sync_partitions()
    assert 1 not in w.known


async def test_a_restarted_worker_closes_its_previous_lifes_consumer_at_once(
    worker: tuple[Worker, FakeSuite], tmp_path: Path,
) -> None:
    # Issue 25: the dead life's consumer stayed active on its partitions until it had been
    # silent for the broker's failover_idle_ms (3 s), and the new life joined as a third one.
    w, suite = worker
    await w.fence_previous_life()  # the first life: nothing to close
    assert suite.closed == [] and w.consumer_path.read_text().strip() == w.consumer
    again = Worker(w.cfg, tmp_path, cast(Rest, suite), index=0, workers=1, commit_interval_ms=20,
                   txn_timeout_ms=1000)
    await again.fence_previous_life()
    assert suite.closed == [w.consumer]
    assert again.consumer_path.read_text().strip() == again.consumer != w.consumer
