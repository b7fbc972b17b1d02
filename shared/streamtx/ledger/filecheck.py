"""Damaged segment files: a torn tail or corruption, and the operator's check and repair.

Bytes that do not scan as entries (see :mod:`.segment`) are judged by what
follows them:

* **torn tail**: nothing valid follows, up to the end of the *last* segment.
  An append was cut short by a crash; it was never acknowledged (an append is
  acknowledged after its fsync). A writer cuts it off when it opens the
  ledger; a read-only open leaves it in place and reads up to it.
* **corruption**: a whole, checksummed entry follows the bad bytes, or the bad
  bytes are in a sealed segment (one with a newer segment after it). Cutting
  there would drop acknowledged entries, so the ledger refuses to open
  (:class:`~streamtx.errors.CorruptEntryError` naming the file and byte
  offset; ``streamtx_ledger_corruptions_total`` counts it) until an operator
  runs ``streamtx-admin ledger check`` and ``repair``.

:func:`check_ledger` reports every damaged place of a ledger directory (under
its lock, so no append is half written meanwhile); :func:`repair_ledger`
cuts torn tails, overwrites a damaged entry whose length field survived (the
next entry starts right after it) with an entry of the same size that keeps
every later entry's id and how it is read: a filler (a frame that is never
live, see :mod:`.frames`) or the fence the entry was (:mod:`.repairplan`),
or refuses, saying why; it cuts the last segment at any other damage only
with ``truncate``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from streamtx.errors import LedgerError
from streamtx.ledger import frames, metrics, repairplan, segment

LOCK_NAME = "LOCK"
TRIM_NAME = "TRIM"
_frame_kinds = frozenset(k.value for k in frames.FrameKind)


def _plausible(buf: bytes, payload: int, length: int) -> bool:
    """Whether an entry's payload can be a frame at all (a cheap test before its checksum)."""
    return length >= frames.HEADER_SIZE and buf[payload] in _frame_kinds


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes of one segment file that are not valid entries, and what they are judged to be."""

    path: str
    byte: int  # where the bad bytes start in the file
    size: int  # the file's size
    entry_id: int  # the ledger offset the first bad entry would have
    reason: str  # why the scan stopped there ("checksum mismatch", ...)
    kind: str  # "torn" or "corrupt"
    next_valid: int | None  # file position of the first valid entry after the bad bytes
    declared_length: int | None  # the bad entry's length field, when it could be read

    @property
    def corrupt(self) -> bool:
        return self.kind == "corrupt"

    @property
    def one_entry(self) -> bool:
        """Whether exactly one entry is damaged: its length field leads to the next valid entry."""
        return (self.declared_length is not None and self.next_valid is not None
                and self.next_valid == self.byte + segment.HEADER_SIZE + self.declared_length)

    def describe(self) -> str:
        where = f"{self.path} at byte {self.byte} of {self.size} (entry {self.entry_id})"
        if not self.corrupt:
            return f"{where}: {self.reason}; a torn tail of {self.size - self.byte} bytes"
        after = (f"a valid entry follows at byte {self.next_valid}" if self.next_valid is not None
                 else "in a sealed segment or not provably torn")
        return (f"{where}: {self.reason}, and {after}: corruption, not a torn write. "
                "Nothing was cut; see `streamtx-admin ledger check` / `repair`")


def judge(fd: int, path: str, byte: int, size: int, entry_id: int, *, sealed: bool, reason: str) -> Damage:
    """Judge the bad bytes at ``byte`` of an open segment file (read up to ``size``)."""
    buf = _pread(fd, size - byte, byte)
    declared = int.from_bytes(buf[:4], "big") if len(buf) >= segment.HEADER_SIZE else None
    found = segment.find_entry(buf, 1, plausible=_plausible)
    next_valid = None if found.found is None else byte + found.found
    corrupt = sealed or next_valid is not None or not found.complete
    if not found.complete:
        reason += " (the search for valid entries after it gave up)"
    return Damage(path, byte, size, entry_id, reason, "corrupt" if corrupt else "torn", next_valid, declared)


def count(ledger_dir: str) -> None:
    """Count one refused open of a corrupt ledger."""
    metrics.corruption_found(os.path.basename(ledger_dir.rstrip("/")))


# --- the operator's check and repair (offline; blocking I/O) --------------------------


@dataclass(slots=True)
class LedgerReport:
    """What :func:`check_ledger` found in one ledger directory."""

    directory: str
    segments: int = 0
    entries: int = 0
    damage: list[Damage] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.damage

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["damage"] = [{**asdict(d), "description": d.describe()} for d in self.damage]
        out["clean"] = self.clean
        return out


def check_ledger(directory: str) -> LedgerReport:
    """Scan every segment of a ledger directory; report (never change) what is damaged."""
    with _locked(directory):
        return _scan(directory)[0]


def repair_ledger(directory: str, *, truncate: bool = False) -> LedgerReport:
    """Check, then repair what can be repaired without losing an acknowledged entry (see the module doc).

    A damaged entry whose length survived is overwritten with what
    :func:`streamtx.ledger.repairplan.plan` decides (a filler, or the fence it
    was), so every later entry keeps its id and is read as before; that comes
    first, even with ``truncate``. ``truncate``: also cut the last segment at
    damage that cannot be overwritten so, dropping every entry after it. The
    report lists what was done and refused, and why.
    """
    with _locked(directory):
        report, slots = _scan(directory)
        start, state = _trim_state(directory)
        fixes = {f.entry_id: f for f in repairplan.plan(slots, start=start, state=state)}
        last_path = _segment_paths(directory)[-1] if report.segments else ""
        cut = -1  # where the last segment was cut: later damage there went with it
        for damage in report.damage:
            last = damage.path == last_path
            if last and 0 <= cut <= damage.byte:
                continue
            fix = fixes.get(damage.entry_id) if damage.one_entry else None
            fd = os.open(damage.path, os.O_RDWR)
            try:
                if fix is not None and fix.frame is not None:
                    os.pwrite(fd, segment.encode_entries([fix.frame]), damage.byte)
                    report.repaired.append(f"entry {damage.entry_id} ({damage.path} at byte {damage.byte}): "
                                           f"{fix.why}")
                elif last and (not damage.corrupt or truncate):
                    os.ftruncate(fd, damage.byte)
                    cut = damage.byte
                    report.repaired.append(f"cut {damage.path} at byte {damage.byte}: {damage.reason}")
                else:
                    why = f"; {fix.why}" if fix is not None else ""
                    hint = "" if last else " (not the last segment: cut by hand, then rename the later ones)"
                    report.refused.append(f"{damage.describe()}{why}; repair --truncate cuts there{hint}")
                    continue
                os.fsync(fd)
            finally:
                os.close(fd)
        return report


def _scan(directory: str) -> tuple[LedgerReport, list[repairplan.Slot]]:
    """The report, and every entry's frame head in log order (up to damage that hides the ids after it)."""
    report = LedgerReport(directory)
    slots: list[repairplan.Slot] = []
    ids_known = True  # False after damage whose end is unknown: later ids and frames are guesses
    paths = _segment_paths(directory)
    report.segments = len(paths)
    for n, path in enumerate(paths):
        base = segment.parse_segment_name(os.path.basename(path))
        assert base is not None
        if base != report.entries and n > 0:
            gap = f"starts at offset {base}, not {report.entries}"
            report.damage.append(Damage(path, 0, os.path.getsize(path), base, gap, "corrupt", None, None))
            ids_known = False
        report.entries = base
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while True:
            res = segment.scan(data[pos:], pos)
            if ids_known:
                slots.extend(repairplan.Slot(report.entries + i, _head(data, p))
                             for i, p in enumerate(res.positions))
            report.entries += len(res.positions)
            if res.end >= len(data):
                break
            fd = os.open(path, os.O_RDONLY)
            try:
                damage = judge(fd, path, res.end, len(data), report.entries, sealed=n < len(paths) - 1,
                               reason=res.reason)
            finally:
                os.close(fd)
            report.damage.append(damage)
            if damage.next_valid is None:
                break
            if damage.one_entry and (damage.declared_length or 0) >= frames.HEADER_SIZE:
                assert damage.declared_length is not None
                if ids_known:
                    slots.append(repairplan.Slot(report.entries, None, damage.declared_length))
            else:
                ids_known = False  # no frame of that size can stand in for it
            if damage.one_entry:
                report.entries += 1  # the damaged entry still takes its id
            pos = damage.next_valid
    return report, slots


def _head(data: bytes, pos: int) -> bytes:
    """The frame header of the entry at ``pos`` (what judging it by the fencing rule reads)."""
    start = pos + segment.HEADER_SIZE
    return data[start : start + frames.HEADER_SIZE]


def _trim_state(directory: str) -> tuple[int, frames.FenceState]:
    try:
        with open(os.path.join(directory, TRIM_NAME), "rb") as f:
            start, state = segment.decode_trim_state(f.read())
    except FileNotFoundError:
        return 0, frames.FenceState()
    return start, frames.FenceState.decode(state)


def _segment_paths(directory: str) -> list[str]:
    names = sorted(n for n in os.listdir(directory) if segment.parse_segment_name(n) is not None)
    return [os.path.join(directory, n) for n in names]


@contextlib.contextmanager
def _locked(directory: str) -> Iterator[None]:
    if not os.path.isdir(directory):
        raise LedgerError(f"{directory} is not a ledger directory")
    fd = os.open(os.path.join(directory, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _pread(fd: int, size: int, offset: int) -> bytes:
    parts, got = [], 0
    while got < size:
        chunk = os.pread(fd, size - got, offset + got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)
