"""How records reach a pending-ack log: the PIP-160 buffered writer.

:func:`writer_factory` builds one :class:`~streamtx.batching.BufferedWriter`
per subscription, sharing the process's pending-ack batching metrics. Until
the batching library is installed (it lands beside this service), a
:class:`DirectWriter` writes one record per entry, which the replay path reads
the same way (an unbatched entry is a single record).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry

from streamtx.ledger import Ledger, Position
from streamtx.pendingack.records import Record, encode
from streamtx.pendingack.settings import PendingAckSettings
from streamtx.pendingack.store import EntryDecoder, RecordWriter, WriterFactory

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DirectResult:
    """Where an unbatched record landed."""

    position: Position
    batch_index: int = 0
    batch_size: int = 1


class DirectWriter:
    """One record per entry, batching never on (the fallback writer)."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    async def write(self, record: Record) -> DirectResult:
        return DirectResult(await self._ledger.append(encode(record)))

    def set_enabled(self, enabled: bool) -> None:
        if enabled:
            log.warning("batched pending-ack writes requested, but streamtx.batching is not installed")


def _single(data: bytes) -> Sequence[bytes]:
    return [data]


def _module(name: str) -> Any:
    """The module, or None while it has not landed."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def batching_available() -> bool:
    """Whether the buffered writer and its metrics are installed."""
    package = _module("streamtx.batching")
    return (
        package is not None and hasattr(package, "BufferedWriter")
        and _module("streamtx.batching.metrics") is not None
    )


def entry_decoder() -> EntryDecoder:
    """Splits an entry into its records (batched or not)."""
    codec = _module("streamtx.batching.codec")
    if codec is None:
        return _single
    decode_entry: EntryDecoder = codec.decode_entry
    return decode_entry


def writer_factory(settings: PendingAckSettings, registry: CollectorRegistry = REGISTRY) -> WriterFactory:
    """A factory of per-subscription writers sharing one set of metrics (in ``registry``)."""
    if not batching_available():
        log.warning("streamtx.batching not installed: pending-ack records are written unbatched")
        return lambda ledger, enabled: DirectWriter(ledger)
    batching = _module("streamtx.batching")
    batching_metrics = _module("streamtx.batching.metrics")

    metrics: Any = batching_metrics.pending_ack_metrics(settings.cluster, registry=registry)

    def make(ledger: Ledger, enabled: bool) -> RecordWriter:
        writer: RecordWriter = batching.BufferedWriter(
            ledger, encode,
            max_records=settings.pending_ack_batch_max_records,
            max_bytes=settings.pending_ack_batch_max_bytes,
            max_delay_s=settings.pending_ack_batch_max_delay_ms / 1000,
            policy=settings.pending_ack_batch_policy,
            enabled=enabled,
            metrics=metrics,
        )
        return writer

    return make
