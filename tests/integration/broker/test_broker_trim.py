"""A trim never passes what a subscription has yet to consume (nor an open transaction)."""

from __future__ import annotations

from pathlib import Path

from tests.integration.broker.conftest import BrokerFactory, values


def test_trim_stops_at_the_slowest_subscription(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    # Small segments, so the file ledger really deletes some (it trims whole segments).
    b = broker_factory(f"file://{tmp_path / 'ledgers'}?segment_bytes=256")
    b.create_topic("tr", 1)
    b.subscribe("tr", "slow", "Exclusive")
    b.subscribe("tr", "fast", "Exclusive")
    ids = [b.produce("tr", [f"m{i}"])["message_ids"][0] for i in range(30)]
    assert b.drain("tr", "fast") == [f"m{i}" for i in range(30)]
    got = b.fetch("tr", "slow", max=10)
    assert values(got) == [f"m{i}" for i in range(10)]
    b.ack("tr", "slow", [m["message_id"] for m in got])  # "slow" consumed 10 of 30

    out = b.call("POST", "/admin/v2/persistent/t/n/tr/trim", json={"partition": 0, "before": ids[-1]})
    first = tuple(int(x) for x in out["firstPosition"].split(":"))
    assert first > tuple(int(x) for x in ids[0].split(":")[:2]), "nothing was trimmed"
    assert first <= tuple(int(x) for x in ids[10].split(":")[:2]), "trimmed what 'slow' has yet to read"
    # Everything "slow" has not consumed is still delivered, also after a restart.
    b.proc.restart()
    assert b.drain("tr", "slow") == [f"m{i}" for i in range(10, 30)]

    # The topic's name and no partition: Pulsar's trim of a partitioned topic, every partition
    # as far as every subscription consumed (no position: a position is one partition's).
    b.create_topic("two", 2)
    b.subscribe("two", "s", "Exclusive")
    sent = [b.produce("two", [f"x{i}"], msg={"partition": i % 2})["message_ids"][0] for i in range(20)]
    got = b.fetch("two", "s", max=100)
    assert sorted(values(got)) == sorted(f"x{i}" for i in range(20))
    b.ack("two", "s", sent[:16])  # x16..x19 (two per partition) not consumed
    rows = b.call("POST", "/admin/v2/persistent/t/n/two/trim")["partitions"]
    assert [r["partition"] for r in rows] == [f"persistent://t/n/two-partition-{i}" for i in (0, 1)]
    for p, row in enumerate(rows):
        first = tuple(int(x) for x in row["firstPosition"].split(":"))
        assert first > tuple(int(x) for x in sent[p].split(":")[:2]), f"nothing trimmed on {p}"
        assert first <= tuple(int(x) for x in sent[16 + p].split(":")[:2]), f"trimmed past 's' on {p}"
    # A position without its partition: the partition it is of (a message id names its partition).
    out = b.call("POST", "/admin/v2/persistent/t/n/two/trim", json={"before": sent[0]})
    assert out["partition"] == "persistent://t/n/two-partition-0", out
    b.call("POST", "/admin/v2/persistent/t/n/two/trim", 404, json={"before": "987654321:0"})
    b.call("POST", "/admin/v2/persistent/t/n/two/trim", 404, json={"partition": 0, "before": sent[1]})
    b.call("POST", "/admin/v2/persistent/t/n/two-partition-1/trim", 404, json={"partition": 0})
    # What "s" has not consumed is still there (whole segments go: maybe some consumed ones too).
    b.subscribe("two", "late", "Exclusive")
    kept = b.drain("two", "late")
    assert {f"x{i}" for i in range(16, 20)} <= set(kept) and len(kept) < 20, kept


def test_a_replication_cursor_holds_back_trims_as_soon_as_its_partition_opens(
        broker_factory: BrokerFactory, tmp_path: Path) -> None:
    # The controller opened pulsar.repl.z once; the broker restarts (or the partition moves to
    # another broker replica) and a trim comes before the controller asks again: the cursor
    # opens with the partition, so nothing z has yet to receive is trimmed.
    b = broker_factory(f"file://{tmp_path / 'ledgers'}?segment_bytes=256")
    b.create_topic("rp", 1)
    b.call("POST", "/v1/replication/cursor",
           json={"topic": "persistent://t/n/rp", "partition": 0, "remote": "z"})
    ids = [b.produce("rp", [f"m{i}"])["message_ids"][0] for i in range(30)]
    b.proc.restart()
    stats = b.call("GET", "/admin/v2/persistent/t/n/rp/stats")["replication"]["z"]
    assert stats["replicationBacklog"] >= 30 and not stats["connected"]
    out = b.call("POST", "/admin/v2/persistent/t/n/rp/trim", json={"partition": 0, "before": ids[-1]})
    first = tuple(int(x) for x in out["firstPosition"].split(":"))
    assert first <= tuple(int(x) for x in ids[0].split(":")[:2]), "trimmed what z has yet to receive"


def test_a_removed_remotes_cursor_holds_back_no_trim_and_never_reopens(
        broker_factory: BrokerFactory, tmp_path: Path) -> None:
    # Issue 21 item 7: the remote z left the topic's policy (or was deleted); the controller
    # asks the broker to delete its cursors. Before, nothing could: pulsar.repl.z reopened with
    # the partition at every start and held back every trim for good.
    b = broker_factory(f"file://{tmp_path / 'ledgers'}?segment_bytes=256")
    b.create_topic("gone", 1)
    topic = "persistent://t/n/gone"
    b.call("POST", "/v1/replication/cursor", json={"topic": topic, "partition": 0, "remote": "z"})
    ids = [b.produce("gone", [f"m{i}"])["message_ids"][0] for i in range(30)]
    listed = {t["topic"]: t for t in b.call("GET", "/v1/replication/topics")["topics"]}
    assert listed[topic]["remotes"] == ["z"]
    for _ in range(2):  # idempotent
        b.call("POST", "/v1/replication/cursor/delete", json={"topic": topic, "remote": "z"})
    listed = {t["topic"]: t for t in b.call("GET", "/v1/replication/topics")["topics"]}
    assert listed[topic]["remotes"] == []
    b.proc.restart()
    assert "z" not in b.call("GET", "/admin/v2/persistent/t/n/gone/stats")["replication"]
    out = b.call("POST", "/admin/v2/persistent/t/n/gone/trim", json={"partition": 0, "before": ids[-1]})
    first = tuple(int(x) for x in out["firstPosition"].split(":"))
    assert first > tuple(int(x) for x in ids[0].split(":")[:2]), "z's deleted cursor still held the trim back"
    b.call("POST", "/v1/replication/cursor/delete", 404,
           json={"topic": "persistent://t/n/nope", "remote": "z"})
