"""The Kafka backend's trim record, one per trim in a ledger's ``.trim`` sidecar topic.

Layout (big-endian)::

    version   u8    1
    start     u64   the logical start: offsets below it are trimmed
    state     ...   the FenceState at the trim (FenceState.encode)
"""

from __future__ import annotations

import struct

from streamtx.errors import CorruptEntryError
from streamtx.ledger.frames import FenceState

_TRIM_RECORD = struct.Struct(">BQ")
_TRIM_VERSION = 1


def encode_trim(before: int, state: FenceState) -> bytes:
    return _TRIM_RECORD.pack(_TRIM_VERSION, before) + state.encode()


def decode_trim(raw: bytes, where: str) -> tuple[int, FenceState]:
    """The logical start and state of a trim record; ``where`` names it in errors."""
    if len(raw) < _TRIM_RECORD.size:
        raise CorruptEntryError(f"{where}: short trim record")
    version, start = _TRIM_RECORD.unpack_from(raw)
    if version != _TRIM_VERSION:
        raise CorruptEntryError(f"{where}: trim record version {version}")
    try:
        state = FenceState.decode(raw[_TRIM_RECORD.size :])
    except struct.error as exc:
        raise CorruptEntryError(f"{where}: {exc}") from exc
    return int(start), state
