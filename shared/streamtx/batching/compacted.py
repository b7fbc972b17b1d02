"""Compacted bases: how an offline compaction hands a smaller log to its running owner.

The ``compact`` Spark job (``spark-jobs/streamtx/jobs/compact.py``) never
writes to a log it does not own (opening it as a writer would fence the
service). It writes a **compacted base** beside it instead, and the owner
reads the base before the tail:

* ``<log>/base/<generation>`` — a new ledger per compaction, holding the
  records of ``<log>`` below the **cut** (the log's end when the job read it)
  that replay still needs, each with its original place in ``<log>``, so the
  owner's cursor deletes them exactly as before. Entries are batched entries
  (:mod:`.codec`) of base records::

      u64 entry_id, u32 batch_index, u32 batch_size, the record's bytes

  and the last entry is the **seal**::

      b"STXSEAL1", u64 cut, u64 records, u32 CRC32C of every base record in order

* ``compaction/manifest`` — one ledger for the whole store; each entry is the
  complete map, UTF-8 JSON ``{"version": 1, "logs": {"<log>": {"generation": g,
  "cut": c, "records": n}}}``; the last entry is in force. Appending it is the
  commit point of a compaction: a job that dies before it leaves an
  unreferenced base (ignored, deleted by the next run) and changes nothing.

Replay (:func:`load_base`) applies the base's records below where the log
itself takes over (:func:`takes_over`: the log's first entry, at most the cut)
that the owner's cursor has not deleted, with the shared rule of
:mod:`.replay`, then the log from there: what the log still holds is read from
the log, so a base missing something changes nothing until it is adopted.
The owner **adopts** a base (:func:`adopt`, :func:`adopt_loaded`) only after
checking that every record its state still needs below the cut is in the base,
then trims ``<log>`` up to the cut. Owners adopt when they recover and, while
they run, when they next delete finished records.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import google_crc32c

from streamtx.batching.codec import decode_entry, encode_batch
from streamtx.errors import CorruptEntryError
from streamtx.ledger.base import Ledger, LedgerFactory, Position

log = logging.getLogger(__name__)

manifest_ledger = "compaction/manifest"
_record_head = struct.Struct(">QII")
_seal = struct.Struct(">8sQQI")
_seal_magic = b"STXSEAL1"
BaseRecord = tuple[int, int, int, bytes]  # entry_id, batch_index, batch_size, record
Ref = tuple[Position, int, int]  # (position, batch_index, batch_size) in the compacted log


def base_ledger(log_name: str, generation: int) -> str:
    """The name of generation ``generation`` of ``log_name``'s compacted base."""
    return f"{log_name}/base/{generation}"


@dataclass(frozen=True, slots=True)
class BaseInfo:
    """The manifest's line for one log."""

    generation: int
    cut: int
    records: int


def encode_manifest(logs: dict[str, BaseInfo]) -> bytes:
    body = {n: {"generation": b.generation, "cut": b.cut, "records": b.records} for n, b in logs.items()}
    return json.dumps({"version": 1, "logs": body}, sort_keys=True).encode()


