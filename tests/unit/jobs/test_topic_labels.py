"""Message and pending-ack metrics label a topic the same way, so they join (issue 22 item 9).

The ledger names come from the services' own naming: a partition ledger drops
``persistent://`` (``topics/t/n/x-partition-0``), a pending-ack ledger keeps it
(``pendingack/persistent://t/n/x-partition-0/sub``); the ``.prom`` file had
``topic="t/n/x"`` on message metrics and ``topic="persistent://t/n/x-partition-0"``
on pending-ack ones.
"""

from __future__ import annotations

from streamtx.batching.codec import encode_batch
from streamtx.broker.partition import partition_ledger_name, snapshot_ledger_name
from streamtx.contracts.txnid import TxnId
from streamtx.jobs import aggregate
from streamtx.jobs.sources import Split, Task, classify
from streamtx.pendingack.store import log_name
from streamtx.records import partition as codec
from streamtx.records import pendingack as pa

PARTITION = "persistent://tn/ns/orders-partition-3"


def _pairs(name: str, payload: bytes) -> dict[tuple[object, ...], object]:
    ref = classify("file:///x", name)
    assert ref is not None
    return dict(aggregate.aggregate_task(Task(Split(ref, 0, 0, 1), 0, 0, 1), [(0, payload)], None, None))


def test_message_and_pending_ack_metrics_share_topic_and_partition_labels() -> None:
    names = (partition_ledger_name(PARTITION), log_name(PARTITION, "sub"), snapshot_ledger_name(PARTITION))
    for ref in [classify("file:///x", n) for n in names]:
        assert ref is not None
        assert ref.label("topic") == "persistent://tn/ns/orders", ref
        assert ref.label("partition") == PARTITION, ref

    messages = _pairs(partition_ledger_name(PARTITION),
                      codec.encode_batch([codec.Message(b"v")], publish_time_ms=1))
    record = pa.encode(pa.PendingAck(TxnId(1, 2), (pa.MessageId(1, 1),)))
    acks = _pairs(log_name(PARTITION, "billing"), encode_batch([record, record]))
    metrics = {key[1]: dict(key[2]) for key in [*messages, *acks] if key[0] in ("c", "h")}
    assert {"partition_messages", "message_size_bytes", "pending_ack_log_records_per_entry"} <= set(metrics)
    assert {labels["topic"] for labels in metrics.values()} == {"persistent://tn/ns/orders"}, metrics
