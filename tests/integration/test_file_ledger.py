"""The file backend on real files: crashes, torn tails, rollover, trim, several handles."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from streamtx.errors import CorruptEntryError, FencedError, LedgerClosedError
from streamtx.ledger import Ledger, Position, frames, segment
from streamtx.ledger.file import FileLedgerFactory, FileRawLog
from tests.support.append_forever import key_of, payload_for
from tests.support.procs import python_env

REPO = Path(__file__).resolve().parents[2]


# --- helpers ------------------------------------------------------------------


def start_appender(root: Path, name: str, out: Path, *args: str) -> subprocess.Popen[bytes]:
    env = python_env()
    with open(out, "wb") as stdout, open(out.with_suffix(".err"), "wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.support.append_forever", str(root), name, *args],
            stdout=stdout, stderr=stderr, cwd=REPO, env=env,
        )


def parse_acks(out: Path) -> list[tuple[int, str]]:
    """``(offset, key)`` of each whole ACK line; checks each line's payload digest."""
    acks = []
    for line in out.read_bytes().decode().splitlines(keepends=True):
        if not line.startswith("ACK ") or not line.endswith("\n"):
            continue  # the line being printed when the process died
        _, offset, key, digest = line.split()
        assert hashlib.sha256(payload_for(key)).hexdigest()[:16] == digest
        acks.append((int(offset), key))
    return acks


async def wait_for_acks(proc: subprocess.Popen[bytes], out: Path, count: int) -> None:
    for _ in range(600):
        if proc.poll() is not None:
            err = out.with_suffix(".err").read_text()
            raise AssertionError(f"appender exited with {proc.returncode}: {err}")
        if _ack_lines(out) >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("appender acknowledged too little in 30 s")


async def read_all(ledger: Ledger) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    start: Position | None = None
    while batch := await ledger.read(start, 1000):
        out.update((e.position.entry_id, e.data) for e in batch)
        start = Position(ledger.ledger_id, batch[-1].position.entry_id + 1)
    return out


async def read_store(root: Path, name: str) -> dict[int, bytes]:
    ledgers = FileLedgerFactory(str(root))
    try:
        return await read_all(await ledgers.open(name, writer=False))
    finally:
        await ledgers.close()


def _ack_lines(out: Path) -> int:
    return out.read_bytes().count(b"\nACK ") if out.exists() else 0


def _file_size(path: str) -> int:
    return os.path.getsize(path)


def segment_files(ledgers: FileLedgerFactory, name: str) -> list[str]:
    return sorted(n for n in os.listdir(ledgers.ledger_dir(name)) if n.endswith(".seg"))


# --- (1) kill -9 while 64 appenders run ------------------------------------------


async def test_acknowledged_appends_survive_kill_9(tmp_path: Path) -> None:
    root, name = tmp_path / "ledgers", "crash/ledger"
    acked: dict[int, str] = {}
    for run in range(3):
        out = tmp_path / f"run{run}.out"
        proc = start_appender(root, name, out, "--run", str(run), "--tasks", "64")
        try:
            await wait_for_acks(proc, out, 20)
            await asyncio.sleep(random.uniform(0.8, 1.5))
        finally:
            proc.kill()
            proc.wait()
        assert proc.returncode == -signal.SIGKILL
        run_acks = parse_acks(out)
        assert len(run_acks) >= 20
        for offset, key in run_acks:
            assert offset not in acked
            acked[offset] = key

        entries = await read_store(root, name)
        for offset, key in acked.items():  # every acknowledged entry, at its position
            assert entries.get(offset) == payload_for(key), f"lost acked entry {key} @ {offset}"
        keys = [key_of(data) for data in entries.values()]
        assert len(set(keys)) == len(keys)  # no duplicates
        for data in entries.values():  # nothing partial or foreign
            assert data == payload_for(key_of(data))

    ledgers = FileLedgerFactory(str(root))
    try:
        ledger = await ledgers.open(name)
        after = await ledger.append(b"after the crashes")
        assert after.entry_id > max(acked)
    finally:
        await ledgers.close()


# --- (2) torn and corrupt tails ------------------------------------------------------


def _flip_payload_byte(buf: bytes, last: int) -> bytes:
    damaged = bytearray(buf)
    damaged[last + segment.HEADER_SIZE + 2] ^= 0x40
    return bytes(damaged)


