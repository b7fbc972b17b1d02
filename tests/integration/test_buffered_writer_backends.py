"""The buffered writer over every real backend: what callers were told is what replay reads."""

from __future__ import annotations

import asyncio

from streamtx.batching import BufferedWriter, decode_entry
from streamtx.ledger import LedgerFactory


async def test_batched_and_unbatched_records_replay_in_order(ledgers: LedgerFactory) -> None:
    ledger = await ledgers.open("bw/replay")
    writer: BufferedWriter[bytes] = BufferedWriter(ledger, bytes, max_records=16)
    first = await asyncio.gather(*(writer.write(b"a%03d" % i) for i in range(100)))
    writer.set_enabled(False)
    second = await asyncio.gather(*(writer.write(b"b%03d" % i) for i in range(20)))
    writer.set_enabled(True)
    third = await asyncio.gather(*(writer.write(b"c%03d" % i) for i in range(50)))
    await writer.close()
    results = [*first, *second, *third]
    assert all(r.batch_size <= 16 for r in results)
    assert any(r.batch_size > 1 for r in first), "100 concurrent writes never shared an entry"
    assert all(r.batch_size == 1 for r in second)

    reader = await ledgers.open("bw/replay", writer=False)
    replayed: list[tuple[object, int, bytes]] = []
    for entry in await reader.read(max_entries=10_000):
        records = decode_entry(entry.data)
        replayed.extend((entry.position, i, r) for i, r in enumerate(records))
    expected = [b"a%03d" % i for i in range(100)] + [b"b%03d" % i for i in range(20)]
    expected += [b"c%03d" % i for i in range(50)]
    assert [r for _, _, r in replayed] == expected
    assert [(p, i) for p, i, _ in replayed] == [(r.position, r.batch_index) for r in results]
