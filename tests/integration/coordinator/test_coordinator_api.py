"""The coordinator's REST API against a real process, on the file and kafka backends."""

from __future__ import annotations

import json
from urllib.parse import quote

import httpx
import pytest

from tests.integration.coordinator.conftest import TOPIC, ClientFactory, TcFactory
from tests.integration.coordinator.participant import Participant

P0, P1 = f"{TOPIC}-partition-0", f"{TOPIC}-partition-1"
SUB = (TOPIC, "sub-a")


# Each also against 4 workers on one port with the Redis batch buffer: same answers
# (test_coordinator_workers.py has the failures particular to workers).
workers = pytest.mark.parametrize("tc_workers", [1, 4], indirect=True)


@pytest.mark.parametrize(("backend_url", "tc_workers"), [("file", 1), ("kafka", 1), ("file", 4)],
                         indirect=True)
async def test_lifecycle_commit_and_abort(
    backend_url: str, tc_factory: TcFactory, client_factory: ClientFactory, participant: Participant
) -> None:
    tc = client_factory(tc_factory(backend_url))

    txn = await tc.create(timeout_ms=30_000)
    body = await tc.get(txn)
    assert body["state"] == "OPEN" and body["timeout_at"] - body["opened_at"] == 30_000
    await tc.add_partitions(txn, [P0, P1, P0])
    await tc.add_partitions(txn, [P1])  # idempotent
    await tc.add_subscriptions(txn, [SUB])
    body = await tc.get(txn)
    assert body["partitions"] == [P0, P1]
    assert body["subscriptions"] == [{"topic": TOPIC, "subscription": "sub-a"}]

    assert await tc.commit(txn) == {"txn_id": txn, "state": "COMMITTED"}
    assert participant.count("subscriptions/prepare", txn) == 1
    assert participant.actions(txn) == {
        ("partition", P0): "commit", ("partition", P1): "commit",
        ("subscription", f"{TOPIC}|sub-a"): "commit",
    }
    calls = len(participant.calls)
    assert await tc.commit(txn) == {"txn_id": txn, "state": "COMMITTED"}  # idempotent, no new calls
    assert len(participant.calls) == calls
    await tc.abort(txn, expect=409)
    await tc.add_partitions(txn, [P0], expect=409)
    assert (await tc.get(txn))["state"] == "COMMITTED"

    other = await tc.create()
    assert other != txn
    assert (await tc.get(other))["timeout_at"] - (await tc.get(other))["opened_at"] == 60_000
    await tc.add_partitions(other, [P0])
    assert await tc.abort(other) == {"txn_id": other, "state": "ABORTED"}
    assert await tc.abort(other) == {"txn_id": other, "state": "ABORTED"}
    assert (await tc.commit(other, expect=409))["error"] == "conflict"
    await tc.add_subscriptions(other, [SUB], expect=409)
    assert participant.actions(other) == {("partition", P0): "abort"}
    assert participant.count("subscriptions/prepare", other) == 0
    assert participant.violations == []


@workers
async def test_client_errors_are_4xx_never_500(
    file_url: str, tc_factory: TcFactory, client_factory: ClientFactory
) -> None:
    tc = client_factory(tc_factory(file_url, max_timeout_ms=10_000, default_timeout_ms=5000))
    txn = await tc.create()

    bad_ids = ["x", "1", "1:2:3", "-1:0", f"{2**64}:0", "1:%C2%B2", "9" * 400 + ":1"]
    for bad in bad_ids:
        assert (await tc.get(bad, expect=400))["error"] == "malformed"
        await tc.commit(bad, expect=400)
    await tc.get("0:999999", expect=404)
    await tc.get(f"{5 << 48}:0", expect=404)  # coordinator 5 is not served here
    await tc.commit("0:999999", expect=404)

    await tc.call("POST", "/v1/transactions", 400, json={"timeout_ms": 10_001})
    await tc.call("POST", "/v1/transactions", 400, json={"timeout_ms": 0})
    await tc.call("POST", "/v1/transactions", 400, json={"timeout_ms": "soon"})
    await tc.call("POST", "/v1/transactions", 400, json=[1])
    await tc.call("POST", "/v1/transactions", 400, content=b"{not json",
                  headers={"content-type": "application/json"})
    assert await tc.call("POST", "/v1/transactions", 200)  # no body: the default timeout
    await tc.add_partitions(txn, ["not-a-topic"], expect=400)
    await tc.add_partitions(txn, [], expect=400)
    await tc.call("POST", f"/v1/transactions/{txn}/partitions", 400, json={"partitions": "x"})
    await tc.call("POST", f"/v1/transactions/{txn}/subscriptions", 400,
                  json={"subscriptions": [{"topic": TOPIC}]})
    await tc.call("POST", f"/v1/transactions/{txn}/subscriptions", 400,
                  json={"subscriptions": [{"topic": TOPIC, "subscription": ""}]})
    await tc.admin("transactionMetadata/x/1", expect=400)
    await tc.admin("transactionMetadata/0/99999", expect=404)
    await tc.admin("coordinatorInternalStats/x", expect=400)
    await tc.admin("coordinatorInternalStats/9", expect=404)
    await tc.admin("slowTransactions/-5", expect=400)
    await tc.admin("tcBatchLog", "POST", 400, json={"enabled": "maybe"})
    await tc.admin("tcBatchLog?coordinator_id=9", "POST", 404, json={"enabled": True})
    assert (await tc.get(txn))["state"] == "OPEN"


