"""The resharding job on a Kafka-protocol broker, for ``bench/peer.py``'s side-by-side run.

The peer of ``streamtx.demo``: the same records (``streamtx.demo.records``, ~200-byte
JSON, a user's records on source partition ``user mod 8`` with a gapless sequence
per partition), the same per-record work in the worker (decode the JSON, route by
user-id range with ``RangePartitioner``, write the record's bytes keyed by user to
its destination partition) and the same checker (``streamtx.demo.checker``), on
the ``tansu`` broker with confluent-kafka's exactly-once API:

- workers: one consumer group, ``isolation.level=read_committed``, no auto-commit;
  a transactional producer per worker that puts the consumed offsets in the
  transaction (``send_offsets_to_transaction`` with the group metadata, KIP-447)
  and commits every ``commit_interval_ms`` counted from the first record in hand;
  a rebalance commits what is in hand before the partitions move;
- each output record carries its transaction as the ``txn`` header, so the checker
  can tell an aborted read; workers log every transaction to ``kworker-<i>.jsonl``
  (``{"txn", "o": "open"|"committed", "n", "t"}``, like the demo's logs). The worker
  never aborts (the group forms before anyone reads, and a failed commit ends the
  worker, exit 3, which the bench prints), so tansu not filtering aborted records for
  read_committed consumers does not come into play; nothing is filtered here either.

Run as ``python bench/peer_kafka.py worker ...``; the rest is imported by the bench.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from streamtx.demo.checker import Observed, Report, Written, check
from streamtx.demo.layout import RunConfig, read_jsonl
from streamtx.demo.records import decode, encode, next_record
from streamtx.service.serve import tune_gc

produce_queue = 200_000  # records the client may buffer before produce() pushes back


def create_topics(bootstrap: str, cfg: RunConfig) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([
        NewTopic(cfg.source_topic, cfg.source_partitions, 1),
        NewTopic(cfg.dest_topic, cfg.dest_partitions, 1),
    ])
    for f in futures.values():
        f.result(30)


def _producer(bootstrap: str, **extra: Any) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                     "queue.buffering.max.messages": produce_queue, **extra})


def _produce(producer: Producer, *args: Any, **kw: Any) -> None:
    while True:
        try:
            producer.produce(*args, **kw)
            return
        except BufferError:
            producer.poll(0.05)  # the local queue is full: let deliveries drain it


@dataclass
class Generated:
    """What the generator saw acknowledged, as the demo's checker wants it."""

    written: list[Written] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def generate(bootstrap: str, cfg: RunConfig, *, count: int, rate: float | None, seed: int,
             out: Generated, stop: threading.Event | None = None) -> None:
    """Write ``count`` records (as fast as the broker takes them, or at ``rate`` per second)."""
    rng = random.Random(seed)
    seqs = [0] * cfg.source_partitions
    producer = _producer(bootstrap)

    def acked(err: Any, msg: Any) -> None:
        if err is None:
            rec = decode(msg.value())
            with out.lock:
                out.written.append(Written(rec.src_partition, rec.seq, rec.user_id))

    start = time.monotonic()
    for i in range(count):
        if stop is not None and stop.is_set():
            break
        if rate is not None:
            due_at = start + i / rate
            if (pause := due_at - time.monotonic()) > 0:
                producer.poll(pause)
        rec = next_record(rng, cfg, seqs, int(time.time() * 1000))
        _produce(producer, cfg.source_topic, encode(rec, cfg.record_size), rec.key,
                 partition=rec.src_partition, on_delivery=acked)
        producer.poll(0)
    producer.flush(60)


