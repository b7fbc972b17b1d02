"""How records reach a pending-ack log: the PIP-160 buffered writer.

:func:`writer_factory` builds one :class:`~streamtx.batching.BufferedWriter`
per subscription from the batching settings, all sharing the process's
pending-ack batching metrics (labelled by cluster only, as in Pulsar).
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry

from streamtx.batching import BufferedWriter, pending_ack_metrics
from streamtx.ledger import Ledger
from streamtx.pendingack.settings import PendingAckSettings
from streamtx.pendingack.store import RecordWriter, WriterFactory
from streamtx.records.pendingack import Record, encode


def writer_factory(settings: PendingAckSettings, registry: CollectorRegistry = REGISTRY) -> WriterFactory:
    """A factory of per-subscription writers sharing one set of metrics (in ``registry``)."""
    metrics = pending_ack_metrics(settings.cluster, registry=registry)
    options = settings.batching.writer_kwargs()

    def make(ledger: Ledger, enabled: bool) -> RecordWriter:
        # ``enabled`` is the process-wide switch now, which the admin API may
        # have changed since start.
        writer: BufferedWriter[Record] = BufferedWriter(
            ledger, encode,
            max_records=options["max_records"], max_bytes=options["max_bytes"],
            max_delay_s=options["max_delay_s"], policy=options["policy"],
            enabled=enabled, metrics=metrics,
        )
        return writer

    return make
