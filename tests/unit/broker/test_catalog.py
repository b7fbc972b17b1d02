"""The broker registry shared by replicas: each appends by fencing the others, nothing is lost."""

from __future__ import annotations

from streamtx.broker.catalog import Catalog
from streamtx.ledger import open_ledger_factory


async def test_replicas_take_turns_writing_the_registry_and_all_read_everything() -> None:
    ledgers = open_ledger_factory("memory://")
    a, b = Catalog(ledgers, "c", shared=True), Catalog(ledgers, "c", shared=True)
    try:
        await a.open()
        await b.open()  # opening as writer fenced a's handle
        await a.append({"kind": "topic", "topic": "persistent://t/n/x", "partitions": 2})  # reopens
        await b.append({"kind": "topic", "topic": "persistent://t/n/y", "partitions": 1})  # reopens
        await a.append({"kind": "subscription", "topic": "persistent://t/n/y", "subscription": "s",
                        "type": "Shared", "initial_position": "earliest"})
        await b.append({"kind": "subscription_replicated", "topic": "persistent://t/n/y",
                        "subscription": "s", "replicated": True})
        await a.append({"kind": "replication_cursor", "topic": "persistent://t/n/x", "remote": "b"})
        assert (a.reopens, b.reopens) == (3, 2)  # every append found the other's fence
        new_to_a = await a.refresh()
        assert [r["kind"] for r in new_to_a] == ["topic", "topic", "subscription", "subscription_replicated",
                                                 "replication_cursor"]
        await b.refresh()
        for c in (a, b):
            assert {n: t.partitions for n, t in c.topics.items()} == \
                {"persistent://t/n/x": 2, "persistent://t/n/y": 1}
            sub = c.topics["persistent://t/n/y"].subscriptions["s"]
            assert (sub.type, sub.replicated) == ("Shared", True)
            assert c.topics["persistent://t/n/x"].remotes == {"b"} and not c.topics["persistent://t/n/y"].remotes
        # A third reader replaying from scratch folds the same state.
        c = Catalog(ledgers, "c", shared=True)
        assert len(await c.open()) == 5 and c.topics.keys() == a.topics.keys()
        await c.close()
    finally:
        await a.close()
        await b.close()
        await ledgers.close()


async def test_the_first_record_of_a_topic_wins_on_every_replica() -> None:
    ledgers = open_ledger_factory("memory://")
    a, b = Catalog(ledgers, "c", shared=True), Catalog(ledgers, "c", shared=True)
    try:
        await a.open()
        await b.open()
        await a.append({"kind": "topic", "topic": "persistent://t/n/x", "partitions": 2})
        # b has not read a's record yet when it creates the same topic with 3 partitions.
        await b.append({"kind": "topic", "topic": "persistent://t/n/x", "partitions": 3})
        await a.refresh()
        assert a.topics["persistent://t/n/x"].partitions == b.topics["persistent://t/n/x"].partitions == 2
    finally:
        await a.close()
        await b.close()
        await ledgers.close()
