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
    "check_ledger_url",
    "ledger_id_for",
    "open_ledger_factory",
]

_TRUE = {"1", "true", "yes", "on"}


def check_ledger_url(url: str) -> tuple[str, str, dict[str, str]]:
    """``(scheme, location, options)`` of a ledger URL (location: a file store's directory, a
    Kafka bootstrap's host:port), checked without any I/O; MalformedError naming what is wrong."""
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    if parts.scheme not in ("memory", "file", "kafka"):
        raise MalformedError(f"unknown ledger URL scheme in {url!r} (file://, kafka://, memory://)")
    if parts.scheme == "kafka" and not parts.netloc:
        raise MalformedError(f"kafka ledger URL needs host:port: {url!r}")
    for key in ("segment_bytes", "io_threads", "max_open_ledgers") if parts.scheme == "file" else ():
        if key in query and not query[key].isdigit():
            raise MalformedError(f"{key} in ledger URL {url!r} must be a whole number")
    location = parts.netloc if parts.scheme == "kafka" else parts.netloc + parts.path
    return parts.scheme, location, query


def open_ledger_factory(url: str) -> LedgerFactory:
    """Create the ledger store a URL names (no I/O happens until a ledger is opened)."""
    scheme, location, query = check_ledger_url(url)
    if scheme == "memory":
        from streamtx.ledger.memory import MemoryLedgerFactory

        return MemoryLedgerFactory()
    if scheme == "file":
        from streamtx.ledger.file import FileLedgerFactory

        limit = query.get("max_open_ledgers")  # default: a quarter of RLIMIT_NOFILE (openfiles.py)
        return FileLedgerFactory(location or ".", segment_bytes=int(query.get("segment_bytes", 64 << 20)),
                                 io_threads=int(query.get("io_threads", 16)),
                                 max_open_ledgers=int(limit) if limit is not None else None)
    from streamtx.ledger.kafka import KafkaLedgerFactory

    return KafkaLedgerFactory(
        location,
        idempotence=query.get("idempotence", "true").lower() in _TRUE,
        delete_records=query.get("delete_records", "true").lower() in _TRUE,
        topic_prefix=query.get("topic_prefix", "streamtx."),
    )
