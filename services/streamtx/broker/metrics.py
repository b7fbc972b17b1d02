"""The broker's domain metrics (default prometheus registry)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

messages_in = Counter(
    "streamtx_broker_messages_in", "Messages stored by produce", ["cluster", "topic"]
)
messages_out = Counter(
    "streamtx_broker_messages_out", "Messages handed to consumers", ["cluster", "topic"]
)
bytes_in = Counter("streamtx_broker_bytes_in", "Payload bytes stored by produce", ["cluster", "topic"])
txn_markers = Counter(
    "streamtx_broker_txn_markers", "Commit/abort markers written", ["cluster", "topic", "action"]
)
tb_ongoing = Gauge(
    "pulsar_txn_tb_active_total", "Ongoing transactions in the transaction buffer", ["cluster", "topic"]
)
tb_aborted = Gauge(
    "pulsar_txn_tb_aborted_total", "Aborted transaction ids kept by the transaction buffer",
    ["cluster", "topic"],
)
tb_snapshots = Counter(
    "streamtx_broker_tb_snapshots", "Transaction buffer snapshots written", ["cluster", "topic"]
)
tb_recovery_seconds = Histogram(
    "streamtx_broker_tb_recovery_seconds", "Transaction buffer recovery time", ["cluster"],
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30),
)
redeliveries = Counter(
    "streamtx_broker_redeliveries", "Messages redelivered (ack timeout or nack)", ["cluster", "topic"]
)
