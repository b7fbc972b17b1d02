"""Topic names: ``persistent://tenant/namespace/topic`` and their REST paths. Pure."""

from __future__ import annotations

import zlib

from streamtx import names
from streamtx.errors import MalformedError

_scheme = "persistent://"


def full_name(topic: str) -> str:
    """``persistent://t/n/x`` for ``persistent://t/n/x`` or ``t/n/x``."""
    path = topic.removeprefix(_scheme)
    parts = path.split("/")
    if len(parts) != 3 or not all(parts):
        raise MalformedError(f"topic {topic!r} is not persistent://tenant/namespace/topic")
    return _scheme + path


def path_of(topic: str) -> str:
    """``t/n/x``: the topic as it appears in REST paths."""
    return full_name(topic).removeprefix(_scheme)


def partition_name(topic: str, index: int) -> str:
    """The name of partition ``index`` of a partitioned topic."""
    return names.partition_name(full_name(topic), index)


def key_partition(key: str, partitions: int) -> int:
    """Keyed routing as the broker does it: CRC32 of the key's UTF-8 bytes mod N."""
    return zlib.crc32(key.encode()) % partitions
