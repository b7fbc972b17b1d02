"""Ledger appends that fail for good are counted by error (the append-errors alert reads it)."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from streamtx.errors import LedgerUnavailableError
from streamtx.ledger.memory import MemoryLedgerFactory


def errors(kind: str) -> float:
    return REGISTRY.get_sample_value("streamtx_ledger_append_errors_total", {"error": kind}) or 0.0


async def test_failed_appends_are_counted_once_per_entry() -> None:
    ledgers = MemoryLedgerFactory()
    ledger = await ledgers.open("metrics-log")
    before = errors("LedgerUnavailableError")
    ledgers.inject_append_failures("metrics-log", 1_000_000)
    with pytest.raises(LedgerUnavailableError):
        await ledger.append(b"a")
    assert errors("LedgerUnavailableError") == before + 1
    ledgers.inject_append_failures("metrics-log", 1)  # one failure, then the retry lands
    await ledger.append(b"b")
    ledgers.inject_append_failures("metrics-log", 0)
    await ledger.append(b"c")
    assert errors("LedgerUnavailableError") == before + 1
    await ledger.close()
