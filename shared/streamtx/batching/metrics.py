"""PIP-160 metrics of a buffered log writer, under two sets of names.

Each writer feeds two names for every figure, so dashboards written for either
work: the PIP-160 proposal's and the ones Pulsar finally shipped.

* the transaction log (labels ``cluster``, ``coordinator_id``), see :func:`tc_metrics`:
  ``pulsar_txn_tc_log_records_count_per_entry``,
  ``pulsar_txn_tc_batched_log_entry_size_bytes``,
  ``pulsar_txn_tc_batched_log_oldest_record_delay_time_seconds`` (histograms) and
  ``pulsar_txn_tc_batched_log_triggering_count_by_records`` / ``_by_size`` /
  ``_by_delay_time`` (counters); as shipped: ``pulsar_txn_tc_bufferedwriter_batch_records``,
  ``..._batch_size_bytes``, ``..._batch_oldest_record_delay_seconds`` (histograms) and
  ``pulsar_txn_tc_bufferedwriter_flush_trigger_max_records`` / ``_max_size`` /
  ``_max_delay`` / ``_large_data`` (counters);
* the pending-ack logs (label ``cluster``), see :func:`pending_ack_metrics`: the
  same under ``pulsar_pending_ack_batched_log_`` (records per entry included)
  and ``pulsar_txn_pending_ack_store_bufferedwriter_``.

Counters are exposed the Prometheus way, with a ``_total`` suffix on the sample
(``pulsar_txn_tc_batched_log_triggering_count_by_records_total``).

Every batched entry counts exactly one trigger in each set, so each set's
counters add up to the entries written. The shipped set tells a batch sealed
because a record too large to share an entry arrived (``large_data``) from one
sealed at the size limit; the PIP-160 proposal counts both ``by_size``. A writer gets a
:class:`BatchedLogMetrics`, a view with its labels bound once (updates on the
hot path touch no label lookup).
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
    "SHIPPED_PENDING_ACK_PREFIX",
    "SHIPPED_TC_PREFIX",
    "SIZE_BUCKETS_BYTES",
    "TC_PREFIX",
    "BatchedLogMetrics",
    "FlushTrigger",
    "pending_ack_metrics",
    "tc_metrics",
]

# Buckets from the PIP-160 proposal. The delay is in seconds: Pulsar's own code
# declared 1, 5, 10 (seconds) by mistake, so every sample fell in the first.
RECORDS_BUCKETS = (10.0, 50.0, 100.0, 200.0, 500.0, 1000.0)
SIZE_BUCKETS_BYTES = (128.0, 512.0, 1024.0, 2048.0, 4096.0, 16384.0, 102400.0, 1048576.0)
DELAY_BUCKETS_S = (0.001, 0.005, 0.01)

TC_PREFIX = "pulsar_txn_tc_batched_log_"
_TC_RECORDS_NAME = "pulsar_txn_tc_log_records_count_per_entry"  # PIP-160's one odd name
PENDING_ACK_PREFIX = "pulsar_pending_ack_batched_log_"
# The names Pulsar shipped (TxnLogBufferedWriterMetricsStats), for its users' dashboards.
SHIPPED_TC_PREFIX = "pulsar_txn_tc_bufferedwriter_"
SHIPPED_PENDING_ACK_PREFIX = "pulsar_txn_pending_ack_store_bufferedwriter_"


class FlushTrigger(enum.Enum):
    """Why a batch was flushed; each maps onto one of the three PIP-160 counters."""

    RECORDS = "records"  # max records reached
    SIZE = "size"  # max bytes reached
    LARGE_DATA = "large_data"  # a record too large to share an entry arrived (PIP-160: counted as size)
    DELAY = "delay"  # max delay since the first buffered record passed
    IDLE = "idle"  # auto policy: no append in flight, flushed at once (counted as delay)
    IN_FLIGHT_DONE = "in_flight_done"  # auto policy: the append in flight completed (delay)
    SWITCHED_OFF = "switched_off"  # batching switched off at run time (counted as delay)


@dataclass(frozen=True)
class _Names:
    """One naming scheme: the three histograms and the counter each trigger feeds."""

    records: str
    size: str
    delay: str
    counters: Mapping[FlushTrigger, tuple[str, str]]  # trigger -> (counter name, its help)


def _seed_names(prefix: str, records_name: str) -> _Names:
    by_records = (prefix + "triggering_count_by_records", "max records")
    by_size = (prefix + "triggering_count_by_size", "max size")
    by_delay = (prefix + "triggering_count_by_delay_time", "max delay (or an idle log)")
    return _Names(
        records=records_name, size=prefix + "entry_size_bytes",
        delay=prefix + "oldest_record_delay_time_seconds",
        counters={FlushTrigger.RECORDS: by_records, FlushTrigger.SIZE: by_size,
                  FlushTrigger.LARGE_DATA: by_size, **dict.fromkeys(_DELAYS, by_delay)},
    )


def _shipped_names(prefix: str) -> _Names:
    by_delay = (prefix + "flush_trigger_max_delay", "max delay (or an idle log)")
    return _Names(
        records=prefix + "batch_records", size=prefix + "batch_size_bytes",
        delay=prefix + "batch_oldest_record_delay_seconds",
        counters={FlushTrigger.RECORDS: (prefix + "flush_trigger_max_records", "max records"),
                  FlushTrigger.SIZE: (prefix + "flush_trigger_max_size", "max size"),
                  FlushTrigger.LARGE_DATA: (prefix + "flush_trigger_large_data", "a record too large"),
                  **dict.fromkeys(_DELAYS, by_delay)},
    )


# Every trigger but records and size is a kind of delay flush (PIP-160 has three counters).
_DELAYS = (FlushTrigger.DELAY, FlushTrigger.IDLE, FlushTrigger.IN_FLIGHT_DONE, FlushTrigger.SWITCHED_OFF)


@dataclass(frozen=True)
class _Families:
    labelnames: tuple[str, ...]
    records: Histogram
    size: Histogram
    delay: Histogram
    counters: Mapping[FlushTrigger, Counter]


# One set of families per (registry, names). Weak keys: a test's throwaway
# registry does not outlive the test, and a new one never inherits its families.
_families: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, _Families]] = (
    weakref.WeakKeyDictionary()
)


def _families_of(
    registry: CollectorRegistry, names: _Names, what: str, labelnames: tuple[str, ...]
) -> _Families:
    by_name = _families.setdefault(registry, {})
    fam = by_name.get(names.size)  # the one name fixed by the prefix alone
    if fam is not None:
        if fam.labelnames != labelnames:
            raise ValueError(
                f"metrics {names.size} and co are registered with labels {fam.labelnames}, "
                f"not {labelnames}"
            )
        return fam
    made: dict[str, Counter] = {}
    for name, bound in names.counters.values():
        if name not in made:
            made[name] = Counter(name, f"Batched {what} flushes triggered by {bound}", labelnames,
                                 registry=registry)
    fam = by_name[names.size] = _Families(
        labelnames=labelnames,
        records=Histogram(
            names.records, f"Records per batched {what} entry", labelnames,
            buckets=RECORDS_BUCKETS, registry=registry,
        ),
        size=Histogram(
            names.size, f"Size of each batched {what} entry, in bytes",
            labelnames, buckets=SIZE_BUCKETS_BYTES, registry=registry,
        ),
        delay=Histogram(
            names.delay, f"Time the oldest record of a batched {what} entry spent buffered, in seconds",
            labelnames, buckets=DELAY_BUCKETS_S, registry=registry,
        ),
        counters={trigger: made[name] for trigger, (name, _) in names.counters.items()},
    )
    return fam


class BatchedLogMetrics:
    """The metrics of one writer: the PIP-160 proposal's families of ``prefix`` and the shipped ones
    of ``shipped_prefix``, with labels bound.

    ``records_name`` overrides the proposal's records-per-entry histogram's name (default
    ``<prefix>records_count_per_entry``). Families are created on first use in
    ``registry`` and shared by every view with the same prefixes.
    """

    def __init__(
        self,
        prefix: str,
        labels: Mapping[str, str],
        *,
        shipped_prefix: str,
        records_name: str | None = None,
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        what = "transaction log" if prefix == TC_PREFIX else "log"
        schemes = (_seed_names(prefix, records_name or prefix + "records_count_per_entry"),
                   _shipped_names(shipped_prefix))
        values = tuple(labels.values())
        fams = [_families_of(registry, names, what, tuple(labels)) for names in schemes]
        self._histograms = tuple(
            (f.records.labels(*values), f.size.labels(*values), f.delay.labels(*values)) for f in fams
        )
        self._counters_of = {
            trigger: tuple(f.counters[trigger].labels(*values) for f in fams) for trigger in FlushTrigger
        }

    def observe_flush(
        self, trigger: FlushTrigger, records: int, size_bytes: int, oldest_delay_s: float
    ) -> None:
        """Record one batched entry: why it was flushed, its records, size and oldest delay."""
        for counter in self._counters_of[trigger]:
            counter.inc()
        for by_records, by_size, by_delay in self._histograms:
            by_records.observe(records)
            by_size.observe(size_bytes)
            by_delay.observe(oldest_delay_s)


def tc_metrics(
    cluster: str, coordinator_id: int | str, registry: CollectorRegistry = REGISTRY
) -> BatchedLogMetrics:
    """The transaction-log writer metrics of one coordinator."""
    return BatchedLogMetrics(
        TC_PREFIX,
        {"cluster": cluster, "coordinator_id": str(coordinator_id)},
        shipped_prefix=SHIPPED_TC_PREFIX,
        records_name=_TC_RECORDS_NAME,
        registry=registry,
    )


def pending_ack_metrics(cluster: str, registry: CollectorRegistry = REGISTRY) -> BatchedLogMetrics:
    """The pending-ack log writer metrics of a cluster (shared by every subscription)."""
    return BatchedLogMetrics(
        PENDING_ACK_PREFIX, {"cluster": cluster}, shipped_prefix=SHIPPED_PENDING_ACK_PREFIX, registry=registry
    )
