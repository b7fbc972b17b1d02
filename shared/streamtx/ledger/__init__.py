"""The ledger layer: durable, fenced, append-only logs.

Choose a backend by URL with :func:`open_ledger_factory`:

* ``file:///var/lib/streamtx[?io_threads=16]`` (or ``file://relative/dir``) — segment files,
  the default; ``io_threads`` bounds the threads doing every ledger's file I/O;
* ``kafka://host:9092[,host2:9092][?idempotence=false&delete_records=false]`` —
  one ledger per single-partition topic;
* ``memory://`` — for tests.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from streamtx.errors import MalformedError
from streamtx.ledger.base import Entry, Ledger, LedgerFactory, Position, SegmentStats, ledger_id_for

__all__ = [
    "Entry",
    "Ledger",
    "LedgerFactory",
    "Position",
    "SegmentStats",
    "ledger_id_for",
    "open_ledger_factory",
]

_TRUE = {"1", "true", "yes", "on"}


def open_ledger_factory(url: str) -> LedgerFactory:
    """Create the ledger store a URL names (no I/O happens until a ledger is opened)."""
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    if parts.scheme == "memory":
        from streamtx.ledger.memory import MemoryLedgerFactory

        return MemoryLedgerFactory()
    if parts.scheme == "file":
        from streamtx.ledger.file import FileLedgerFactory

        path = (parts.netloc + parts.path) or "."
        limit = query.get("max_open_ledgers")  # default: a quarter of RLIMIT_NOFILE (openfiles.py)
        return FileLedgerFactory(path, segment_bytes=int(query.get("segment_bytes", 64 << 20)),
                                 io_threads=int(query.get("io_threads", 16)),
                                 max_open_ledgers=int(limit) if limit is not None else None)
    if parts.scheme == "kafka":
        from streamtx.ledger.kafka import KafkaLedgerFactory

        if not parts.netloc:
            raise MalformedError(f"kafka ledger URL needs host:port: {url!r}")
        return KafkaLedgerFactory(
            parts.netloc,
            idempotence=query.get("idempotence", "true").lower() in _TRUE,
            delete_records=query.get("delete_records", "true").lower() in _TRUE,
            topic_prefix=query.get("topic_prefix", "streamtx."),
        )
    raise MalformedError(f"unknown ledger URL scheme in {url!r} (file://, kafka://, memory://)")
