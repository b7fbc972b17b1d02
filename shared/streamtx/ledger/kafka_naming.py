"""Kafka topic names for ledgers (the scheme is described in :mod:`.kafka`)."""

from __future__ import annotations

import hashlib
import re

from streamtx.errors import MalformedError

TOPIC_MAX = 249  # Kafka's limit on a topic name
TRIM_SUFFIX = ".trim"
_HASH_CHARS = 12
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_PREFIX_OK = re.compile(r"[A-Za-z0-9._-]*")


def topic_for(prefix: str, name: str) -> str:
    """The ledger topic of ``name`` (see :mod:`.kafka`'s docstring for the scheme)."""
    budget = TOPIC_MAX - len(TRIM_SUFFIX) - len(prefix)
    safe = _UNSAFE.sub("_", name)
    if safe != name or not safe or len(safe) > budget:
        digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH_CHARS]
        safe = f"{safe[: budget - _HASH_CHARS - 1]}-{digest}"
    return prefix + safe


def check_topic_prefix(prefix: str) -> None:
    """Raise MalformedError unless ``prefix`` leaves room for a name, a hash and the sidecar suffix."""
    if not _PREFIX_OK.fullmatch(prefix):
        raise MalformedError(f"kafka topic prefix {prefix!r} is not [A-Za-z0-9._-]*")
    if len(prefix) > TOPIC_MAX - len(TRIM_SUFFIX) - _HASH_CHARS - 2:
        raise MalformedError(f"kafka topic prefix {prefix!r} is too long")
