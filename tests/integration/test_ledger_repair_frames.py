"""``streamtx-admin ledger repair`` understands frames: after each kind of repair every acknowledged
entry reads back through the ``Ledger`` interface, and nothing refused at append time comes back
(issue 22 items 1, 2).

Each case writes a ledger through the file backend (writers, fences, a fenced writer's refused
append), remembers what the ``Ledger`` reads, damages one entry's payload (its length survives),
repairs, and reads again through a new ``Ledger``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streamtx.errors import CorruptEntryError, FencedError
from streamtx.ledger import frames, segment
from streamtx.ledger.file import FileLedgerFactory
from tests.integration.test_file_ledger import read_store
from tests.integration.test_file_ledger_corruption import NAME, damage, ledger_cli, read, write


async def _writers(root: Path, *plan: int, segment_bytes: int = 64 << 20) -> None:
    """Writers one after the other, each appending ``plan[i]`` entries (all acknowledged)."""
    ledgers = FileLedgerFactory(str(root), segment_bytes=segment_bytes)
    try:
        for w, n in enumerate(plan):
            ledger = await ledgers.open(NAME)
            for i in range(n):
                await ledger.append(b"w%d-%02d" % (w, i) * 3)
            await ledger.close()
    finally:
        await ledgers.close()


def _segment(root: Path) -> str:
    ledger_dir = FileLedgerFactory(str(root)).ledger_dir(NAME)
    (seg,) = sorted(f for f in os.listdir(ledger_dir) if f.endswith(".seg"))
    return os.path.join(ledger_dir, seg)


def _entries(path: str) -> list[tuple[int, frames.Frame]]:
    """(byte position, frame) of every entry of a segment file."""
    data = read(path)
    out = []
    for pos in segment.scan(data).positions:
        length = int.from_bytes(data[pos : pos + 4], "big")
        out.append((pos, frames.decode(data[pos + segment.HEADER_SIZE : pos + segment.HEADER_SIZE + length])))
    return out


def _break(path: str, pos: int) -> None:
    """Flip the last payload byte of the entry at ``pos`` (its length field survives)."""
    data = read(path)
    length = int.from_bytes(data[pos : pos + 4], "big")
    last = pos + segment.HEADER_SIZE + length - 1
    damage(path, last, bytes([data[last] ^ 0x5A]))


async def _repair(root: Path, *extra: str) -> dict:  # type: ignore[type-arg]
    status, report = await ledger_cli("repair", str(root), "--ledger", NAME, *extra)
    assert status == 0, report
    assert (await ledger_cli("check", str(root)))[0] == 0
    return report["ledgers"][0]  # type: ignore[no-any-return]


async def test_a_later_writers_damaged_fence_is_written_again_and_its_entries_stay_readable(
        tmp_path: Path) -> None:
    await _writers(tmp_path, 4, 5)
    acked = await read_store(tmp_path, NAME)
    path = _segment(tmp_path)
    fences = [pos for pos, f in _entries(path) if f.kind is frames.FrameKind.FENCE]
    _break(path, fences[1])  # the second writer's fence

    found = await _repair(tmp_path)
    assert await read_store(tmp_path, NAME) == acked  # the 5 entries of the new writer too
    assert "fence" in found["repaired"][0]


async def test_a_damaged_fence_in_a_sealed_segment_is_written_again(tmp_path: Path) -> None:
    await _writers(tmp_path, 4, 5, 3, segment_bytes=150)  # a new segment every few entries
    acked = await read_store(tmp_path, NAME)
    ledger_dir = FileLedgerFactory(str(tmp_path)).ledger_dir(NAME)
    segments = sorted(os.path.join(ledger_dir, f) for f in os.listdir(ledger_dir) if f.endswith(".seg"))
    fences = [(path, pos) for path in segments for pos, f in _entries(path)
              if f.kind is frames.FrameKind.FENCE]
    path, pos = fences[1]
    assert path != segments[-1]  # sealed: a newer segment follows
    _break(path, pos)

    found = await _repair(tmp_path)
    assert await read_store(tmp_path, NAME) == acked
    assert "fence" in found["repaired"][0]


async def _idle_writer_fences(root: Path, *after: bytes) -> dict[int, bytes]:
    """An old writer appends, an idle writer fences it, the old writer's next append is refused,
    then a last writer appends ``after`` (none: no last writer); the idle writer's fence is broken.
    What reads before the damage."""
    ledgers = FileLedgerFactory(str(root))
    try:
        old = await ledgers.open(NAME)
        await old.append(b"acknowledged")
        idle = await ledgers.open(NAME)  # fences the old writer, appends nothing
        await idle.close()
        with pytest.raises(FencedError):
            await old.append(b"refused at append time")
        await old.close()
        if after:
            last = await ledgers.open(NAME)
            for data in after:
                await last.append(data)
            await last.close()
    finally:
        await ledgers.close()
    acked = await read_store(root, NAME)
    assert sorted(acked.values()) == sorted([b"acknowledged", *after])
    path = _segment(root)
    fences = [pos for pos, f in _entries(path) if f.kind is frames.FrameKind.FENCE]
    _break(path, fences[1])  # the idle writer's fence
    return acked


async def test_a_fence_of_a_writer_that_appended_nothing_keeps_the_refused_append_out(
        tmp_path: Path) -> None:
    acked = await _idle_writer_fences(tmp_path, b"after")

    found = await _repair(tmp_path)
    assert await read_store(tmp_path, NAME) == acked  # the refused append does not come back
    assert "fence" in found["repaired"][0]


async def test_a_lost_fence_that_hides_whether_an_append_was_refused_is_refused(tmp_path: Path) -> None:
    """Issue 32 defect 11: the idle writer's fence is the last fence and is damaged; the old
    writer's append after it was refused (FencedError: its client got 409). Before, repair wrote
    a filler there and the refused append became a live entry; now it refuses, saying why, and
    ``--truncate`` cuts at the loss (only the refused append goes with it)."""
    acked = await _idle_writer_fences(tmp_path)  # no later fence names the lost epoch
    status, report = await ledger_cli("repair", str(tmp_path), "--ledger", NAME)
    (found,) = report["ledgers"]
    assert status == 2 and not found["repaired"], report
    assert "may have been the fence" in found["refused"][0]
    with pytest.raises(CorruptEntryError):
        await read_store(tmp_path, NAME)  # still refused to open: the refused append stays out

    found = await _repair(tmp_path, "--truncate")
    assert found["repaired"][0].startswith("cut ")
    assert await read_store(tmp_path, NAME) == acked


@pytest.mark.parametrize("truncate", [False, True])
async def test_a_damaged_data_entry_becomes_a_filler_and_only_it_is_lost(tmp_path: Path,
                                                                         truncate: bool) -> None:
    await _writers(tmp_path, 3, 8)
    acked = await read_store(tmp_path, NAME)
    path = _segment(tmp_path)
    data = [(pos, f) for pos, f in _entries(path) if f.kind is frames.FrameKind.DATA]
    _break(path, data[5][0])  # in the last segment, 5 acknowledged entries after it

    found = await _repair(tmp_path, *(["--truncate"] if truncate else []))
    assert "filler" in found["repaired"][0]
    lost = sorted(set(acked) - set(await read_store(tmp_path, NAME)))
    assert len(lost) == 1  # --truncate too: a filler is tried before a cut
    assert {k: v for k, v in acked.items() if k not in lost} == await read_store(tmp_path, NAME)


async def test_a_torn_tail_is_cut_and_every_entry_reads(tmp_path: Path) -> None:
    await _writers(tmp_path, 2, 3)
    acked = await read_store(tmp_path, NAME)
    path = _segment(tmp_path)
    torn = segment.encode_entries([frames.encode_data(1, 9, 0, b"never acknowledged")])[:30]
    write(path, read(path) + torn)
    found = await _repair(tmp_path)
    assert found["repaired"][0].startswith("cut ")
    assert await read_store(tmp_path, NAME) == acked
