"""Metrics of the worker processes of one port (``STREAMTX_WORKERS > 1``), scraped as one.

A scrape of ``/metrics`` reaches whichever worker the kernel hands the
connection to. So that it answers for the port, the workers use
prometheus_client's multiprocess mode: every metric value lives in a memory-mapped
file per process under ``PROMETHEUS_MULTIPROC_DIR``, and the worker answering a
scrape merges them all (:class:`~prometheus_client.multiprocess.MultiProcessCollector`):
counters and histograms add up over every worker that ever ran (a dead one's
counts stay counted, as a counter must), gauges by their ``multiprocess_mode``
(``livesum``: over the live workers; ``livemax``...). The supervisor marks a
dead worker's live gauges gone (:func:`process_died`).

prometheus_client picks its value class when first imported, so the directory
must be set before that: the services' ``__main__`` calls :func:`prepare`
before anything else (it makes a fresh directory when none is given, and empties
a given one: its files from an earlier run would be counted again). Workers are
forked from the supervisor; each value moves to the child's own file on first
use (prometheus_client checks the pid).

What does not fit a file is handled here:

- gauges read from a callback at scrape time (``set_function``) would be read
  in the answering worker only: :func:`track` sets them from their callback
  every second (and at each scrape) instead, :func:`untrack` zeroes one whose
  object went away (a coordinator id handed over);
- collectors that derive metrics from others (the coordinator's Pulsar-named
  counts) register in :func:`aggregated` and read the merged values
  (:func:`merged_families`).

With one process (the default) nothing changes: callbacks stay callbacks and the
default registry is served as is.
"""

from __future__ import annotations

import asyncio
import glob
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from typing import Any

__all__ = ["aggregated", "cleanup", "enabled", "latest", "merged_families", "prepare", "process_died",
           "sync_forever", "track", "untrack"]

log = logging.getLogger(__name__)

ENV = "PROMETHEUS_MULTIPROC_DIR"
_made: str | None = None  # the directory prepare() made (removed by cleanup())


def prepare() -> None:
    """Before prometheus_client is imported: multiprocess mode when ``STREAMTX_WORKERS > 1``."""
    global _made
    try:
        workers = int(os.environ.get("STREAMTX_WORKERS", "1") or 1)
    except ValueError:
        return  # the settings class reports it
    if workers <= 1:
        return
    if "prometheus_client" in sys.modules:
        log.warning("prometheus_client was imported before the metrics directory was set: "
                    "each worker's /metrics answers for itself")
        return
    path = os.environ.get(ENV)
    if path:
        os.makedirs(path, exist_ok=True)
        for stale in glob.glob(os.path.join(path, "*.db")):
            os.remove(stale)
    else:
        _made = tempfile.mkdtemp(prefix="streamtx-metrics-")
        os.environ[ENV] = _made


def cleanup() -> None:
    """The supervisor, on its way out: remove the directory :func:`prepare` made."""
    if _made is not None:
        shutil.rmtree(_made, ignore_errors=True)


def enabled() -> bool:
    return bool(os.environ.get(ENV))


def process_died(pid: int) -> None:
    """A worker died: its live gauges no longer count (its counters do)."""
    if enabled():
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


# -- what a file cannot hold ------------------------------------------------------------
_live: dict[int, tuple[Any, Callable[[], float]]] = {}


def track(child: Any, read: Callable[[], float]) -> None:
    """Gauge ``child`` reads ``read()``: at scrape time (one process), or set from it every second."""
    if enabled():
        _live[id(child)] = (child, read)
        child.set(float(read()))
    else:
        child.set_function(read)


def untrack(child: Any) -> None:
    """``child``'s object is gone from this worker: it counts 0 here from now on."""
    if _live.pop(id(child), None) is not None:
        child.set(0)


def sync() -> None:
    for child, read in list(_live.values()):
        try:
            child.set(float(read()))
        except Exception as exc:  # a callback must not stop the others, nor the scrape
            log.warning("metrics: reading a gauge failed: %r", exc)


async def sync_forever(interval_s: float = 1.0) -> None:
    """Keep this worker's tracked gauges in its file (a sibling may answer the next scrape)."""
    while True:
        sync()
        await asyncio.sleep(interval_s)


_aggregated: Any = None


def aggregated() -> Any:
    """The registry of collectors that derive from merged values (instead of the default one).
    Made on first use: importing this module must not import prometheus_client."""
    global _aggregated
    if _aggregated is None:
        from prometheus_client import CollectorRegistry

        _aggregated = CollectorRegistry(auto_describe=True)
    return _aggregated


def merged_families() -> dict[str, Any]:
    """Every metric family merged over the workers' files, by name."""
    from prometheus_client.multiprocess import MultiProcessCollector

    collector = MultiProcessCollector(None)  # type: ignore[no-untyped-call]
    return {m.name: m for m in collector.collect()}  # type: ignore[no-untyped-call]


def latest(*registries: Any) -> bytes:
    """The exposition of ``/metrics``: ``registries`` (one process), or every worker merged."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector

    if not enabled():
        return b"".join(generate_latest(r) for r in registries)
    sync()
    merged = CollectorRegistry()
    MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
    return bytes(generate_latest(merged) + generate_latest(aggregated()))
