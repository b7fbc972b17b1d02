"""``streamtx-admin`` against the fake cluster: each command hits its service and prints JSON."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest

from streamtx.client import StreamtxClient, admin_cli
from tests.unit.client.fake_cluster import BROKER, COORDINATOR, PENDINGACK, FakeCluster

V3 = "/admin/v3/transactions"


@pytest.mark.parametrize(("argv", "method", "url", "body"), [
    (["topics", "create", "persistent://t/n/x", "--partitions", "3"], "PUT",
     f"{BROKER}/admin/v2/persistent/t/n/x/partitions", {"partitions": 3}),
    (["topics", "get", "t/n/x"], "GET", f"{BROKER}/admin/v2/persistent/t/n/x/partitions", None),
    (["coordinator", "stats"], "GET", f"{COORDINATOR}{V3}/coordinatorStats", None),
    (["coordinator", "internal-stats", "0"], "GET", f"{COORDINATOR}{V3}/coordinatorInternalStats/0", None),
    (["txn", "metadata", "0:17"], "GET", f"{COORDINATOR}{V3}/transactionMetadata/0/17", None),
    (["slow", "txns", "10000"], "GET", f"{COORDINATOR}{V3}/slowTransactions/10000", None),
    (["txn", "violations"], "GET", f"{COORDINATOR}{V3}/protocolViolations", None),
    (["tc-batch-log", "set", "--enable", "true"], "POST", f"{COORDINATOR}{V3}/tcBatchLog", {"enabled": True}),
    (["tc-batch-log", "get"], "GET", f"{COORDINATOR}{V3}/tcBatchLogStat", None),
    (["pending-ack-batch-log", "set", "--enable", "false"], "POST", f"{PENDINGACK}{V3}/pendingAckBatchLog",
     {"enabled": False}),
    (["pending-ack-batch-log", "get"], "GET", f"{PENDINGACK}{V3}/pendingAckBatchLogStat", None),
    (["buffer", "stats", "persistent://t/n/x-partition-0"], "GET",
     f"{BROKER}{V3}/transactionBufferStats/t/n/x-partition-0", None),
    (["pending-ack", "stats", "persistent://t/n/x", "sub"], "GET",
     f"{PENDINGACK}{V3}/pendingAckStats/t/n/x/sub", None),
    (["pending-ack", "stats", "persistent://t/n/x", "sub", "--internal"], "GET",
     f"{PENDINGACK}{V3}/pendingAckInternalStats/t/n/x/sub", None),
    (["clusters", "put", "b", "--service-url", "http://b:1"], "PUT", f"{BROKER}/admin/v2/clusters/b",
     {"service_url": "http://b:1"}),
    (["clusters", "get", "b"], "GET", f"{BROKER}/admin/v2/clusters/b", None),
    (["clusters", "list"], "GET", f"{BROKER}/admin/v2/clusters", None),
    (["clusters", "delete", "b"], "DELETE", f"{BROKER}/admin/v2/clusters/b", None),
    (["namespaces", "set-replication", "t/n", "--clusters", "a, b,c"], "POST",
     f"{BROKER}/admin/v2/namespaces/t/n/replication", ["a", "b", "c"]),
    (["namespaces", "get-replication", "t/n"], "GET", f"{BROKER}/admin/v2/namespaces/t/n/replication", None),
    (["topics", "set-replication", "persistent://t/n/x", "--clusters", "a,b"], "POST",
     f"{BROKER}/admin/v2/persistent/t/n/x/replication", ["a", "b"]),
    (["topics", "get-replication", "t/n/x"], "GET", f"{BROKER}/admin/v2/persistent/t/n/x/replication", None),
    (["topics", "stats", "t/n/x"], "GET", f"{BROKER}/admin/v2/persistent/t/n/x/stats", None),
])
async def test_commands(
    argv: list[str], method: str, url: str, body: Any, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster = FakeCluster()
    monkeypatch.setattr(admin_cli, "StreamtxClient",
                        functools.partial(StreamtxClient, transport=cluster.transport))
    assert await admin_cli.run(["--url", "http://any:9", *argv]) == 0
    assert cluster.calls[-1] == (method, url, body)
    assert json.loads(capsys.readouterr().out)


async def test_error_prints_json_and_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = FakeCluster()
    cluster.fail["/coordinatorStats"] = (404, {"error": "not_found", "message": "no such coordinator"})
    monkeypatch.setattr(admin_cli, "StreamtxClient",
                        functools.partial(StreamtxClient, transport=cluster.transport))
    assert await admin_cli.run(["--url", "http://any:9", "coordinator", "stats"]) == 1
    assert json.loads(capsys.readouterr().err)["error"] == "not_found"


def test_bad_boolean_is_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        admin_cli.build_parser().parse_args(["tc-batch-log", "set", "--enable", "maybe"])
