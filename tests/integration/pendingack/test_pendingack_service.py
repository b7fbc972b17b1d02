"""The pending-ack store as a real process over real HTTP, on the file backend."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import httpx

from tests.integration.pendingack.conftest import FakeBroker
from tests.support.procs import python_env
from tests.support.services import ServiceProcess

TOPIC, SUB = "persistent://t/n/x-partition-0", "sub"
BASE = "persistent://t/n/x"  # the store keys a subscription by its topic's name (issue 32 defect 1)
STATS = "/admin/v3/transactions/pendingAckStats/t/n/x-partition-0/sub"


def ack(url: str, txn: str, *ids: str, cumulative: bool = False, sub: str = SUB) -> httpx.Response:
    body = {"topic": TOPIC, "subscription": sub, "txn_id": txn, "message_ids": list(ids),
            "cumulative": cumulative}
    return httpx.post(f"{url}/v1/pendingack/acks", json=body, timeout=10)


def txn_call(url: str, what: str, txn: str, **extra: Any) -> httpx.Response:
    body = {"topic": TOPIC, "subscription": SUB, "txn_id": txn, **extra}
    return httpx.post(f"{url}/v1/txn/subscriptions/{what}", json=body, timeout=30)


def held(url: str, sub: str = SUB) -> list[str]:
    r = httpx.get(f"{url}/v1/pendingack/held", params={"topic": TOPIC, "subscription": sub}, timeout=10)
    r.raise_for_status()
    ids: list[str] = r.json()["message_ids"]
    return ids


def test_ack_conflict_and_commit_tells_the_broker(
    pendingack: ServiceProcess, fake_broker: FakeBroker
) -> None:
    url = pendingack.url
    assert ack(url, "0:1", "1:1", "1:2:0").status_code == 200
    r = ack(url, "0:2", "1:2")
    assert r.status_code == 409 and r.json()["error"] == "conflict"
    assert ack(url, "0:2", "1:2:1").status_code == 200  # another batch index is free
    assert held(url) == ["1:1", "1:2:0", "1:2:1"]

    assert txn_call(url, "prepare", "0:1").status_code == 200
    assert txn_call(url, "end", "0:1", action="commit").status_code == 200
    assert fake_broker.calls == [{
        "topic": BASE, "subscription": SUB, "txn_id": "0:1", "action": "commit",
        "message_ids": ["1:1", "1:2:0"], "cumulative_message_ids": [],
    }]
    assert txn_call(url, "end", "0:1", action="commit").status_code == 200  # idempotent
    assert txn_call(url, "end", "9:9", action="abort").status_code == 200  # unknown: no-op
    assert len(fake_broker.calls) == 1
    r = ack(url, "0:3", "1:1")
    assert r.status_code == 409, "already committed-acked"

    assert txn_call(url, "end", "0:2", action="abort").status_code == 200
    assert fake_broker.calls[-1]["action"] == "abort"
    assert fake_broker.calls[-1]["message_ids"] == ["1:2:1"]
    assert held(url) == []
    assert ack(url, "0:3", "1:2:1").status_code == 200  # abort made it ackable again


def test_prepare_refuses_overlap_with_committed(
    pendingack: ServiceProcess, fake_broker: FakeBroker
) -> None:
    url = pendingack.url
    assert ack(url, "0:1", "1:5").status_code == 200
    assert ack(url, "0:2", "1:7", cumulative=True).status_code == 200  # passes at ack time
    assert txn_call(url, "prepare", "0:1").status_code == 200
    r = txn_call(url, "prepare", "0:2")  # overlaps 0:1's prepared 1:5
    assert r.status_code == 409, r.text
    assert txn_call(url, "end", "0:1", action="commit").status_code == 200
    r = txn_call(url, "prepare", "0:2")  # and now its committed 1:5
    assert r.status_code == 409 and r.json()["error"] == "conflict"
    assert txn_call(url, "end", "0:2", action="abort").status_code == 200
    assert [c["action"] for c in fake_broker.calls] == ["commit", "abort"]


def test_end_retries_the_broker_until_it_succeeds(
    pendingack: ServiceProcess, fake_broker: FakeBroker
) -> None:
    url = pendingack.url
    assert ack(url, "0:1", "1:1").status_code == 200
    fake_broker.fail_next = 3
    assert txn_call(url, "end", "0:1", action="commit").status_code == 200
    assert len(fake_broker.calls) == 1 and fake_broker.fail_next == 0


def test_kill9_restart_recovers_pending_acks(
    pendingack: ServiceProcess, fake_broker: FakeBroker
) -> None:
    url = pendingack.url
    for i in range(20):
        assert ack(url, f"0:{i}", f"1:{i}").status_code == 200
    assert txn_call(url, "prepare", "0:3").status_code == 200
    for i in range(10):
        assert txn_call(url, "end", f"0:{i}", action="commit" if i % 2 else "abort").status_code == 200

    pendingack.restart()  # kill -9, then start on the same data

    assert held(url) == [f"1:{i}" for i in range(10, 20)]
    assert ack(url, "5:5", "1:15").status_code == 409
    assert ack(url, "0:10", "1:15").status_code == 409
    assert ack(url, "0:99", "1:4").status_code == 200  # aborted before the crash: free
    for i in range(10, 20):
        assert txn_call(url, "end", f"0:{i}", action="commit").status_code == 200
    assert held(url) == ["1:4"]
    stats = httpx.get(f"{url}{STATS}").json()
    assert stats["ongoingTxnSize"] == 1


def test_batch_log_switch_and_stats(
    pendingack: ServiceProcess, fake_broker: FakeBroker
) -> None:
    url = pendingack.url
    admin = f"{url}/admin/v3/transactions"
    assert httpx.get(f"{admin}/pendingAckBatchLogStat").json() == {
        "txnPendingAckBatchLogEnabled": True, "subscriptionArray": []
    }
    assert ack(url, "0:1", "1:1").status_code == 200
    r = httpx.post(f"{admin}/pendingAckBatchLog", json={"enabled": False})
    assert r.status_code == 200
    stat = httpx.get(f"{admin}/pendingAckBatchLogStat").json()
    assert stat == {"txnPendingAckBatchLogEnabled": False, "subscriptionArray": [{f"{BASE}-{SUB}": False}]}
    assert ack(url, "0:2", "1:2").status_code == 200
    assert httpx.post(f"{admin}/pendingAckBatchLog", json={"enabled": True}).status_code == 200
    assert ack(url, "0:3", "1:3").status_code == 200
    assert httpx.post(f"{admin}/pendingAckBatchLog", json={"enabled": "maybe"}).status_code == 400

    stats = httpx.get(f"{url}{STATS}").json()
    assert stats["ongoingTxnSize"] == 3 and stats["heldMessageCount"] == 3
    internal = httpx.get(f"{admin}/pendingAckInternalStats/t/n/x-partition-0/sub").json()
    ledgers = internal["pendingAckLogStats"]["ledgers"]
    assert ledgers and sum(s["entries"] for s in ledgers) >= 3
    assert {"ledgerId", "entries", "size"} <= set(ledgers[0])

    pendingack.restart()  # mixed batched and unbatched entries replay alike
    assert held(url) == ["1:1", "1:2", "1:3"]


def test_malformed_input_is_400(pendingack: ServiceProcess) -> None:
    url = pendingack.url
    assert ack(url, "nope", "1:1").status_code == 400
    assert ack(url, "0:1", "1-1").status_code == 400
    r = httpx.post(f"{url}/v1/pendingack/acks", json={"topic": "x", "subscription": SUB, "txn_id": "0:1",
                                                     "message_ids": ["1:1"]})
    assert r.status_code == 400
    assert txn_call(url, "end", "0:1", action="maybe").status_code == 400


def test_metrics_exist(pendingack: ServiceProcess) -> None:
    assert ack(pendingack.url, "0:1", "1:1", "1:2").status_code == 200
    assert ack(pendingack.url, "0:2", "1:1").status_code == 409
    text = httpx.get(f"{pendingack.url}/metrics").text
    for name in ("records_count_per_entry histogram", "entry_size_bytes histogram",
                 "oldest_record_delay_time_seconds histogram", "triggering_count_by_records_total counter",
                 "triggering_count_by_size_total counter", "triggering_count_by_delay_time_total counter"):
        assert f"# TYPE pulsar_pending_ack_batched_log_{name}" in text, name
    for name in ("batch_records histogram", "batch_size_bytes histogram",
                 "batch_oldest_record_delay_seconds histogram", "flush_trigger_max_records_total counter",
                 "flush_trigger_max_size_total counter", "flush_trigger_max_delay_total counter",
                 "flush_trigger_large_data_total counter"):
        assert f"# TYPE pulsar_txn_pending_ack_store_bufferedwriter_{name}" in text, name
    bucket = 'pulsar_pending_ack_batched_log_records_count_per_entry_bucket{cluster="standalone",le="10.0"}'
    assert bucket in text
    assert 'streamtx_pendingack_acked_messages_total{cluster="standalone"} 2.0' in text
    assert 'streamtx_pendingack_conflicts_total{cluster="standalone",stage="ack"} 1.0' in text
    assert 'streamtx_pendingack_open_txns{cluster="standalone"} 1.0' in text


def test_admin_cli_against_the_service(pendingack: ServiceProcess) -> None:
    env = python_env()

    def cli(*argv: str) -> Any:
        command = [sys.executable, "-m", "streamtx.client.admin_cli", "--url", pendingack.url, *argv]
        out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    assert ack(pendingack.url, "0:1", "1:1").status_code == 200
    assert cli("pending-ack-batch-log", "set", "--enable", "false") == {"txnPendingAckBatchLogEnabled": False}
    assert cli("pending-ack-batch-log", "get")["subscriptionArray"] == [{f"{BASE}-{SUB}": False}]
    assert cli("pending-ack", "stats", "persistent://t/n/x-partition-0", SUB)["ongoingTxnSize"] == 1
    internal = cli("pending-ack", "stats", "persistent://t/n/x-partition-0", SUB, "--internal")
    assert internal["pendingAckLogStats"]["ledgers"]
