"""Transactional acks: the broker with the real pending-ack store (both real processes).

The test plays the coordinator: it ends transactions at the pending-ack store,
which calls the broker back (``POST /v1/txn/subscriptions/end``).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.broker.conftest import BrokerClient
from tests.support.services import ServiceProcess
from tests.support.suite import Suite

TOPIC = "persistent://t/n/ta"


@pytest.fixture
def suite(tmp_path: Path) -> Iterator[tuple[BrokerClient, ServiceProcess]]:
    with Suite(f"file://{tmp_path / 'ledgers'}", tmp_path, services=("broker", "pendingack"),
               env={"STREAMTX_ACK_TIMEOUT_MS": "60000"}) as suite:
        client = BrokerClient(suite.broker)
        yield client, suite.pendingack
        client.http.close()


def end(pendingack: ServiceProcess, txn: str, action: str) -> None:
    r = httpx.post(f"{pendingack.url}/v1/txn/subscriptions/end", timeout=30,
                   json={"txn_id": txn, "topic": TOPIC, "subscription": "s", "action": action})
    assert r.status_code == 200, r.text


def ids_of(msgs: list[dict[str, object]]) -> list[str]:
    return sorted(str(m["message_id"]) for m in msgs)


def test_held_positions_are_not_dispatched_until_released(suite: tuple[BrokerClient, ServiceProcess]) -> None:
    b, pendingack = suite
    b.create_topic("ta", 1)
    b.subscribe("ta", "s")
    b.produce("ta", ["b0", "b1", "b2", "b3"])  # one batched entry: ids l:e:0..3
    b.produce("ta", ["single"])
    got = b.fetch("ta", "s", consumer="c1")
    ids = [m["message_id"] for m in got]
    assert len(ids) == 5 and ids[0].count(":") == 2

    b.ack("ta", "s", ids[:2], txn_id="0:1")
    assert b.ack("ta", "s", ids[:1], expect=409)["error"] == "conflict"  # held: no plain ack
    assert b.ack("ta", "s", ids[1:2], expect=409, txn_id="0:9")["error"] == "conflict"
    b.call("POST", "/v1/topics/t/n/ta/subscriptions/s/nacks", json={"message_ids": ids})
    assert ids_of(b.fetch("ta", "s", consumer="c2")) == sorted(ids[2:])  # never the held ones

    # A crashed broker learns what is held from the pending-ack store before dispatching.
    b.proc.restart()
    assert ids_of(b.fetch("ta", "s", consumer="c3", wait_ms=1000)) == sorted(ids[2:])

    end(pendingack, "0:1", "abort")  # held ids become deliverable again
    assert ids_of(b.fetch("ta", "s", consumer="c4", wait_ms=2000)) == sorted(ids[:2])

    b.ack("ta", "s", ids[:2], txn_id="0:2")
    b.ack("ta", "s", ids[2:])
    end(pendingack, "0:2", "commit")  # commit deletes them from the cursor
    stats = b.call("GET", "/v1/topics/t/n/ta/subscriptions/s/stats")
    assert stats["msgBacklog"] == 0 and stats["heldByTransactions"] == 0
    b.proc.restart()
    assert b.fetch("ta", "s", consumer="c5", wait_ms=300) == []


def test_a_transactional_ack_of_an_undelivered_id_is_refused_and_holds_nothing(
        suite: tuple[BrokerClient, ServiceProcess]) -> None:
    """Issue 21 item 1 on the pending-ack store's path: refused before the store records it."""
    b, pendingack = suite
    b.create_topic("ta", 1)
    b.subscribe("ta", "s")
    b.produce("ta", ["m0"])
    first = b.fetch("ta", "s", consumer="c1")[0]["message_id"]
    ledger, entry = (int(x) for x in first.split(":")[:2])
    for cumulative in (False, True):
        got = b.ack("ta", "s", [f"{ledger}:{entry + 2}"], txn_id="0:7", cumulative=cumulative, expect=400)
        assert got["error"] == "malformed"
    end(pendingack, "0:7", "commit")  # nothing recorded: the commit moves no cursor
    b.produce("ta", ["m1"])
    b.produce("ta", ["m2"])  # entry + 2: the id the refused acks named
    got = b.fetch("ta", "s", consumer="c1", wait_ms=500)
    assert [base64.b64decode(str(m["value"])) for m in got] == [b"m1", b"m2"]
    assert b.call("GET", "/v1/topics/t/n/ta/subscriptions/s/stats")["heldByTransactions"] == 0