_Damage = Callable[[bytes, int], bytes]  # (file bytes, start of the last entry) -> damaged bytes
_DAMAGES: dict[str, tuple[_Damage, bool]] = {  # name -> (damage, whether the last entry survives)
    "cut-in-payload": (lambda b, last: b[: last + segment.HEADER_SIZE + 3], False),
    "cut-in-header": (lambda b, last: b[: last + 5], False),
    "cut-after-header": (lambda b, last: b[: last + segment.HEADER_SIZE], False),
    "payload-bit-flip": (_flip_payload_byte, False),
    "crc-bit-flip": (lambda b, last: b[: last + 4] + bytes([b[last + 4] ^ 1]) + b[last + 5 :], False),
    "length-garbage": (lambda b, last: b[:last] + b"\xff\xff\xff\xff" + b[last + 4 :], False),
    "zeros-after": (lambda b, last: b + bytes(4096), True),
    "half-entry-after": (lambda b, last: b + segment.encode_entries([b"y" * 100])[:60], True),
}


@pytest.mark.parametrize("damage", sorted(_DAMAGES))
async def test_a_torn_or_corrupt_tail_is_cut_off(tmp_path: Path, damage: str) -> None:
    ledgers = FileLedgerFactory(str(tmp_path))
    ledger = await ledgers.open("tail")
    positions = [await ledger.append(b"entry-%02d" % i * 3) for i in range(10)]
    await ledgers.close()

    (seg_name,) = segment_files(ledgers, "tail")
    path = os.path.join(ledgers.ledger_dir("tail"), seg_name)
    damage_fn, last_survives = _DAMAGES[damage]
    good_size, last = _damage_last_entry(path, damage_fn)

    ledgers = FileLedgerFactory(str(tmp_path))
    try:
        damaged_size = _file_size(path)
        ledger = await ledgers.open("tail", writer=False)  # reads up to the tail, never cuts it
        assert _file_size(path) == damaged_size
        kept = positions if last_survives else positions[:-1]
        assert list((await read_all(ledger)).items()) == [
            (p.entry_id, b"entry-%02d" % i * 3) for i, p in enumerate(kept)
        ]
        writer = await ledgers.open("tail")  # a writer cuts the torn tail (then appends its fence)
        fence = segment.HEADER_SIZE + frames.HEADER_SIZE
        assert _file_size(path) == (good_size if last_survives else last) + fence
        newer = await writer.append(b"after repair")
        assert newer > kept[-1]
    finally:
        await ledgers.close()
    entries = await read_store(tmp_path, "tail")
    assert list(entries) == [p.entry_id for p in kept] + [newer.entry_id]
    assert entries[newer.entry_id] == b"after repair"


def _damage_last_entry(path: str, damage: _Damage) -> tuple[int, int]:
    """Damage a segment's last entry; return the old size and where that entry started."""
    good = Path(path).read_bytes()
    last = segment.scan(good).positions[-1]
    Path(path).write_bytes(damage(good, last))
    return len(good), last


