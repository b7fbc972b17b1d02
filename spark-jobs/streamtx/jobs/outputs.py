"""The jobs' outputs for people and for Prometheus: JSON, the textfile ``.prom``, a push, PNGs.

Metric names in the ``.prom`` file (and in a Pushgateway push), all prefixed
``streamtx_spark_``; histograms have the usual ``_bucket{le=...}``, ``_sum``
and ``_count`` samples with the live metrics' buckets:

===========================================  ======================================  ===========
name                                         labels                                  type
===========================================  ======================================  ===========
tc_log_records_per_entry                     cluster, coordinator_id                 histogram
tc_log_entry_size_bytes                      cluster, coordinator_id                 histogram
pending_ack_log_records_per_entry            topic, partition, subscription          histogram
pending_ack_log_entry_size_bytes             topic, partition, subscription          histogram
txn_duration_seconds                         cluster, coordinator_id, outcome        histogram
message_size_bytes                           topic                                   histogram
txns                                         cluster, coordinator_id, state          gauge
log_unbatched_entries                        log, (coordinator or subscription)      gauge
partition_messages / partition_bytes         topic                                   gauge
partition_active_minutes                     topic                                   gauge
partition_minute_messages_max                topic (the busiest minute)              gauge
partition_minute_bytes_max                   topic (the busiest minute)              gauge
compact_records / compact_bytes              ledger, kind, phase (before, after)     gauge
job_last_success_timestamp_seconds           job                                     gauge
job_duration_seconds                         job                                     gauge
job_records_read                             job                                     gauge
===========================================  ======================================  ===========

``topic`` is always the topic's full name (``persistent://t/n/x``) and
``partition`` the partition's (``persistent://t/n/x-partition-0``), from
whichever ledger (:func:`streamtx.jobs.sources.topic_labels`): the message
and pending-ack metrics join on them.

The file is written with :func:`prometheus_client.write_to_textfile`, which
writes a temporary file and renames it over the target (the node-exporter
textfile collector never reads half a file).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, push_to_gateway, write_to_textfile
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

prefix = "streamtx_spark_"
Labels = tuple[tuple[str, str], ...]


@dataclass
class Hist:
    """One histogram: per-bucket (not cumulative) counts, the last one for +Inf."""

    bounds: tuple[float, ...]
    counts: list[int]
    total: float = 0.0

    @property
    def count(self) -> int:
        return sum(self.counts)


@dataclass
class Results:
    """What a job hands to the writers."""

    job: str
    histograms: dict[str, dict[Labels, Hist]] = field(default_factory=dict)
    gauges: dict[str, dict[Labels, float]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


class _Collector:
    def __init__(self, results: Results) -> None:
        self._r = results

    def collect(self) -> Iterable[Metric]:
        for name, series in sorted(self._r.histograms.items()):
            keys = _label_names(series)
            fam = HistogramMetricFamily(prefix + name, f"{name} over the ledgers (streamtx Spark job)",
                                        labels=keys)
            for labels, h in sorted(series.items()):
                cum, buckets = 0, []
                for bound, n in zip((*h.bounds, float("inf")), h.counts, strict=True):
                    cum += n
                    buckets.append((_le(bound), cum))
                fam.add_metric([dict(labels).get(k, "") for k in keys], buckets, h.total)
            yield fam
        for gauge, values in sorted(self._r.gauges.items()):
            keys = _label_names(values)
            g = GaugeMetricFamily(prefix + gauge, f"{gauge} (streamtx Spark job)", labels=keys)
            for labels, value in sorted(values.items()):
                g.add_metric([dict(labels).get(k, "") for k in keys], value)
            yield g


def _label_names(series: Mapping[Labels, Any]) -> list[str]:
    names: list[str] = []
    for labels in series:
        for k, _ in labels:
            if k not in names:
                names.append(k)
    return names


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


def registry_of(results: Results) -> CollectorRegistry:
    reg = CollectorRegistry()
    reg.register(_Collector(results))  # type: ignore[arg-type]
    return reg


def write_prom(results: Results, path: str) -> None:
    """The textfile collector's ``.prom``, replaced atomically."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_to_textfile(path, registry_of(results))


def push(results: Results, url: str) -> None:
    """Push the same metrics to a Pushgateway (grouped by ``job``)."""
    push_to_gateway(url, job=f"streamtx_spark_{results.job}", registry=registry_of(results))


def summary(results: Results) -> dict[str, Any]:
    """The JSON summary: every histogram and gauge, with labels as objects."""
    return {
        "job": results.job,
        "histograms": {
            name: [
                {"labels": dict(labels), "buckets": [*map(float, h.bounds), "+Inf"], "counts": h.counts,
                 "count": h.count, "sum": h.total}
                for labels, h in sorted(series.items())
            ]
            for name, series in sorted(results.histograms.items())
        },
        "gauges": {
            name: [{"labels": dict(labels), "value": v} for labels, v in sorted(series.items())]
            for name, series in sorted(results.gauges.items())
        },
        **results.extra,
    }


def write_parquet(path: str, rows: list[tuple[Any, ...]], columns: list[str]) -> None:
    """One Parquet table (labels as a map column), replaced atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = {c: [r[i] for r in rows] for i, c in enumerate(columns)}
    if "labels" in data:
        data["labels"] = [list(labels.items()) for labels in data["labels"]]
    types = {"labels": pa.map_(pa.string(), pa.string())}
    table = pa.table({c: pa.array(v, type=types.get(c)) for c, v in data.items()})
    tmp = path + ".tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def summary_labels(labels: Labels) -> dict[str, str]:
    return dict(labels)


def write_json(results: Results, path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(summary(results), f, indent=2, sort_keys=True)
    os.replace(tmp, path)


_max_series = 8  # per chart; the rest are summed into "other"


def write_charts(results: Results, directory: str) -> list[str]:
    """One PNG per histogram: bars per bucket, one colour per label set (the largest 8)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, series in sorted(results.histograms.items()):
        if not series:
            continue
        ranked = sorted(series.items(), key=lambda kv: -kv[1].count)
        shown = ranked[:_max_series]
        bounds = shown[0][1].bounds
        if len(ranked) > _max_series:
            other = [sum(h.counts[i] for _, h in ranked[_max_series:]) for i in range(len(bounds) + 1)]
            shown.append(((("series", "other"),), Hist(bounds, other)))
        ticks = [f"≤{_fmt(b)}" for b in bounds] + [f">{_fmt(bounds[-1])}"]
        fig, ax = plt.subplots(figsize=(9, 4.5))
        width = 0.8 / len(shown)
        for i, (labels, h) in enumerate(shown):
            xs = [x + i * width for x in range(len(ticks))]
            ax.bar(xs, h.counts, width=width, label=", ".join(f"{k}={v}" for k, v in labels)[:60])
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(ticks))], ticks, rotation=30)
        ax.set_ylabel("count")
        ax.set_title(f"{prefix}{name}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(directory, f"{name}.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths


def _fmt(v: float) -> str:
    if v >= 1 << 20 and v % (1 << 20) == 0:
        return f"{int(v) >> 20}Mi"
    if v >= 1024 and v % 1024 == 0:
        return f"{int(v) >> 10}Ki"
    return f"{v:g}"
