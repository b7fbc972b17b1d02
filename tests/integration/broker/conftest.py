"""Fixtures: a real broker process over real HTTP."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.services import ServiceProcess


class BrokerClient:
    """Thin helpers over the broker's REST API for tests."""

    def __init__(self, proc: ServiceProcess) -> None:
        self.proc = proc
        self.http = httpx.Client(base_url=proc.url, timeout=60)

    def call(self, method: str, path: str, expect: int = 200, **kw: Any) -> Any:
        r = self.http.request(method, path, **kw)
        assert r.status_code == expect, f"{method} {path}: {r.status_code} {r.text}"
        return r.json()

    def create_topic(self, topic: str, partitions: int) -> None:
        self.call("PUT", f"/admin/v2/persistent/t/n/{topic}/partitions", json={"partitions": partitions})

    def subscribe(self, topic: str, sub: str, sub_type: str = "Shared", initial: str = "earliest") -> None:
        self.call("PUT", f"/v1/topics/t/n/{topic}/subscriptions/{sub}",
                  json={"initial_position": initial, "type": sub_type})

    def produce(self, topic: str, values: list[str], expect: int = 200, **kw: Any) -> Any:
        msgs = [{"value": base64.b64encode(v.encode()).decode(), **kw.pop("msg", {})} for v in values]
        return self.call("POST", f"/v1/topics/t/n/{topic}/messages", expect,
                         json={"messages": msgs, **kw})

    def fetch(self, topic: str, sub: str, max: int = 100, wait_ms: int = 200,
              consumer: str = "c1", expect: int = 200) -> list[dict[str, Any]]:
        body = self.call("GET", f"/v1/topics/t/n/{topic}/subscriptions/{sub}/messages", expect,
                         params={"max": max, "wait_ms": wait_ms, "consumer": consumer})
        return body["messages"] if expect == 200 else body  # type: ignore[no-any-return]

    def drain(self, topic: str, sub: str, consumer: str = "c1", ack: bool = True) -> list[str]:
        """Fetch until empty; the decoded values, acked."""
        out: list[str] = []
        while msgs := self.fetch(topic, sub, max=500, wait_ms=100, consumer=consumer):
            out += [base64.b64decode(m["value"]).decode() for m in msgs]
            if ack:
                self.ack(topic, sub, [m["message_id"] for m in msgs])
        return out

    def ack(self, topic: str, sub: str, ids: list[str], expect: int = 200, **kw: Any) -> Any:
        return self.call("POST", f"/v1/topics/t/n/{topic}/subscriptions/{sub}/acks", expect,
                         json={"message_ids": ids, **kw})

    def end(self, txn: str, partition: str, action: str) -> Any:
        return self.call("POST", "/v1/txn/partitions/end",
                         json={"txn_id": txn, "partition": partition, "action": action})

    def tb_stats(self, topic: str, partition: int) -> Any:
        return self.call("GET", f"/admin/v3/transactions/transactionBufferStats/t/n/{topic}",
                         params={"partition": partition})

    def wait_snapshot(self, topic: str, partitions: list[int], since_ms: float,
                      timeout_s: float = 30.0) -> None:
        """Wait until the timer snapshotted each partition at ``since_ms`` or later (give a time
        before the partition's last transaction op: only ops make a snapshot due)."""
        deadline = time.monotonic() + timeout_s
        for p in partitions:
            while self.tb_stats(topic, p)["lastSnapshotTimestamp"] < since_ms:
                assert time.monotonic() < deadline, f"no snapshot of {topic}-{p} in {timeout_s}s"
                time.sleep(0.05)


def values(msgs: list[dict[str, Any]]) -> list[str]:
    return [base64.b64decode(m["value"]).decode() for m in msgs]


BrokerFactory = Callable[..., BrokerClient]


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[BrokerFactory]:
    procs: list[ServiceProcess] = []
    clients: list[BrokerClient] = []

    def start(ledger_url: str | None = None, **settings: Any) -> BrokerClient:
        env = {
            "STREAMTX_LEDGER_URL": ledger_url or f"file://{tmp_path / 'ledgers'}",
            "STREAMTX_TEST_LOG_DIR": str(tmp_path),
            **{f"STREAMTX_{k.upper()}": str(v) for k, v in settings.items()},
        }
        proc = ServiceProcess("broker", env).start()
        procs.append(proc)
        clients.append(BrokerClient(proc))
        return clients[-1]

    yield start
    for c in clients:
        c.http.close()
    for p in procs:
        p.stop()


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerClient:
    return broker_factory(ack_timeout_ms=600, snapshot_interval_s=0.2, snapshot_segment_size=4)
