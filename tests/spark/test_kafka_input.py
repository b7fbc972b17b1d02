"""The jobs reading Kafka ledgers (tansu), by offset range inside Spark tasks."""

from __future__ import annotations

import asyncio
import bisect
import random
from typing import Any

import pytest
from tests.conftest import kafka_url

from streamtx.batching.codec import MAGIC, decode_entry, encode_batch
from streamtx.batching.metrics import RECORDS_BUCKETS
from streamtx.contracts.txnid import TxnId
from streamtx.jobs import histograms
from streamtx.ledger import Position, open_ledger_factory
from streamtx.records import txnlog as tc

pytestmark = pytest.mark.kafka
NAME = "txnlog/k1/2"


async def _write(url: str) -> list[bytes]:
    """Batched and unbatched entries through two writers (the second fences the first); what is live."""
    rng = random.Random(5)
    factory = open_ledger_factory(url)
    try:
        for _ in range(2):
            ledger = await factory.open(NAME, writer=True)
            for i in range(60):
                txn = TxnId.of(2, rng.randint(0, 10**6))
                recs = [tc.encode(tc.NewTxn(txn, 1000, 1_700_000_000_000 + i))] * rng.randint(1, 40)
                await ledger.append(recs[0] if len(recs) == 1 else encode_batch(recs))
            await ledger.close()
        reader = await factory.open(NAME, writer=False)
        entries = await reader.read(Position(reader.ledger_id, 0), 10_000)
        await reader.close()
        return [e.data for e in entries]
    finally:
        await factory.close()


def test_histograms_of_a_kafka_ledger(spark: Any, kafka_bootstrap: str) -> None:
    url = kafka_url(kafka_bootstrap)
    live = asyncio.run(_write(url))
    assert len(live) == 120  # fences are not entries
    # 25 entries per task: several tasks per ledger, each reading its own offset range.
    results = histograms.compute(spark, url, names=[NAME, "pendingack/none/s"], split_bytes=1 << 20,
                                 split_entries=25)
    assert results.extra["tasks"] >= 5
    expected = [0] * (len(RECORDS_BUCKETS) + 1)
    for data in live:
        if data[:2] == MAGIC:
            expected[bisect.bisect_left(RECORDS_BUCKETS, len(decode_entry(data)))] += 1
    labels = (("cluster", "k1"), ("coordinator_id", "2"))
    assert results.histograms["tc_log_records_per_entry"][labels].counts == expected
    unbatched = sum(d[:2] != MAGIC for d in live)
    assert results.gauges["log_unbatched_entries"][(("log", "tc"), *labels)] == unbatched
