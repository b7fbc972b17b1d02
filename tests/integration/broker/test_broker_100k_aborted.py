"""100,000 aborted transactions in segmented snapshots: a real broker recovers them exactly."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from streamtx.broker.pendingack_client import PendingAckClient
from streamtx.broker.registry import Broker
from streamtx.broker.settings import BrokerSettings
from streamtx.broker.topic import Outgoing
from streamtx.contracts.states import Action
from streamtx.ledger import open_ledger_factory
from streamtx.records.partition import Message
from tests.integration.broker.conftest import BrokerFactory

N_TXNS = 100_000
SEGMENT = 1000
CHUNK = 2000


async def build(ledger_url: str) -> list[str]:
    """Write the partition with the library (much faster than 200k HTTP calls); the visible values."""
    settings = BrokerSettings(ledger_url=ledger_url, snapshot_segment_size=SEGMENT,  # type: ignore[call-arg]
                              snapshot_every_ops=20_000, snapshot_interval_s=3600)
    ledgers = open_ledger_factory(ledger_url)
    broker = Broker(ledgers, settings, PendingAckClient(None, 1.0))
    await broker.start()
    await broker.create_topic("persistent://t/n/big", 1)
    topic = broker.topic("persistent://t/n/big")
    part = topic.partitions[0]
    visible: list[str] = []
    for base in range(0, N_TXNS, CHUNK):
        txns = range(base, base + CHUNK)
        await asyncio.gather(*(
            topic.produce([Outgoing(Message(f"t{i}".encode()), 0)], (7, i), None) for i in txns))
        plain = [f"plain{i}" for i in txns if i % 500 == 0]
        for v in plain:
            await topic.produce([Outgoing(Message(v.encode()), 0)], None, None)
        await asyncio.gather(*(
            part.end_txn((7, i), Action.COMMIT if i % 1000 == 999 else Action.ABORT) for i in txns))
        visible += [f"t{i}" for i in txns if i % 1000 == 999] + plain
    await part.take_snapshot()
    # A few more after the snapshot, recovered by replaying the partition.
    await topic.produce([Outgoing(Message(b"tail-aborted"), 0)], (8, 1), None)
    await part.end_txn((8, 1), Action.ABORT)
    await topic.produce([Outgoing(Message(b"tail-plain"), 0)], None, None)
    visible.append("tail-plain")
    assert len(part.tb.aborted) == N_TXNS - N_TXNS // 1000 + 1
    await broker.close()
    await ledgers.close()
    return visible


@pytest.mark.slow
def test_100k_aborted_txns_recover(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'ledgers'}"
    t0 = time.perf_counter()
    visible = asyncio.run(build(url))
    print(f"\nbuilt {N_TXNS} txns in {time.perf_counter() - t0:.1f}s")
    expected_aborted = N_TXNS - N_TXNS // 1000 + 1
    broker = None
    for attempt in range(2):  # start, then kill -9 and start again
        t0 = time.perf_counter()
        if broker is None:
            broker = broker_factory(url, snapshot_segment_size=SEGMENT)
        else:
            broker.proc.restart()
        ready_s = time.perf_counter() - t0
        stats = broker.tb_stats("big", 0)
        print(f"start #{attempt + 1}: ready in {ready_s:.2f}s, TB recovery {stats['recoveryTimeMs']:.0f} ms, "
              f"segments {stats['segmentsSize']}, unsealed {stats['unsealedAbortedTxnIdSize']}")
        assert stats["abortedTxnCount"] == expected_aborted
        assert stats["ongoingTxnSize"] == 0
        assert stats["segmentsSize"] == expected_aborted // SEGMENT
        broker.subscribe("big", f"r{attempt}", "Exclusive", "earliest")
        assert broker.drain("big", f"r{attempt}", consumer="x", ack=False) == visible