def decode_manifest(raw: bytes) -> dict[str, BaseInfo]:
    try:
        doc = json.loads(raw)
        if doc.get("version") != 1:
            raise CorruptEntryError(f"compaction manifest version {doc.get('version')!r} is not 1")
        return {name: BaseInfo(int(v["generation"]), int(v["cut"]), int(v["records"]))
                for name, v in doc["logs"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CorruptEntryError(f"bad compaction manifest: {exc}") from exc


def encode_base(records: Iterable[BaseRecord], cut: int, *, max_entry_bytes: int = 1 << 20) -> list[bytes]:
    """The entries of a base ledger: batched base records, then the seal."""
    entries: list[bytes] = []
    batch: list[bytes] = []
    size = count = crc = 0
    for entry_id, index, batch_size, raw in records:
        rec = _record_head.pack(entry_id, index, batch_size) + raw
        crc = google_crc32c.extend(crc, rec)
        count += 1
        batch.append(rec)
        size += len(rec) + 4
        if size >= max_entry_bytes:
            entries.append(encode_batch(batch))
            batch, size = [], 0
    if batch:
        entries.append(encode_batch(batch))
    entries.append(_seal.pack(_seal_magic, cut, count, crc))
    return entries


def decode_base(entries: Sequence[bytes], info: BaseInfo) -> list[BaseRecord]:
    """The base records, checked against the seal and the manifest (CorruptEntryError if not whole)."""
    if not entries or not entries[-1].startswith(_seal_magic) or len(entries[-1]) != _seal.size:
        raise CorruptEntryError("compacted base has no seal: its compaction did not finish")
    _, cut, count, crc = _seal.unpack(entries[-1])
    out: list[BaseRecord] = []
    check = 0
    for entry in entries[:-1]:
        for rec in decode_entry(entry):
            check = google_crc32c.extend(check, rec)
            entry_id, index, size = _record_head.unpack_from(rec)
            out.append((entry_id, index, size, rec[_record_head.size :]))
    if (cut, count, crc) != (info.cut, info.records, check) or len(out) != count:
        raise CorruptEntryError("compacted base does not match its seal and manifest")
    return out


async def read_all(ledger: Ledger) -> list[bytes]:
    """Every entry of a ledger, in order."""
    out: list[bytes] = []
    start: Position | None = None
    while True:
        chunk = await ledger.read(start, 1000)
        if not chunk:
            return out
        out.extend(e.data for e in chunk)
        last = chunk[-1].position
        start = Position(last.ledger_id, ledger.next_entry_id(last.entry_id))


def _exists(factory: LedgerFactory, name: str) -> bool:
    # A file store would create the directory on open: look first (other backends: open).
    # One stat, not worth a thread hop.
    ledger_dir = getattr(factory, "ledger_dir", None)
    return ledger_dir is None or os.path.isdir(ledger_dir(name))


async def read_manifest(factory: LedgerFactory) -> dict[str, BaseInfo]:
    """The manifest in force (empty when no compaction ever committed)."""
    if not _exists(factory, manifest_ledger):
        return {}
    ledger = await factory.open(manifest_ledger, writer=False)
    try:
        last = ledger.last_position()
        if last is None:
            return {}
        (entry,) = await ledger.read(last, 1)
        return decode_manifest(entry.data)
    finally:
        await ledger.close()


async def load_base(factory: LedgerFactory, log_name: str) -> tuple[BaseInfo, list[BaseRecord]] | None:
    """The compacted base in force for ``log_name``, read and checked; None when there is none."""
    info = (await read_manifest(factory)).get(log_name)
    if info is None:
        return None
    ledger = await factory.open(base_ledger(log_name, info.generation), writer=False)
    try:
        return info, decode_base(await read_all(ledger), info)
    finally:
        await ledger.close()


def takes_over(ledger: Ledger, info: BaseInfo) -> int:
    """Where replay leaves the base for the log itself: the log's first entry, at most the cut.

    The log is the source of truth: what it still holds is read from it, and
    the base only stands in for what was trimmed away (the base adopted). A
    base that lacks a record the log still holds then loses nothing, and the
    adoption check after replay (:func:`adopt_loaded`) refuses it.
    """
    first = ledger.first_position()
    return info.cut if first is None else min(first.entry_id, info.cut)


def below(records: Iterable[BaseRecord], entry_id: int) -> list[BaseRecord]:
    """The base records replay takes from the base: those below ``entry_id`` (:func:`takes_over`)."""
    return [r for r in records if r[0] < entry_id]


async def adopt(factory: LedgerFactory, ledger: Ledger, needed: Iterable[Ref], adopted: int) -> int:
    """Trim ``ledger`` up to a newer base's cut if that base holds every ``needed`` record below it.

    ``adopted`` is the generation adopted so far (-1: none); returns the one adopted now.
    """
    loaded = await load_base(factory, ledger.name)
    if loaded is None or loaded[0].generation <= adopted:
        return adopted
    return await adopt_loaded(ledger, loaded[0], loaded[1], needed, adopted)


def missing(info: BaseInfo, records: Iterable[BaseRecord], needed: Iterable[Ref]) -> int:
    """How many ``needed`` records below the base's cut the base lacks."""
    have = {(e, i, n) for e, i, n, _ in records}
    return sum(1 for p, i, n in needed if p.entry_id < info.cut and (p.entry_id, i, n) not in have)


async def adopt_loaded(ledger: Ledger, info: BaseInfo, records: Iterable[BaseRecord], needed: Iterable[Ref],
                       adopted: int) -> int:
    """:func:`adopt` with the base already read (at recovery)."""
    if info.generation <= adopted:
        return adopted
    lacking = missing(info, records, needed)
    if lacking:
        log.warning("%s: compacted base %d lacks %d live records; not adopted", ledger.name,
                    info.generation, lacking)
        return adopted
    await ledger.trim(Position(ledger.ledger_id, info.cut))
    log.info("%s: adopted compacted base %d (trimmed below %d)", ledger.name, info.generation, info.cut)
    return info.generation
