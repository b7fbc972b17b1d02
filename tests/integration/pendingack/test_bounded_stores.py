"""Names a client invents open nothing; idle stores are closed (LRU); ledger I/O threads are pooled.

Measured on the real process: its open file descriptors (``/proc/<pid>/fd``) and
threads (``/proc/<pid>/task``). Before: each made-up name in a query opened a
store (two ledgers, a thread and file descriptors each) that was never closed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.pendingack.conftest import FakeBroker
from tests.support.services import ServiceProcess

TOPIC = "persistent://t/n/x-partition-0"
MAX_OPEN = 4
IO_THREADS = 4


@pytest.fixture
def bounded(tmp_path: Path, fake_broker: FakeBroker) -> Iterator[ServiceProcess]:
    proc = ServiceProcess("pendingack", {
        "STREAMTX_LEDGER_URL": f"file://{tmp_path / 'ledgers'}?io_threads={IO_THREADS}",
        "STREAMTX_BROKER_URL": fake_broker.url,
        "STREAMTX_PENDING_ACK_MAX_OPEN_STORES": str(MAX_OPEN),
        "STREAMTX_TEST_LOG_DIR": str(tmp_path),
    }).start()
    yield proc
    proc.stop()


def usage(proc: ServiceProcess) -> tuple[int, int]:
    """(open file descriptors, threads) of the service process."""
    assert proc.proc is not None
    pid = proc.proc.pid
    return len(os.listdir(f"/proc/{pid}/fd")), len(os.listdir(f"/proc/{pid}/task"))


def open_stores(c: httpx.Client) -> int:
    return len(c.get("/admin/v3/transactions/pendingAckBatchLogStat").json()["subscriptionArray"])


def test_made_up_names_answer_404_and_open_nothing(bounded: ServiceProcess) -> None:
    with httpx.Client(base_url=bounded.url, timeout=30) as c:
        c.get("/metrics")  # warm up whatever the first requests allocate
        before = usage(bounded)
        for i in range(300):
            sub = f"made-up-{i}"
            r = c.get("/v1/pendingack/held", params={"topic": TOPIC, "subscription": sub})
            assert r.status_code == 404 and r.json()["error"] == "not_found", r.text
            r = c.get(f"/admin/v3/transactions/pendingAckStats/t/n/x-partition-0/{sub}")
            assert r.status_code == 404, r.text
            # The coordinator's calls have nothing to do there and open nothing either.
            body = {"topic": TOPIC, "subscription": sub, "txn_id": f"0:{i}"}
            assert c.post("/v1/txn/subscriptions/prepare", json=body).status_code == 200
            assert c.post("/v1/txn/subscriptions/end", json={**body, "action": "abort"}).status_code == 200
        after = usage(bounded)
        assert open_stores(c) == 0
        # An ack after the end it raced is still refused, as an open store refuses it.
        late = {"topic": TOPIC, "subscription": "made-up-7", "txn_id": "0:7", "message_ids": ["1:1"]}
        r = c.post("/v1/pendingack/acks", json=late)
        assert r.status_code == 409, r.text
        assert c.post("/v1/pendingack/acks", json={**late, "txn_id": "0:1000"}).status_code == 200
    print(f"300 made-up names: fds {before[0]} -> {after[0]}, threads {before[1]} -> {after[1]}")
    assert after[0] <= before[0] + 2, (before, after)  # was +1,200 fds
    # Threads must not grow with the names (they were +600). The process may still
    # start a few pool threads on demand (asyncio's default executor, the ledger I/O
    # pool), bounded by the pools' sizes, not by the names: allow for those.
    assert after[1] <= before[1] + 16, (before, after)


def test_idle_stores_are_closed_least_recently_used_first(
    bounded: ServiceProcess, fake_broker: FakeBroker,
) -> None:
    def ack(c: httpx.Client, sub: str, txn: str, mid: str) -> None:
        body = {"topic": TOPIC, "subscription": sub, "txn_id": txn, "message_ids": [mid]}
        r = c.post("/v1/pendingack/acks", json=body)
        assert r.status_code == 200, r.text

    def end(c: httpx.Client, sub: str, txn: str) -> None:
        body = {"topic": TOPIC, "subscription": sub, "txn_id": txn, "action": "commit"}
        r = c.post("/v1/txn/subscriptions/end", json=body)
        assert r.status_code == 200, r.text

    with httpx.Client(base_url=bounded.url, timeout=30) as c:
        ack(c, "holding", "1:1", "5:1")  # an open transaction: its store is never closed
        before = usage(bounded)
        for i in range(40):
            ack(c, f"s{i}", f"2:{i}", "5:1")
            end(c, f"s{i}", f"2:{i}")
        assert open_stores(c) <= MAX_OPEN + 1
        after = usage(bounded)
        held = c.get("/v1/pendingack/held", params={"topic": TOPIC, "subscription": "holding"})
        assert held.json() == {"message_ids": ["5:1"], "holders": {"1:1": ["5:1"]}, "cumulative": {}}
        # A closed store reopens from its log (its txn ended: nothing held), and works on.
        assert c.get("/v1/pendingack/held", params={"topic": TOPIC, "subscription": "s1"}).json() == {
            "message_ids": [], "holders": {}, "cumulative": {}}
        ack(c, "s0", "3:0", "5:2")
        assert c.get("/v1/pendingack/held", params={"topic": TOPIC, "subscription": "s0"}).json()[
            "message_ids"] == ["5:2"]
    print(f"40 subscriptions, {MAX_OPEN} open at most: fds {before[0]} -> {after[0]}, "
          f"threads {before[1]} -> {after[1]}")
    # Each open store holds a few fds; 40 stores were 160 fds and 80 threads before.
    assert after[0] <= before[0] + 8 * MAX_OPEN, (before, after)
    assert after[1] <= before[1] + IO_THREADS, (before, after)
