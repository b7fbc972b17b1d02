"""Issue 32 suspicion (a), settled: the compact job deletes base g-2 when it commits g; an owner
adopted g-2 and refused g-1 and g. Nothing reads g-2 once the manifest names g-1: the owners
recover from the manifest's base (``compacted.load_base``) and adopt only the manifest's, so
deleting g-2 loses nothing a reader could reach. But what g-1 lacks below the log's first entry is
what a recovery misses from g-1's commit on, g-2 kept or not: the strict xfail below reproduces
that (not fixed here: a refused base must not become the one recovery reads)."""

from __future__ import annotations

import pytest

from streamtx.batching import compacted
from streamtx.ledger.base import Position
from streamtx.ledger.memory import MemoryLedgerFactory

LOG = "txnlog/0"


async def _base(factory: MemoryLedgerFactory, generation: int, records: list[compacted.BaseRecord],
                cut: int) -> compacted.BaseInfo:
    ledger = await factory.open(compacted.base_ledger(LOG, generation))
    for entry in compacted.encode_base(records, cut):
        await ledger.append(entry)
    await ledger.close()
    return compacted.BaseInfo(generation, cut, len(records))


async def _manifest(factory: MemoryLedgerFactory, info: compacted.BaseInfo) -> None:
    ledger = await factory.open(compacted.manifest_ledger)
    await ledger.append(compacted.encode_manifest({LOG: info}))
    await ledger.close()


async def _recovered(factory: MemoryLedgerFactory) -> tuple[int, list[compacted.BaseRecord]]:
    """What an owner's recovery takes from the base: the manifest's, below the log's first entry."""
    log = await factory.open(LOG, writer=False)
    try:
        loaded = await compacted.load_base(factory, LOG)
        assert loaded is not None
        return loaded[0].generation, compacted.below(loaded[1], compacted.takes_over(log, loaded[0]))
    finally:
        await log.close()


async def _adopted_then_refused() -> MemoryLedgerFactory:
    """g0 adopted (the log trimmed below its cut), then g1 and g2 refused: they lack a needed record."""
    factory = MemoryLedgerFactory()
    log = await factory.open(LOG)
    for i in range(12):
        await log.append(b"r%d" % i)
    needed = (Position(log.ledger_id, 1), 0, 1)  # a record the owner's state stands on
    kept = [(1, 0, 1, b"r1")]
    g0 = await _base(factory, 0, kept, 4)
    await _manifest(factory, g0)
    assert await compacted.adopt(factory, log, [needed], -1) == 0  # adopted: log trimmed below 4
    lacking: list[compacted.BaseRecord] = []  # g-1 and g lack it: refused
    await _manifest(factory, await _base(factory, 1, lacking, 8))
    assert await compacted.adopt(factory, log, [needed], 0) == 0
    await _manifest(factory, await _base(factory, 2, lacking, 10))
    assert await compacted.adopt(factory, log, [needed], 0) == 0
    await log.close()
    return factory


async def test_deleting_the_base_an_owner_adopted_two_generations_ago_changes_no_recovery() -> None:
    factory = await _adopted_then_refused()
    before = await _recovered(factory)
    await factory.delete(compacted.base_ledger(LOG, 0))  # what the job's commit of g=2 does
    assert await _recovered(factory) == before  # read from g, never from g-2
    assert before[0] == 2


@pytest.mark.xfail(strict=True, reason="issue 32 suspicion (a), reproduced, not fixed: recovery reads "
                   "the manifest's base even where the owner refused it")
async def test_a_recovery_keeps_the_record_the_refused_bases_lack() -> None:
    factory = await _adopted_then_refused()
    assert (1, 0, 1, b"r1") in (await _recovered(factory))[1]
