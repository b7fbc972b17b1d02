"""Regression (found by the broker's snapshot ledger): a file-ledger read cut short by its byte
budget inside one segment must not go on to the next segment and leave a gap."""

from __future__ import annotations

from pathlib import Path

from streamtx.ledger import open_ledger_factory


async def test_budget_cut_read_has_no_gap(tmp_path: Path) -> None:
    ledgers = open_ledger_factory(f"file://{tmp_path}?segment_bytes=20000000")
    ledger = await ledgers.open("x")
    for _ in range(150):  # 30 MB: two segments, and more than the 8 MiB read budget in each
        await ledger.append(b"x" * 200_000)
    ids: list[int] = []
    start = None
    while entries := await ledger.read(start, 1000):
        ids += [e.position.entry_id for e in entries]
        last = entries[-1].position
        start = last._replace(entry_id=ledger.next_entry_id(last.entry_id))
    assert ids == list(range(ids[0], ids[0] + 150))
    await ledgers.close()
