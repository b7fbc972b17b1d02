"""The coordinator's domain metrics (Pulsar's transaction metric names).

Per coordinator, labels ``cluster`` and ``coordinator_id``:

* ``pulsar_txn_created_total``, ``pulsar_txn_committed_total``,
  ``pulsar_txn_aborted_total`` (aborted by a client or a conflict),
  ``pulsar_txn_timeout_total`` (aborted by timeout), ``pulsar_txn_append_log_total``
  (transaction-log records appended) — counters;
* ``pulsar_txn_active_count`` — transactions not yet finished (a gauge read at scrape);
* ``streamtx_coordinator_ending_oldest_seconds{state}`` — how long the oldest
  transaction in COMMITTING (or ABORTING) has waited for its fan-out (0 when none;
  read at scrape): the "stuck committing" alert reads it;
* ``pulsar_txn_execution_latency_seconds`` — open to final state, per outcome, with
  the edges of Pulsar's ``pulsar_txn_execution_latency_le_*`` buckets;
* ``pulsar_txn_created_count``, ``pulsar_txn_committed_count``, ``pulsar_txn_aborted_count``,
  ``pulsar_txn_timeout_count`` — the four counters again under the names Pulsar's own
  Grafana dashboard reads (gauges there, read from the same counters here);
* ``streamtx_txn_protocol_violations_total`` — participants that answered an end
  with 409, having ended the transaction the other way (not Pulsar's; alert on any).

The PIP-160 batched-log metrics come from :mod:`streamtx.batching.metrics`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from streamtx.records.txnstate import latency_buckets
from streamtx.service import workermetrics
from streamtx.service.workermetrics import track, untrack

_labels = ("cluster", "coordinator_id")


@dataclass(frozen=True)
class _Families:
    created: Counter
    committed: Counter
    aborted: Counter
    timed_out: Counter
    appends: Counter
    active: Gauge
    ending_oldest: Gauge
    latency: Histogram
    violations: Counter


class _PulsarCounts(Collector):
    """``pulsar_txn_<x>_count``: each counter's current value under Pulsar's own name."""

    def __init__(self, counters: dict[str, Counter]) -> None:
        self._counters = counters

    def collect(self) -> list[GaugeMetricFamily]:  # type: ignore[override]
        out = []
        # Workers on one port: the counts of all of them (streamtx.service.workermetrics), not this one's.
        merged = workermetrics.merged_families() if workermetrics.enabled() else None
        for name, counter in self._counters.items():
            family = GaugeMetricFamily(f"pulsar_txn_{name}_count", f"Transactions {name} (Pulsar's name)",
                                       labels=_labels)
            own = next(iter(counter.describe())).name
            sources = counter.collect() if merged is None else [merged[own]] if own in merged else []
            for metric in sources:
                for sample in metric.samples:
                    if sample.name.endswith("_total"):
                        family.add_metric([sample.labels[k] for k in _labels], sample.value)
            out.append(family)
        return out


# One set of families per registry: several coordinators (and, in tests, several
# apps) in one process share them and differ by labels. Weak keys: a throwaway
# registry takes its families with it.
_families: weakref.WeakKeyDictionary[CollectorRegistry, _Families] = weakref.WeakKeyDictionary()


def _families_of(registry: CollectorRegistry) -> _Families:
    fam = _families.get(registry)
    if fam is None:
        fam = _families[registry] = _Families(
            created=Counter("pulsar_txn_created", "Transactions created", _labels, registry=registry),
            committed=Counter("pulsar_txn_committed", "Transactions committed", _labels, registry=registry),
            aborted=Counter(
                "pulsar_txn_aborted", "Transactions aborted by a client or a conflict", _labels,
                registry=registry,
            ),
            timed_out=Counter(
                "pulsar_txn_timeout", "Transactions aborted by timeout", _labels, registry=registry
            ),
            appends=Counter(
                "pulsar_txn_append_log", "Transaction-log records appended", _labels, registry=registry
            ),
            active=Gauge(  # a coordinator id handed over counts 0 in its old worker (untrack)
                "pulsar_txn_active_count", "Transactions not yet finished", _labels, registry=registry,
                multiprocess_mode="livesum",
            ),
            ending_oldest=Gauge(
                "streamtx_coordinator_ending_oldest_seconds",
                "Time the oldest transaction in this ending state has waited for its fan-out",
                (*_labels, "state"), registry=registry, multiprocess_mode="livemax",
            ),
            latency=Histogram(
                "pulsar_txn_execution_latency_seconds", "Time from open to final state",
                (*_labels, "outcome"), buckets=latency_buckets, registry=registry,
            ),
            violations=Counter(
                "streamtx_txn_protocol_violations",
                "Participants that ended a transaction the other way than its coordinator decided",
                _labels, registry=registry,
            ),
        )
        derived = workermetrics.aggregated() if workermetrics.enabled() and registry is REGISTRY else registry
        derived.register(_PulsarCounts({
            "created": fam.created, "committed": fam.committed, "aborted": fam.aborted,
            "timeout": fam.timed_out,
        }))
    return fam


def register(registry: CollectorRegistry = REGISTRY) -> None:
    """Register the families in ``registry`` now. A worker that owns no coordinator id yet
    answers a scrape for the whole port too, so it must not wait for its first coordinator."""
    _families_of(registry)


class CoordinatorMetrics:
    """The metric children of one coordinator (labels bound once, so updates are cheap)."""

    def __init__(self, cluster: str, coordinator_id: int, registry: CollectorRegistry = REGISTRY) -> None:
        fam = _families_of(registry)
        labels = (cluster, str(coordinator_id))
        self.created = fam.created.labels(*labels)
        self.committed = fam.committed.labels(*labels)
        self.aborted = fam.aborted.labels(*labels)
        self.timed_out = fam.timed_out.labels(*labels)
        self.appends = fam.appends.labels(*labels)
        self.violations = fam.violations.labels(*labels)
        self._active = fam.active.labels(*labels)
        self._ending_oldest = fam.ending_oldest
        self._latency = fam.latency
        self._labels = labels

    def track_active(self, count: Callable[[], int]) -> None:
        """Read the active-transaction gauge from ``count`` at every scrape."""
        track(self._active, count)

    def track_ending_oldest(self, seconds_in: Callable[[str], float]) -> None:
        """Read, at every scrape, how long the oldest COMMITTING / ABORTING txn has waited."""
        for state in ("COMMITTING", "ABORTING"):
            track(self._ending_oldest.labels(*self._labels, state), partial(seconds_in, state))

    def untrack(self) -> None:
        """The coordinator closed (its id handed over, maybe to a sibling worker): its gauges read 0."""
        untrack(self._active)
        for state in ("COMMITTING", "ABORTING"):
            untrack(self._ending_oldest.labels(*self._labels, state))

    def observe_latency(self, outcome: str, seconds: float) -> None:
        self._latency.labels(*self._labels, outcome).observe(seconds)
