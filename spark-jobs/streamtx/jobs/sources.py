"""Which ledgers a job reads, and how they are cut into Spark tasks (the driver's side).

Ledgers are named by the services (``txnlog/<cluster>/<coordinator_id>``,
``pendingack/<topic>/<subscription>``, ``topics/<partition>``,
``tbsnapshot/<partition>``); a job picks them with a shell-style pattern on
that name. Cursor ledgers (``.../cursor/...``) and the compaction's own
ledgers (``compaction/...``, ``.../base/...``) are never inputs.

* **file://DIR** ledgers are found by listing ``DIR`` (directory names decode
  back to ledger names) and split by segment, and large segments by byte
  range (:mod:`.scan` resynchronises on the frame header);
* **kafka://host:port** ledgers cannot be listed by name (topic names are
  sanitised and hashed), so the job is given the names (``--names``); each
  is split by offset range and read inside the task with the ledger layer's
  own aiokafka reader (:class:`~streamtx.ledger.kafka.KafkaRawLog`).
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from streamtx.cursor.cursor import cursor_ledger_name
from streamtx.cursor.state import CursorState
from streamtx.ledger import open_ledger_factory, segment, where
from streamtx.ledger.frames import FenceState
from streamtx.names import PARTITION_SUFFIX

TXNLOG, PENDINGACK, PARTITION, SNAPSHOT = "txnlog", "pendingack", "partition", "tbsnapshot"
_scheme = "persistent://"
_cursor_of = {TXNLOG: "tc", PENDINGACK: "pendingack"}


@dataclass(frozen=True)
class LedgerRef:
    """One input ledger: its name, kind and the labels its metrics get."""

    url: str
    name: str
    kind: str
    labels: tuple[tuple[str, str], ...]

    def label(self, key: str) -> str:
        return dict(self.labels)[key]


@dataclass(frozen=True)
class Split:
    """A piece of a ledger one task reads: a segment byte range, or a Kafka offset range."""

    ledger: LedgerRef
    order: int  # place in the ledger, for the driver's fence judging
    lo: int  # file byte / Kafka offset (inclusive)
    hi: int  # exclusive
    path: str = ""  # file segment
    base: int = 0  # the segment's first entry id
    mtime_ms: int = 0


@dataclass(frozen=True)
class Task:
    """A split after the first pass: where its live entries start and which ids to drop."""

    split: Split
    first: int  # file position of the first entry (file); = lo (kafka)
    first_id: int
    end_id: int  # one past the last entry id of the split
    drop: frozenset[int] = field(default_factory=frozenset)


def classify(url: str, name: str) -> LedgerRef | None:
    """A LedgerRef for a data ledger name; None for cursor and compaction ledgers.

    Every per-topic metric labels its topic the same way, whatever ledger it
    comes from (partition ledgers drop the ``persistent://`` that pending-ack
    ledger names keep): ``topic`` is the topic's full name
    (``persistent://t/n/x``) and ``partition`` the partition's
    (``persistent://t/n/x-partition-0``), so message and pending-ack metrics join.
    """
    parts = name.split("/")
    if "cursor" in parts[1:-1] or parts[0] == "compaction" or "base" in parts[1:-1]:
        return None
    if parts[0] == "txnlog" and len(parts) == 3:
        return LedgerRef(url, name, TXNLOG, (("cluster", parts[1]), ("coordinator_id", parts[2])))
    if parts[0] == "pendingack" and len(parts) >= 3:
        return LedgerRef(url, name, PENDINGACK, (*topic_labels("/".join(parts[1:-1])),
                                                 ("subscription", parts[-1])))
    if parts[0] == "topics" and len(parts) >= 2:
        return LedgerRef(url, name, PARTITION, topic_labels(name.removeprefix("topics/")))
    if parts[0] == "tbsnapshot":
        return LedgerRef(url, name, SNAPSHOT, topic_labels(name.removeprefix("tbsnapshot/")))
    return None


def topic_labels(partition: str) -> tuple[tuple[str, str], ...]:
    """``topic`` and ``partition`` labels of a partition named with or without ``persistent://``."""
    full = partition if partition.startswith(_scheme) else _scheme + partition
    return (("topic", full.rsplit(PARTITION_SUFFIX, 1)[0]), ("partition", full))


def file_root(url: str) -> str:
    parts = urlsplit(url)
    return (parts.netloc + parts.path) or "."


def find_ledgers(url: str, pattern: str = "*", names: list[str] | None = None,
                 kinds: frozenset[str] | None = None) -> list[LedgerRef]:
    """The data ledgers of a store whose names match ``pattern`` (Kafka: among ``names``)."""
    if names is None:
        if not url.startswith("file:"):
            raise ValueError("a kafka:// store cannot be listed: give the ledger names (--names)")
        root = file_root(url)
        names = [n for d in sorted(os.listdir(root)) if (n := segment.ledger_name_of(d)) is not None
                 and not d.startswith(".")] if os.path.isdir(root) else []
    refs = [ref for n in names if fnmatch.fnmatchcase(n, pattern) and (ref := classify(url, n))]
    return [r for r in refs if kinds is None or r.kind in kinds]


class NoLedgersError(ValueError):
    """The input holds no ledger the job reads: a job that read nothing must not report success."""


def require_ledgers(url: str, pattern: str = "*", names: list[str] | None = None,
                    kinds: frozenset[str] | None = None) -> list[LedgerRef]:
    """:func:`find_ledgers`, or NoLedgersError saying where the job looked when there are none."""
    refs = find_ledgers(url, pattern, names, kinds)
    if refs:
        return refs
    wanted = "/".join(sorted(kinds)) if kinds else "data"
    if names is not None:
        raise NoLedgersError(f"none of the {len(names)} ledger names given (--names) is a {wanted} ledger"
                             f" matching --pattern {pattern!r}")
    root = file_root(url)
    if (others := find_ledgers(url)):
        raise NoLedgersError(f"none of the {len(others)} ledgers under {os.path.abspath(root)} is a {wanted}"
                             f" ledger matching --pattern {pattern!r}")
    raise NoLedgersError(where.explain_empty(root, lambda nested: f"--ledgers file://{nested}"))


def plan(ref: LedgerRef, *, split_bytes: int, split_entries: int) -> tuple[int, FenceState, list[Split]]:
    """``(logical start, fence state there, splits)`` of one ledger."""
    if ref.url.startswith("file:"):
        return _plan_file(ref, split_bytes)
    return asyncio.run(_plan_kafka(ref, split_entries))


def _plan_file(ref: LedgerRef, split_bytes: int) -> tuple[int, FenceState, list[Split]]:
    directory = os.path.join(file_root(ref.url), segment.ledger_dir_name(ref.name))
    start, state = 0, FenceState()
    try:
        with open(os.path.join(directory, "TRIM"), "rb") as f:
            start, raw_state = segment.decode_trim_state(f.read())
        state = FenceState.decode(raw_state)
    except FileNotFoundError:
        pass
    bases = sorted(b for n in os.listdir(directory) if (b := segment.parse_segment_name(n)) is not None)
    splits: list[Split] = []
    for base in bases:
        path = os.path.join(directory, segment.segment_name(base))
        st = os.stat(path)
        lo = 0
        while lo < st.st_size or (lo == 0 and not st.st_size):
            hi = min(st.st_size, lo + split_bytes)
            splits.append(Split(ref, len(splits), lo, hi, path, base, int(st.st_mtime * 1000)))
            if hi <= lo:
                break
            lo = hi
    return start, state, splits


async def _plan_kafka(ref: LedgerRef, split_entries: int) -> tuple[int, FenceState, list[Split]]:
    ledgers = open_ledger_factory(ref.url)
    try:
        raw = ledgers.raw_log(ref.name)  # type: ignore[attr-defined]
        try:
            start, state = await raw.trim_state()
            end = await raw.end_offset()
        finally:
            await raw.close()
    finally:
        await ledgers.close()
    splits = [Split(ref, i, lo, min(end, lo + split_entries))
              for i, lo in enumerate(range(start, end, split_entries))]
    return start, state, splits


def read_cursor(ref: LedgerRef) -> CursorState | None:
    """The last persisted state of the ledger owner's cursor (read-only: no fence)."""
    name = _cursor_of.get(ref.kind)
    if name is None:
        return None
    return asyncio.run(_read_cursor(ref.url, cursor_ledger_name(ref.name, name)))


async def _read_cursor(url: str, name: str) -> CursorState | None:
    ledgers = open_ledger_factory(url)
    try:
        ledger = await ledgers.open(name, writer=False)
        last = ledger.last_position()
        if last is None:
            return None
        (entry,) = await ledger.read(last, 1)
        return CursorState.decode(entry.data)
    finally:
        await ledgers.close()
