"""Pulsar's ``pulsar_replication_*`` metrics, per topic and remote cluster, read at scrape time.

Rates are messages (or bytes) per second over the last ten seconds; backlog and
delay are the values :meth:`Replication.refresh` last computed (every second).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator

from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from streamtx.broker.replication.state import Replication

_labels = ["cluster", "namespace", "topic", "remote_cluster"]
_live: weakref.WeakSet[Replication] = weakref.WeakSet()


def _namespace(topic: str) -> str:
    return "/".join(topic.removeprefix("persistent://").split("/")[:2])


class ReplicationCollector(Collector):
    """Reads every live broker's replication state (one per process outside tests)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        fams = {name: GaugeMetricFamily(f"pulsar_replication_{name}", text, labels=_labels)
                for name, text in (
            ("rate_in", "Messages per second received from the remote cluster"),
            ("rate_out", "Messages per second sent to the remote cluster"),
            ("throughput_in", "Payload bytes per second received from the remote cluster"),
            ("throughput_out", "Payload bytes per second sent to the remote cluster"),
            ("backlog", "Entries not yet replicated to the remote cluster"),
            ("delay_in_seconds", "Age of the oldest entry not yet replicated to the remote cluster"),
            ("connected_count", "1 while the replicator reaches the remote cluster"),
        )}
        for repl in list(_live):
            for (topic, remote), values in repl.metric_values().items():
                labels = [repl.cluster, _namespace(topic), topic, remote]
                for name, value in values.items():
                    fams[name].add_metric(labels, value)
        yield from fams.values()


def watch(repl: Replication) -> None:
    """Report ``repl`` in ``/metrics`` while it lives."""
    _live.add(repl)


REGISTRY.register(ReplicationCollector())