def _flip_middle_byte(path: str) -> int:
    damaged = bytearray(Path(path).read_bytes())
    damaged[len(damaged) // 2] ^= 0x01
    Path(path).write_bytes(bytes(damaged))
    return len(damaged)


async def test_corruption_before_the_last_segment_is_an_error(tmp_path: Path) -> None:
    ledgers = FileLedgerFactory(str(tmp_path), segment_bytes=512)
    ledger = await ledgers.open("rot")
    for i in range(40):
        await ledger.append(b"r%03d" % i * 10)
    await ledgers.close()
    first = os.path.join(ledgers.ledger_dir("rot"), segment_files(ledgers, "rot")[0])
    size = _flip_middle_byte(first)

    ledgers = FileLedgerFactory(str(tmp_path), segment_bytes=512)
    with pytest.raises(CorruptEntryError):
        await ledgers.open("rot", writer=False)
    await ledgers.close()
    assert _file_size(first) == size  # nothing was cut from a sealed segment


# --- (3) rollover and trim ---------------------------------------------------------------


async def test_rollover_and_trim_delete_whole_segments_and_survive_reopen(tmp_path: Path) -> None:
    ledgers = FileLedgerFactory(str(tmp_path), segment_bytes=1024)
    ledger = await ledgers.open("roll")
    positions = [await ledger.append(b"%04d" % i + b"x" * 96) for i in range(100)]
    stats = list(ledger.stats())
    assert len(stats) >= 8
    for a, b in itertools.pairwise(stats):
        assert b.segment_id == a.segment_id + a.entries  # consecutive offsets
        assert a.size >= 1024  # a segment is only left once full
    assert segment_files(ledgers, "roll") == [segment.segment_name(s.segment_id) for s in stats]

    cut = positions[50].entry_id
    await ledger.trim(positions[50])
    trimmed = list(ledger.stats())
    assert trimmed == [s for s in stats if s.segment_id + s.entries > cut]
    assert trimmed[0].segment_id <= cut
    assert segment_files(ledgers, "roll") == [segment.segment_name(s.segment_id) for s in trimmed]
    assert [e.position for e in await ledger.read(max_entries=1000)] == positions[50:]
    await ledgers.close()

    ledgers = FileLedgerFactory(str(tmp_path), segment_bytes=1024)
    try:
        reader = await ledgers.open("roll", writer=False)
        assert reader.first_position() == positions[50]
        assert list(reader.stats()) == trimmed
        entries = await read_all(reader)
        assert list(entries) == [p.entry_id for p in positions[50:]]
        # Below the start nothing is returned, even though its segment is still on disk.
        assert [e.position for e in await reader.read(positions[45], 2)] == positions[50:52]

        writer = await ledgers.open("roll")
        end = Position(writer.ledger_id, positions[-1].entry_id + 1)
        await writer.trim(end)  # everything: the last segment stays, offsets go on
        assert len(segment_files(ledgers, "roll")) == 1
        newer = await writer.append(b"after trimming everything")
    finally:
        await ledgers.close()
    entries = await read_store(tmp_path, "roll")
    assert list(entries.items()) == [(newer.entry_id, b"after trimming everything")]
    assert newer.entry_id > positions[-1].entry_id


# --- (4) two handles on one directory ------------------------------------------------------


async def test_a_second_store_fences_the_first_writer(tmp_path: Path) -> None:
    one, two, three = (FileLedgerFactory(str(tmp_path)) for _ in range(3))
    try:
        first = await one.open("fence")
        await first.append(b"a")
        second = await two.open("fence")
        await second.append(b"b")
        with pytest.raises(FencedError):
            await first.append(b"zombie")  # it reached the disk, after the fence
        with pytest.raises(FencedError):
            await first.append(b"zombie again")
        reader = await three.open("fence", writer=False)
        assert list((await read_all(reader)).values()) == [b"a", b"b"]
        assert sum(s.entries for s in reader.stats()) == 5  # 2 fences, a, b, the zombie
        await second.append(b"c")
        assert list((await read_all(reader)).values()) == [b"a", b"b", b"c"]
    finally:
        for ledgers in (one, two, three):
            await ledgers.close()


async def test_raw_handles_in_one_process_share_offsets(tmp_path: Path) -> None:
    handles = [await FileRawLog.open(str(tmp_path / "raw"), segment_bytes=4096) for _ in range(3)]
    try:
        async def writer(h: int) -> list[tuple[int, bytes]]:
            done: list[tuple[int, bytes]] = []
            for i in range(40):
                frames = [b"h%d-%d-%d" % (h, i, j) * 5 for j in range(1 + i % 4)]
                done += zip(await handles[h].append_batch(frames), frames, strict=True)
            return done

        written = [x for part in await asyncio.gather(writer(0), writer(1)) for x in part]
        offsets = sorted(o for o, _ in written)
        assert offsets == list(range(len(written)))
        assert await handles[2].read_raw(0, 10_000) == sorted(written)
        assert await handles[0].end_offset() == len(written)
    finally:
        for h in handles:
            await h.close()


async def test_raw_appenders_in_two_processes_share_offsets(tmp_path: Path) -> None:
    outs = [tmp_path / f"p{i}.out" for i in range(2)]
    procs = [
        start_appender(tmp_path, "shared", out, "--raw", "--run", f"p{i}", "--tasks", "4",
                       "--count", "40", "--segment-bytes", "8192")
        for i, out in enumerate(outs)
    ]
    for proc in procs:
        assert await asyncio.to_thread(proc.wait, 60) == 0
    acks = [a for out in outs for a in parse_acks(out)]
    assert len(acks) == 2 * 4 * 40
    assert sorted(o for o, _ in acks) == list(range(len(acks)))
    raw = await FileRawLog.open(str(tmp_path / segment.ledger_dir_name("shared")))
    try:
        assert await raw.read_raw(0, 10_000) == sorted((o, payload_for(k)) for o, k in acks)
    finally:
        await raw.close()


# --- (5) reopen ---------------------------------------------------------------------------------


async def test_reopen_keeps_entries_positions_and_stats(tmp_path: Path) -> None:
    ledgers = FileLedgerFactory(str(tmp_path), segment_bytes=8 << 20)
    ledger = await ledgers.open("reopen")
    sizes = [1, 10, 1000, 5 << 20, 3, 70_000]  # 5 MiB: larger than one scan chunk
    payloads = [bytes([i % 251]) * n for i, n in enumerate(sizes * 3)]
    positions = await asyncio.gather(*(ledger.append(p) for p in payloads))
    stats = list(ledger.stats())
    await ledgers.close()

    ledgers = FileLedgerFactory(str(tmp_path), segment_bytes=8 << 20)
    try:
        again = await ledgers.open("reopen", writer=False)
        assert list(again.stats()) == stats
        assert again.last_position() == max(positions)
        assert await read_all(again) == {
            p.entry_id: data for p, data in zip(positions, payloads, strict=True)
        }
        writer = await ledgers.open("reopen")
        assert (await writer.append(b"next")) > max(positions)
    finally:
        await ledgers.close()


async def test_read_raw_uses_one_pread_per_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = await FileRawLog.open(str(tmp_path / "pread"))
    frames = [b"frame %d" % i for i in range(500)]
    await writer.append_batch(frames)
    # A second handle: the writer's own appends come from its frame cache (below).
    raw = await FileRawLog.open(str(tmp_path / "pread"))
    try:
        calls = 0
        real = os.pread

        def counting(fd: int, n: int, offset: int) -> bytes:
            nonlocal calls
            calls += 1
            return real(fd, n, offset)

        monkeypatch.setattr(os, "pread", counting)
        assert await raw.read_raw(100, 300) == list(enumerate(frames))[100:400]
        assert calls == 1
        # The writer serves its tail from memory, and reads past the cache from disk.
        assert await writer.read_raw(100, 300) == list(enumerate(frames))[100:400]
        assert calls == 1
        await raw.append_batch([b"by the other handle"])
        assert await writer.read_raw(499, 5) == [(499, frames[499])]
        assert calls == 1
        assert await writer.read_raw(500, 5) == [(500, b"by the other handle")]
        assert calls > 1  # not in its cache: read from the files
    finally:
        await raw.close()
        await writer.close()


async def test_an_open_writer_cuts_a_torn_tail_another_process_left(tmp_path: Path) -> None:
    ledgers = FileLedgerFactory(str(tmp_path))
    try:
        ledger = await ledgers.open("torn")
        first = await ledger.append(b"first")
        (seg_name,) = segment_files(ledgers, "torn")
        path = os.path.join(ledgers.ledger_dir("torn"), seg_name)
        size = _file_size(path)
        _append_bytes(path, segment.encode_entries([b"z" * 50])[:30])  # a crashed writer's half
        second = await ledger.append(b"second")
        assert second.entry_id == first.entry_id + 1
        assert _file_size(path) == size + segment.HEADER_SIZE + len(b"second") + 21
    finally:
        await ledgers.close()
    assert list((await read_store(tmp_path, "torn")).values()) == [b"first", b"second"]


def _append_bytes(path: str, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


async def test_delete_removes_the_ledger_and_closes_its_handles(tmp_path: Path) -> None:
    ledgers = FileLedgerFactory(str(tmp_path))
    try:
        ledger = await ledgers.open("gone")
        await ledger.append(b"x")
        await ledgers.delete("gone")
        assert not await asyncio.to_thread(os.path.exists, ledgers.ledger_dir("gone"))
        with pytest.raises(LedgerClosedError):
            await ledger.append(b"late")
        again = await ledgers.open("gone")
        assert await again.read() == []
        await ledgers.delete("never-existed")
    finally:
        await ledgers.close()


async def test_a_handle_lists_the_directory_only_when_a_file_came_or_went(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every append and read caught up with the files by listing the ledger's directory (about
    5% of a service's CPU); now only when the directory's mtime moved, or was too recent to
    trust. A reader still sees what another handle appended, in the tail and in new segments."""
    directory = str(tmp_path / "listed")
    writer = await FileRawLog.open(directory, segment_bytes=1024)
    reader = await FileRawLog.open(directory, segment_bytes=1024)
    try:
        await writer.append_batch([b"first"])
        await asyncio.sleep(0.15)  # the directory's mtime is old enough to trust
        await writer.append_batch([b"late"])  # each handle lists once more, late enough to trust it
        assert await reader.read_raw(0, 10) == [(0, b"first"), (1, b"late")]
        listings = 0
        real = os.listdir

        def counting(path: str) -> list[str]:
            nonlocal listings
            listings += 1
            return real(path)

        monkeypatch.setattr(os, "listdir", counting)
        for i in range(2, 7):
            await writer.append_batch([b"tail %d" % i])
            assert (await reader.read_raw(i, 10))[0] == (i, b"tail %d" % i)
        assert listings == 0  # no file came or went: each only scanned its tail
        big = [b"x" * 200 for _ in range(20)]  # past 1024 bytes: new segments
        offsets = await writer.append_batch(big[:5]) + await writer.append_batch(big[5:])
        assert await reader.read_raw(7, 100) == list(zip(offsets, big, strict=True))
        assert listings > 0
    finally:
        await reader.close()
        await writer.close()
