"""Corruption in the last segment is refused, never cut; the operator's check and repair (issue 9, item 5).

A torn tail (nothing valid after the bad bytes) is an append that never
returned: a writer cuts it. A checksum failure followed by valid entries is
corruption: cutting there would drop acknowledged entries, so every open
fails, naming the file and the byte, until ``streamtx-admin ledger repair``.
"""

from __future__ import annotations

import io
import json
import os
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from streamtx.client.admin_cli import run as admin
from streamtx.errors import CorruptEntryError
from streamtx.ledger import Position, segment
from streamtx.ledger.file import FileLedgerFactory
from tests.integration.test_file_ledger import read_all, read_store

NAME = "orders/p-0"


async def write_entries(root: Path, n: int = 10) -> tuple[str, list[Position], list[int]]:
    """A ledger of ``n`` entries in one segment: its file, positions, and the entries' byte offsets."""
    ledgers = FileLedgerFactory(str(root))
    ledger = await ledgers.open(NAME)
    positions = [await ledger.append(b"entry-%02d" % i * 4) for i in range(n)]
    await ledgers.close()
    (seg,) = sorted(f for f in os.listdir(ledgers.ledger_dir(NAME)) if f.endswith(".seg"))
    path = os.path.join(ledgers.ledger_dir(NAME), seg)
    starts = list(segment.scan(read(path)).positions)
    return path, positions, starts[-n:]  # the first entry is the writer's fence


def read(path: str) -> bytes:
    return Path(path).read_bytes()


def write(path: str, data: bytes) -> None:
    Path(path).write_bytes(data)


def size(path: str) -> int:
    return os.path.getsize(path)


def damage(path: str, at: int, data: bytes) -> bytes:
    """Overwrite bytes at ``at``; the whole damaged file."""
    raw = bytearray(Path(path).read_bytes())
    raw[at : at + len(data)] = data
    Path(path).write_bytes(bytes(raw))
    return bytes(raw)


def corruptions(ledger_dir: str) -> float:
    value = REGISTRY.get_sample_value("streamtx_ledger_corruptions_total",
                                      {"ledger": os.path.basename(ledger_dir)})
    return value or 0.0


async def ledger_cli(*args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    out = io.StringIO()
    with redirect_stdout(out):
        status = await admin(["ledger", *args])
    return status, json.loads(out.getvalue())


async def test_a_bad_entry_followed_by_valid_ones_refuses_every_open(tmp_path: Path) -> None:
    path, positions, starts = await write_entries(tmp_path)
    bad = starts[4]
    before = damage(path, bad + segment.HEADER_SIZE + 30, b"\xff")  # a flipped payload byte
    ledger_dir = os.path.dirname(path)
    counted = corruptions(ledger_dir)

    ledgers = FileLedgerFactory(str(tmp_path))
    try:
        for writer in (False, True):
            with pytest.raises(CorruptEntryError) as info:
                await ledgers.open(NAME, writer=writer)
            assert f"{path} at byte {bad} " in info.value.message
            assert "corruption" in info.value.message
        assert read(path) == before  # nothing was cut, not even by the writer
        assert corruptions(ledger_dir) == counted + 2
    finally:
        await ledgers.close()

    status, report = await ledger_cli("check", str(tmp_path))
    assert status == 2 and not report["clean"]
    (found,) = report["ledgers"]
    assert found["name"] == NAME
    (dmg,) = found["damage"]
    assert (dmg["kind"], dmg["byte"], dmg["entry_id"]) == ("corrupt", bad, positions[4].entry_id)
    assert dmg["next_valid"] == starts[5]
    assert read(path) == before  # check never changes anything

    status, report = await ledger_cli("repair", f"file://{tmp_path}", "--ledger", NAME)
    assert status == 0 and report["ledgers"][0]["repaired"]
    # The damaged entry is gone; every other keeps its position, and writing goes on.
    entries = await read_store(tmp_path, NAME)
    assert entries == {p.entry_id: b"entry-%02d" % i * 4 for i, p in enumerate(positions) if i != 4}
    ledgers = FileLedgerFactory(str(tmp_path))
    try:
        writer = await ledgers.open(NAME)
        after = await writer.append(b"after")
        assert after > positions[-1]
        assert (await read_all(writer))[after.entry_id] == b"after"
    finally:
        await ledgers.close()
    assert (await ledger_cli("check", str(tmp_path)))[0] == 0


async def test_a_torn_tail_is_reported_and_cut_by_repair(tmp_path: Path) -> None:
    path, positions, _ = await write_entries(tmp_path, 3)
    good = read(path)
    write(path, good + segment.encode_entries([b"\x01" + b"z" * 60])[:40])  # a crashed append

    status, report = await ledger_cli("check", str(tmp_path), "--ledger", NAME)
    (dmg,) = report["ledgers"][0]["damage"]
    assert status == 2 and (dmg["kind"], dmg["byte"]) == ("torn", len(good))
    status, _ = await ledger_cli("repair", str(tmp_path), "--all")
    assert status == 0 and read(path) == good
    assert list(await read_store(tmp_path, NAME)) == [p.entry_id for p in positions]


async def test_a_garbled_length_mid_segment_is_cut_only_when_asked(tmp_path: Path) -> None:
    path, positions, starts = await write_entries(tmp_path)
    before = damage(path, starts[6], b"\x00\xff\xff\x00")  # where entry 6 ends is unknown now

    status, report = await ledger_cli("repair", str(tmp_path), "--ledger", NAME)
    assert status == 2 and report["ledgers"][0]["refused"]
    assert read(path) == before
    status, report = await ledger_cli("repair", str(tmp_path), "--ledger", NAME, "--truncate")
    assert status == 0 and size(path) == starts[6]
    assert list(await read_store(tmp_path, NAME)) == [p.entry_id for p in positions[:6]]
