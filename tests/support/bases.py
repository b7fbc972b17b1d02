"""Commit a compacted base by hand (what the ``compact`` job commits), for the owners' adoption tests."""

from __future__ import annotations

from collections.abc import Sequence

from streamtx.batching import compacted
from streamtx.ledger import Ledger, LedgerFactory


async def commit_base(ledgers: LedgerFactory, log: Ledger, records: Sequence[compacted.BaseRecord] = (),
                      *, generation: int = 0) -> compacted.BaseInfo:
    """Commit base ``generation`` of ``log``, cut at its end now, holding only ``records``."""
    await log.refresh()
    last = log.last_position()
    cut = 0 if last is None else last.entry_id + 1
    base = await ledgers.open(compacted.base_ledger(log.name, generation))
    for entry in compacted.encode_base(records, cut):
        await base.append(entry)
    await base.close()
    info = compacted.BaseInfo(generation, cut, len(records))
    manifest = await ledgers.open(compacted.manifest_ledger)
    await manifest.append(compacted.encode_manifest({log.name: info}))
    await manifest.close()
    return info
