"""bench-peer's Kafka worker waits for the bench's go before it reads (issue 23 item 1).

The bench takes every process's CPU when it says go: a worker that started reading
as soon as its group formed did part of the job outside the measured window (its
``pause()`` inside ``on_assign`` was undone by the assignment confluent-kafka makes
after the callback returns). On a real tansu broker.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench import peer_kafka

from streamtx.demo.layout import RunConfig, read_jsonl
from tests.support.procs import ROOT, python_env, stop


def _events(log: Path) -> list[str]:
    return [line["o"] for line in read_jsonl(log)]


def test_the_worker_reads_nothing_before_go_then_commits(kafka_bootstrap: str, tmp_path: Path) -> None:
    cfg = RunConfig.new(uuid.uuid4().hex[:6])
    cfg.save(tmp_path)
    peer_kafka.create_topics(kafka_bootstrap, cfg)
    peer_kafka.generate(kafka_bootstrap, cfg, tmp_path, count=200, rate=None, seed=1)
    log = tmp_path / "kworker-0.jsonl"
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "peer_kafka.py"), "worker", "--bootstrap", kafka_bootstrap,
         "--run-dir", str(tmp_path), "--index", "0", "--commit-interval-ms", "200"], env=python_env())
    try:
        deadline = time.monotonic() + 60
        while not peer_kafka.group_formed([log], cfg.source_partitions):
            assert time.monotonic() < deadline, "the worker's group did not form"
            assert worker.poll() is None, f"the worker exited with {worker.returncode}"
            time.sleep(0.1)
        time.sleep(3.0)  # a worker that ignored its pause opened a transaction within a second
        assert "open" not in _events(log)
        (tmp_path / "go").touch()
        deadline = time.monotonic() + 30
        while "committed" not in _events(log):
            assert time.monotonic() < deadline, "the worker committed nothing after go"
            time.sleep(0.1)
    finally:
        stop(worker, timeout=30)
    assert worker.returncode in (0, -15)
    assert sum(line.get("n", 0) for line in read_jsonl(log) if line["o"] == "committed") == 200