class Worker:
    """One resharding worker: consume, route, produce in a transaction, offsets in it."""

    def __init__(self, bootstrap: str, cfg: RunConfig, index: int, log: Path,
                 commit_interval_ms: int) -> None:
        self.cfg = cfg
        self.index = index
        self.ranges = cfg.ranges()
        self.interval_s = commit_interval_ms / 1000
        self.log = log.open("a")
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"reshard-{cfg.run_id}",
            "isolation.level": "read_committed", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
            "fetch.max.bytes": 16 << 20, "max.partition.fetch.bytes": 4 << 20,
        })
        self.producer = _producer(bootstrap, **{"transactional.id": f"reshard-{cfg.run_id}-{index}"})
        self.txn_no = 0
        self.txn: str | None = None
        self.in_txn = 0  # records written in the open transaction
        self.first_at = 0.0
        self.stopping = False
        self.go_file = log.with_name("go")  # the bench starts the job when the group is formed
        self.going = False

    def _log(self, outcome: str, **kw: Any) -> None:
        self.log.write(json.dumps({"txn": self.txn, "o": outcome, "t": time.time(), **kw}) + "\n")
        self.log.flush()

    def _begin(self) -> None:
        self.txn_no += 1
        self.txn = f"k{self.index}:{self.txn_no}"
        self.producer.begin_transaction()
        self.in_txn = 0
        self.first_at = time.monotonic()
        self._log("open")

    def _commit(self) -> None:
        if self.txn is None:
            return
        assignment = self.consumer.assignment()
        if assignment:
            positions = self.consumer.position(assignment)
            self.producer.send_offsets_to_transaction(
                [tp for tp in positions if tp.offset >= 0], self.consumer.consumer_group_metadata())
        self.producer.commit_transaction()
        self._log("committed", n=self.in_txn)
        self.txn = None

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if not self.going:
            consumer.pause(partitions)  # in the group, but not reading before the start
        self._log("assigned", n=len(partitions))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # What is in hand from the partitions that move is committed now, with their
        # positions, or the next owner would redo it.
        self._commit()
        self._log("revoked", n=len(partitions))

    def _transform(self, value: bytes, key: bytes | None) -> None:
        rec = decode(value)  # the demo's per-record work: decode, route, write
        dest = self.ranges.partition_of(rec.user_id)
        _produce(self.producer, self.cfg.dest_topic, value, key, partition=dest,
                 headers=[("txn", self.txn.encode() if self.txn else b"")])

    def run(self) -> None:
        self.producer.init_transactions(30)
        self.consumer.subscribe([self.cfg.source_topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        while not self.stopping:
            if not self.going and self.go_file.exists():
                self.going = True
                self.consumer.resume(self.consumer.assignment())
            msgs = self.consumer.consume(num_messages=5000, timeout=0.05)
            for m in msgs:
                if m.error() is not None:
                    continue
                if self.txn is None:
                    self._begin()
                self._transform(m.value(), m.key())
                self.in_txn += 1
            self.producer.poll(0)
            if self.txn is not None and time.monotonic() - self.first_at >= self.interval_s:
                self._commit()
        self._commit()
        self.consumer.close()


@dataclass
class Visible:
    """What a read-committed follower of the destination saw."""

    observed: list[Observed] = field(default_factory=list)
    e2e_ms: list[float] = field(default_factory=list)


class Follower:
    """A read-committed reader of the whole destination from its start (the demo's probe).

    Every message it is handed counts, the warm-up read's included: in backlog mode the
    workers are already writing when it starts, and a warm-up ``consume()`` whose result
    was thrown away once dropped the first record of a partition (a lost-write the
    checker rightly flagged, then a wait for a record that would never come)."""

    def __init__(self, bootstrap: str, cfg: RunConfig) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{cfg.run_id}",
                                  "isolation.level": "read_committed", "enable.auto.commit": False,
                                  "auto.offset.reset": "error"})  # never skip: an error says so
        self.consumer.assign([TopicPartition(cfg.dest_topic, p, 0) for p in range(cfg.dest_partitions)])
        self.out = Visible()
        self.errors: list[str] = []
        self._take(self.consumer.consume(num_messages=10_000, timeout=1.0))  # connected and fetching

    def _take(self, msgs: list[Any]) -> None:
        now_ms = time.time() * 1000
        for m in msgs:
            if m.error() is not None:
                self.errors.append(f"{m.partition()}:{m.offset()} {m.error()}")
                continue
            rec = decode(m.value())
            headers = dict(m.headers() or [])
            self.out.e2e_ms.append(now_ms - rec.sent_at_ms)
            self.out.observed.append(Observed(m.partition(), f"{m.partition()}:{m.offset()}",
                                              rec.src_partition, rec.seq, rec.user_id,
                                              headers.get("txn", b"").decode() or None))

    def run(self, *, until: Callable[[int], bool], idle_s: float) -> Visible:
        """Read until ``until(records seen)`` holds and nothing came for ``idle_s`` (tansu may
        report a partition's end short of it: read to the real end)."""
        last = time.monotonic()
        while not (until(len(self.out.observed)) and time.monotonic() - last > idle_s):
            msgs = self.consumer.consume(num_messages=10_000, timeout=0.1)
            self._take(msgs)
            if msgs:
                last = time.monotonic()
        self.consumer.close()
        return self.out


def verify(cfg: RunConfig, written: list[Written], visible: Visible, logs: list[Path]) -> Report:
    aborted = {line["txn"] for path in logs for line in read_jsonl(path) if line["o"] == "aborted"}
    ordered = sorted(visible.observed, key=lambda o: (o.dest_partition, int(o.message_id.split(":")[1])))
    return check(written, ordered, aborted, expected_partition=cfg.ranges().partition_of)


def outcomes(logs: list[Path]) -> dict[str, int]:
    """How many transactions the workers logged as committed and as aborted (the worker has
    no abort path: a failed commit ends it, so ``aborted`` stays 0 unless that changes)."""
    lines = [line for path in logs for line in read_jsonl(path)]
    return {o: sum(x["o"] == o for x in lines) for o in ("committed", "aborted")}


def group_formed(logs: list[Path], partitions: int) -> bool:
    """Whether every worker holds partitions and together they hold all of them."""
    held = []
    for path in logs:
        events = [x for x in read_jsonl(path) if x["o"] in ("assigned", "revoked")]
        held.append(events[-1]["n"] if events and events[-1]["o"] == "assigned" else 0)
    return all(held) and sum(held) == partitions


def job_window(logs: list[Path]) -> tuple[float, float]:
    """Wall clock of the first transaction opened and of the last commit, over every worker."""
    lines = [line for path in logs for line in read_jsonl(path)]
    return (min(x["t"] for x in lines if x["o"] == "open"),
            max(x["t"] for x in lines if x["o"] == "committed"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("role", choices=("worker",))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--commit-interval-ms", type=int, default=500)
    args = parser.parse_args(argv)
    cfg = RunConfig.load(args.run_dir)
    tune_gc()  # the demo's workers do (a fair comparison: the same process settings)
    worker = Worker(args.bootstrap, cfg, args.index, args.run_dir / f"kworker-{args.index}.jsonl",
                    args.commit_interval_ms)

    def stop(*_: Any) -> None:
        worker.stopping = True

    signal.signal(signal.SIGTERM, stop)
    try:
        worker.run()
    except KafkaException as exc:
        print(f"kworker-{args.index}: {exc}", file=sys.stderr, flush=True)
        sys.exit(3)


if __name__ == "__main__":
    main()