async def test_conflicting_prepare_aborts_and_answers_409(
    file_url: str, tc_factory: TcFactory, client_factory: ClientFactory, participant: Participant
) -> None:
    tc = client_factory(tc_factory(file_url))
    txn = await tc.create()
    await tc.add_partitions(txn, [P0])
    await tc.add_subscriptions(txn, [SUB, (TOPIC, "sub-b")])
    participant.conflict_txns.add(txn)

    err = await tc.commit(txn, expect=409)
    assert err["error"] == "conflict" and "overlapping commit" in err["message"]
    assert (await tc.get(txn))["state"] == "ABORTED"
    assert set(participant.actions(txn).values()) == {"abort"}
    assert len(participant.actions(txn)) == 3
    await tc.commit(txn, expect=409)
    assert (await tc.abort(txn))["state"] == "ABORTED"


@workers
async def test_fanout_retries_until_the_participant_succeeds(
    file_url: str, tc_factory: TcFactory, client_factory: ClientFactory, participant: Participant
) -> None:
    tc = client_factory(tc_factory(file_url))
    txn = await tc.create()
    await tc.add_partitions(txn, [P0, P1])
    await tc.add_subscriptions(txn, [SUB])
    participant.fail_next = 2  # the two first prepare tries: the TC's client retries them
    assert (await tc.commit(txn))["state"] == "COMMITTED"
    assert participant.count("subscriptions/prepare", txn, 503) == 2

    txn = await tc.create()
    await tc.add_partitions(txn, [P0, P1])
    await tc.add_subscriptions(txn, [SUB])
    participant.down = True  # prepare fails for good: 503, the transaction stays open
    await tc.commit(txn, expect=503)
    assert (await tc.get(txn))["state"] == "OPEN"
    participant.down = False
    participant.fail_ends = 12  # now the ends fail a dozen times between them
    assert (await tc.commit(txn))["state"] == "COMMITTED"
    failed = sum(participant.count(p, txn, 503) for p in ("partitions/end", "subscriptions/end"))
    assert failed >= 10
    assert len(participant.actions(txn)) == 3 and set(participant.actions(txn).values()) == {"commit"}


async def test_admin_api(
    file_url: str, tc_factory: TcFactory, client_factory: ClientFactory, participant: Participant
) -> None:
    tc = client_factory(tc_factory(file_url, coordinator_ids="3,4", finished_retention_ms=0))
    txns = [await tc.create() for _ in range(6)]
    owners = {int(t.split(":")[0]) >> 48 for t in txns}
    assert owners == {3, 4}  # round robin over the coordinators of the process

    stats = await tc.admin("coordinatorStats")
    assert set(stats) == {"3", "4"}
    for s in stats.values():
        assert s["state"] == "Ready" and s["ongoingTxnSize"] == 3
        assert {"leastSigBits", "lowWaterMark", "recoverTime"} <= set(s)

    most, least = txns[0].split(":")
    await tc.add_partitions(txns[0], [P0])
    await tc.add_subscriptions(txns[0], [SUB])
    meta = await tc.admin(f"transactionMetadata/{most}/{least}")
    assert meta["txnId"] == txns[0] and meta["status"] == "OPEN"
    assert meta["producedPartitions"] == [P0] and meta["ackedPartitions"] == {TOPIC: ["sub-a"]}
    assert set(await tc.admin("slowTransactions/0")) == set(txns)
    assert await tc.admin("slowTransactions/3600000") == {}

    internal = await tc.admin("coordinatorInternalStats/3")
    log_stats = internal["transactionLogStats"]
    assert log_stats["managedLedgerName"] == "txnlog/standalone/3"
    assert log_stats["ledgers"]
    assert all({"ledgerId", "entries", "size"} <= set(x) for x in log_stats["ledgers"])

    assert await tc.admin("tcBatchLogStat") == {
        "txnTcBatchLogEnabled": True, "coordinatorArray": [{"3": True}, {"4": True}]}
    out = await tc.admin("tcBatchLog?coordinator_id=4", "POST", json={"enabled": False})
    assert out == {"txnTcBatchLogEnabled": False, "coordinatorArray": [{"3": True}, {"4": False}]}
    await tc.admin("tcBatchLog", "POST", json={"enabled": False})
    assert (await tc.admin("tcBatchLogStat"))["coordinatorArray"] == [{"3": False}, {"4": False}]

    metrics = (await tc.http.get("/metrics")).text
    for name in (
        "pulsar_txn_tc_log_records_count_per_entry", "pulsar_txn_tc_batched_log_entry_size_bytes",
        "pulsar_txn_tc_batched_log_oldest_record_delay_time_seconds",
        "pulsar_txn_tc_batched_log_triggering_count_by_records",
        "pulsar_txn_created_total", "pulsar_txn_committed_total", "pulsar_txn_aborted_total",
        "pulsar_txn_timeout_total", "pulsar_txn_append_log_total", "pulsar_txn_active_count",
        "pulsar_txn_execution_latency_seconds", "http_requests_total",
        # the names Pulsar shipped (its own dashboards read these)
        "pulsar_txn_tc_bufferedwriter_batch_records", "pulsar_txn_tc_bufferedwriter_batch_size_bytes",
        "pulsar_txn_tc_bufferedwriter_batch_oldest_record_delay_seconds",
        "pulsar_txn_tc_bufferedwriter_flush_trigger_max_records_total",
        "pulsar_txn_tc_bufferedwriter_flush_trigger_max_size_total",
        "pulsar_txn_tc_bufferedwriter_flush_trigger_max_delay_total",
        "pulsar_txn_tc_bufferedwriter_flush_trigger_large_data_total",
        "pulsar_txn_committed_count", "pulsar_txn_aborted_count", "pulsar_txn_timeout_count",
    ):
        assert name in metrics, name
    assert 'pulsar_txn_created_total{cluster="standalone",coordinator_id="3"} 3.0' in metrics
    assert 'pulsar_txn_created_count{cluster="standalone",coordinator_id="3"} 3.0' in metrics
    assert "# TYPE pulsar_txn_created_count gauge" in metrics


