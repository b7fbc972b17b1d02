"""PIP-160 metrics of a buffered log writer, with the seed's names and buckets.

Two families exist, each registered once per :class:`CollectorRegistry`:

* the transaction log (labels ``cluster``, ``coordinator_id``), see :func:`tc_metrics`:
  ``pulsar_txn_tc_log_records_count_per_entry``,
  ``pulsar_txn_tc_batched_log_entry_size_bytes``,
  ``pulsar_txn_tc_batched_log_oldest_record_delay_time_seconds`` (histograms) and
  ``pulsar_txn_tc_batched_log_triggering_count_by_records`` / ``_by_size`` /
  ``_by_delay_time`` (counters);
* the pending-ack logs (label ``cluster``), see :func:`pending_ack_metrics`: the
  same six under ``pulsar_pending_ack_batched_log_`` (records per entry included).

Counters are exposed the Prometheus way, with a ``_total`` suffix on the sample
(``pulsar_txn_tc_batched_log_triggering_count_by_records_total``).

Every batched entry counts exactly one trigger, so the three counters add up to
the entries written. A writer gets a :class:`BatchedLogMetrics`, a view with its
labels bound once (updates on the hot path touch no label lookup).
"""

from __future__ import annotations

import enum
import weakref
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

__all__ = [
    "DELAY_BUCKETS_S",
    "PENDING_ACK_PREFIX",
    "RECORDS_BUCKETS",
    "SIZE_BUCKETS_BYTES",
    "TC_PREFIX",
    "BatchedLogMetrics",
    "FlushTrigger",
    "pending_ack_metrics",
    "tc_metrics",
]

# Buckets from the seed (PIP-160). The delay is in seconds: Pulsar's own code
# declared 1, 5, 10 (seconds) by mistake, so every sample fell in the first.
RECORDS_BUCKETS = (10.0, 50.0, 100.0, 200.0, 500.0, 1000.0)
SIZE_BUCKETS_BYTES = (128.0, 512.0, 1024.0, 2048.0, 4096.0, 16384.0, 102400.0, 1048576.0)
DELAY_BUCKETS_S = (0.001, 0.005, 0.01)

TC_PREFIX = "pulsar_txn_tc_batched_log_"
_TC_RECORDS_NAME = "pulsar_txn_tc_log_records_count_per_entry"  # the seed's one odd name
PENDING_ACK_PREFIX = "pulsar_pending_ack_batched_log_"


class FlushTrigger(enum.Enum):
    """Why a batch was flushed; each maps onto one of the three PIP-160 counters."""

    RECORDS = "records"  # max records reached
    SIZE = "size"  # max bytes reached, or a record too large to share an entry arrived
    DELAY = "delay"  # max delay since the first buffered record passed
    IDLE = "idle"  # auto policy: no append in flight, flushed at once (counted as delay)
    IN_FLIGHT_DONE = "in_flight_done"  # auto policy: the append in flight completed (delay)
    SWITCHED_OFF = "switched_off"  # batching switched off at run time (counted as delay)


@dataclass(frozen=True)
class _Families:
    labelnames: tuple[str, ...]
    records: Histogram
    size: Histogram
    delay: Histogram
    by_records: Counter
    by_size: Counter
    by_delay: Counter


# One set of families per (registry, prefix). Weak keys: a test's throwaway
# registry does not outlive the test, and a new one never inherits its families.
_families: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, _Families]] = (
    weakref.WeakKeyDictionary()
)


def _families_of(
    registry: CollectorRegistry, prefix: str, records_name: str, labelnames: tuple[str, ...]
) -> _Families:
    by_prefix = _families.setdefault(registry, {})
    fam = by_prefix.get(prefix)
    if fam is not None:
        if fam.labelnames != labelnames:
            raise ValueError(
                f"metrics {prefix}* are registered with labels {fam.labelnames}, not {labelnames}"
            )
        return fam
    what = "transaction log" if prefix == TC_PREFIX else "log"

    def counter(name: str, bound: str) -> Counter:
        return Counter(
            prefix + name, f"Batched {what} flushes triggered by {bound}", labelnames,
            registry=registry,
        )

    fam = by_prefix[prefix] = _Families(
        labelnames=labelnames,
        records=Histogram(
            records_name, f"Records per batched {what} entry", labelnames,
            buckets=RECORDS_BUCKETS, registry=registry,
        ),
        size=Histogram(
            prefix + "entry_size_bytes", f"Size of each batched {what} entry, in bytes",
            labelnames, buckets=SIZE_BUCKETS_BYTES, registry=registry,
        ),
        delay=Histogram(
            prefix + "oldest_record_delay_time_seconds",
            f"Time the oldest record of a batched {what} entry spent buffered, in seconds",
            labelnames, buckets=DELAY_BUCKETS_S, registry=registry,
        ),
        by_records=counter("triggering_count_by_records", "max records"),
        by_size=counter("triggering_count_by_size", "max size"),
        by_delay=counter("triggering_count_by_delay_time", "max delay (or an idle log)"),
    )
    return fam


class BatchedLogMetrics:
    """The PIP-160 metrics of one writer: the families of ``prefix`` with labels bound.

    ``records_name`` overrides the records-per-entry histogram's name (default
    ``<prefix>records_count_per_entry``). Families are created on first use in
    ``registry`` and shared by every view with the same prefix.
    """

    def __init__(
        self,
        prefix: str,
        labels: Mapping[str, str],
        *,
        records_name: str | None = None,
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        fam = _families_of(
            registry, prefix, records_name or prefix + "records_count_per_entry", tuple(labels)
        )
        values = tuple(labels.values())
        self._records = fam.records.labels(*values)
        self._size = fam.size.labels(*values)
        self._delay = fam.delay.labels(*values)
        self._by_records = fam.by_records.labels(*values)
        self._by_size = fam.by_size.labels(*values)
        self._by_delay = fam.by_delay.labels(*values)
        self._counter_of = {
            FlushTrigger.RECORDS: self._by_records,
            FlushTrigger.SIZE: self._by_size,
            FlushTrigger.DELAY: self._by_delay,
            FlushTrigger.IDLE: self._by_delay,
            FlushTrigger.IN_FLIGHT_DONE: self._by_delay,
            FlushTrigger.SWITCHED_OFF: self._by_delay,
        }

    def observe_flush(
        self, trigger: FlushTrigger, records: int, size_bytes: int, oldest_delay_s: float
    ) -> None:
        """Record one batched entry: why it was flushed, its records, size and oldest delay."""
        self._counter_of[trigger].inc()
        self._records.observe(records)
        self._size.observe(size_bytes)
        self._delay.observe(oldest_delay_s)


def tc_metrics(
    cluster: str, coordinator_id: int | str, registry: CollectorRegistry = REGISTRY
) -> BatchedLogMetrics:
    """The transaction-log writer metrics of one coordinator."""
    return BatchedLogMetrics(
        TC_PREFIX,
        {"cluster": cluster, "coordinator_id": str(coordinator_id)},
        records_name=_TC_RECORDS_NAME,
        registry=registry,
    )


def pending_ack_metrics(cluster: str, registry: CollectorRegistry = REGISTRY) -> BatchedLogMetrics:
    """The pending-ack log writer metrics of a cluster (shared by every subscription)."""
    return BatchedLogMetrics(PENDING_ACK_PREFIX, {"cluster": cluster}, registry=registry)
