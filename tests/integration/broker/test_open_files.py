"""A broker's file descriptors are bounded however many subscriptions it has, and it says so on
``/readyz`` when it runs out of them anyway (issue 21 item 8), against a real broker process.

Before: each subscription held two descriptors per partition for good (1,000 took a broker
from 176 to 4,176); on a broker limited to 512, 121 subscriptions exhausted it, after which
every new subscription and topic failed with 503 while ``/readyz`` still said 200.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

from tests.integration.broker.conftest import BrokerClient, BrokerFactory


def fds(b: BrokerClient) -> int:
    assert b.proc.proc is not None
    return len(os.listdir(f"/proc/{b.proc.proc.pid}/fd"))


def ready(b: BrokerClient) -> tuple[int, str]:
    r = b.http.get("/readyz")
    return r.status_code, r.text


def test_many_subscriptions_hold_a_bounded_number_of_files(
    broker_factory: BrokerFactory, tmp_path: Path,
) -> None:
    b = broker_factory(f"file://{tmp_path / 'ledgers'}?max_open_ledgers=20")
    b.create_topic("x", 2)
    b.produce("x", ["a", "b", "c", "d"])
    before = fds(b)
    for i in range(100):
        b.subscribe("x", f"s{i}")
    # 200 cursor ledgers; 20 hold their files (a LOCK and a segment each): was 400 more.
    assert fds(b) - before <= 20 * 2 + 10, fds(b) - before
    for i in range(0, 100, 7):  # each still delivers and acks: its files reopen on use
        assert len(b.drain("x", f"s{i}")) == 4
        assert b.drain("x", f"s{i}") == []
    assert fds(b) - before <= 20 * 2 + 10
    assert ready(b)[0] == 200


def test_out_of_descriptors_is_unready_until_they_are_back(
    broker_factory: BrokerFactory, tmp_path: Path,
) -> None:
    b = broker_factory(f"file://{tmp_path / 'ledgers'}?max_open_ledgers=100000")  # no bound: run out
    b.create_topic("y", 2)
    assert b.proc.proc is not None
    pid = b.proc.proc.pid
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (fds(b) + 30, hard))
    try:
        statuses = [b.http.put(f"/v1/topics/t/n/y/subscriptions/s{i}", json={"initial_position": "earliest"})
                    .status_code for i in range(40)]
        assert 503 in statuses, statuses
        status, text = ready(b)
        assert status == 503 and "file descriptors" in text, text
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
    deadline = time.monotonic() + 10
    while ready(b)[0] != 200:
        assert time.monotonic() < deadline, ready(b)
        time.sleep(0.1)
    r = b.http.put("/v1/topics/t/n/y/subscriptions/after", json={"initial_position": "earliest"})
    assert r.status_code == 200, r.text