async def test_readyz_and_cluster(file_url: str, tc_factory: TcFactory) -> None:
    proc = tc_factory(file_url)
    async with httpx.AsyncClient(base_url=proc.url) as http:
        assert (await http.get("/readyz")).status_code == 200
        cluster = (await http.get("/v1/cluster")).json()
        assert cluster["cluster"] == "standalone" and "broker" in cluster["services"]
        assert (await http.get("/openapi.json")).status_code == 200


@pytest.mark.parametrize("ids", ["[]", "1,1", "70000"])
def test_invalid_settings_stop_the_start(file_url: str, tc_factory: TcFactory, ids: str) -> None:
    with pytest.raises(RuntimeError, match="exited"):
        tc_factory(file_url, coordinator_ids=ids)


def test_invalid_batching_settings_stop_the_start(file_url: str, tc_factory: TcFactory) -> None:
    with pytest.raises(RuntimeError, match="max_records"):
        tc_factory(file_url, batching__max_records=5)


def test_fuzzed_client_input_never_yields_500(file_url: str, tc_factory: TcFactory) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    proc = tc_factory(file_url)
    http = httpx.Client(base_url=proc.url, timeout=30)
    txn = http.post("/v1/transactions", json={}).json()["txn_id"]
    segment = st.one_of(
        st.just(txn), st.text(min_size=1, max_size=30).filter(lambda s: s not in {".", ".."}),
        st.integers(-(2**70), 2**70).map(str), st.just("9" * 5000),
    ).map(lambda s: quote(s, safe=":"))
    paths = st.one_of(
        st.builds(lambda t, a: f"/v1/transactions/{t}/{a}", segment,
                  st.sampled_from(["commit", "abort", "partitions", "subscriptions", ""])),
        st.builds(lambda a, b: f"/admin/v3/transactions/transactionMetadata/{a}/{b}", segment, segment),
        st.builds(lambda a: f"/admin/v3/transactions/slowTransactions/{a}", segment),
        st.builds(lambda a: f"/admin/v3/transactions/coordinatorInternalStats/{a}", segment),
        st.builds(lambda a: f"/admin/v3/transactions/tcBatchLog?coordinator_id={a}", segment),
        st.just("/v1/transactions"),
    )
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers(-(2**80), 2**80) | st.floats() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
        max_leaves=8,
    )
    partition = st.text(max_size=40) | st.just(f"{TOPIC}-partition-0")
    sub = st.fixed_dictionaries({"topic": st.text(max_size=20) | st.just(TOPIC), "subscription": json_values})
    bodies = st.one_of(
        json_values,
        st.fixed_dictionaries({"timeout_ms": json_values}),
        st.fixed_dictionaries({"partitions": st.lists(partition)}),
        st.fixed_dictionaries({"subscriptions": st.lists(sub)}),
        st.fixed_dictionaries({"enabled": json_values}),
    )

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(paths, st.sampled_from(["GET", "POST"]), bodies)
    def check(path: str, method: str, body: object) -> None:
        if path.startswith("/admin/v3/transactions/tcBatchLog") and body in ({"enabled": True},):
            body = {"enabled": "maybe"}  # do not switch batching around in this test
        r = http.request(method, path, content=json.dumps(body, allow_nan=True),
                         headers={"content-type": "application/json"})
        assert r.status_code < 500, (method, path, body, r.status_code, r.text)
        if r.status_code >= 400:
            assert set(r.json()) == {"error", "message"}, r.text

    check()
    http.close()
