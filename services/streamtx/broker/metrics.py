"""The broker's domain metrics (default prometheus registry).

Besides the counters below, two gauges per partition are read at scrape time
from every live partition's transaction buffer (:class:`MaxReadCollector`):
``streamtx_broker_tb_max_read_position_entry`` (the maxReadPosition's entry id:
readers see nothing past it) and ``streamtx_broker_tb_max_read_position_lag_entries``
(log offsets between it and the last entry: what an open transaction holds
back). The "maxReadPosition not moving" alert reads the first beside
``streamtx_broker_messages_in_total``.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Protocol

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

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


class MaxReadSource(Protocol):
    """A partition, as the collector sees it."""

    def max_read_figures(self) -> tuple[tuple[str, str], int, int] | None:
        """((cluster, topic), maxReadPosition entry id, lag in entries); None before any entry."""


_sources: weakref.WeakSet[MaxReadSource] = weakref.WeakSet()


class MaxReadCollector(Collector):
    """Reads every watched partition's maxReadPosition at scrape time."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["cluster", "topic"]
        entry = GaugeMetricFamily(
            "streamtx_broker_tb_max_read_position_entry",
            "Entry id of the transaction buffer's maxReadPosition (readers see nothing past it)",
            labels=labels,
        )
        lag = GaugeMetricFamily(
            "streamtx_broker_tb_max_read_position_lag_entries",
            "Log offsets between the maxReadPosition and the last entry (held back by open txns)",
            labels=labels,
        )
        for source in list(_sources):
            figures = source.max_read_figures()
            if figures is not None:
                names, at, behind = figures
                entry.add_metric(list(names), at)
                lag.add_metric(list(names), behind)
        yield entry
        yield lag


def watch(source: MaxReadSource) -> None:
    _sources.add(source)


def unwatch(source: MaxReadSource) -> None:
    _sources.discard(source)


REGISTRY.register(MaxReadCollector())
