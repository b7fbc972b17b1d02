"""Ledger metrics (default registry): appends that failed for good, corrupt ledgers.

``streamtx_ledger_append_errors_total{error}`` counts entries whose append
failed after the ledger's own retries (``error`` is the exception's class:
``LedgerUnavailableError``, ``FencedError``, ...). The ledger layer knows no
cluster; the scrape adds it. Operators page on its rate (alert
``StreamtxLedgerAppendErrors``).

``streamtx_ledger_corruptions_total{ledger}`` counts opens of a file ledger
refused for corruption (``ledger`` is its directory name; see
:mod:`.filecheck`; alert ``StreamtxLedgerCorrupt``).
"""

from __future__ import annotations

from prometheus_client import Counter

append_errors = Counter(
    "streamtx_ledger_append_errors", "Ledger entries whose append failed for good", ["error"]
)


def append_failed(exc: BaseException, entries: int) -> None:
    append_errors.labels(type(exc).__name__).inc(entries)


corruptions = Counter(
    "streamtx_ledger_corruptions", "File ledger opens refused because a segment is corrupt", ["ledger"]
)


def corruption_found(ledger: str) -> None:
    corruptions.labels(ledger).inc()
