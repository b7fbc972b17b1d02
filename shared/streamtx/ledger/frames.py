"""Frames: how a ledger entry is stored in a backend, and the fencing rule.

Every physical record a backend stores is one frame. Layout (big-endian)::

    offset  size  field
    0       1     kind       1 = data, 2 = fence, 3 = filler
    1       8     writer_id  random id of the writer that appended it
    9       4     epoch      the writer's epoch (max epoch seen at open + 1)
    13      8     seq        per-writer sequence of data frames, from 0; 0 for a fence
    21      n     payload    the caller's bytes (data frames only)

The fencing rule (:class:`FenceTracker`): the last fence in log order names the
one current writer; a data frame from any other writer that lands after it is
dropped (a zombie), and a data frame whose ``seq`` is not above the last one
accepted from its writer is dropped (a duplicate left by a retried append).
Entries that are dropped, and fences, still occupy an entry id. A filler frame
(written by ``streamtx-admin ledger repair`` over an entry that failed its
checksum, so later entries keep their ids) is never live; its payload is zeros.

This module is pure: no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum

from streamtx.errors import CorruptEntryError

_HEADER = struct.Struct(">BQIQ")
HEADER_SIZE = _HEADER.size  # 21 bytes


class FrameKind(IntEnum):
    DATA = 1
    FENCE = 2
    FILLER = 3


@dataclass(frozen=True, slots=True)
class Frame:
    """A decoded frame."""

    kind: FrameKind
    writer_id: int
    epoch: int
    seq: int
    payload: bytes = b""


def encode_data(writer_id: int, epoch: int, seq: int, payload: bytes) -> bytes:
    return _HEADER.pack(FrameKind.DATA, writer_id, epoch, seq) + payload


def encode_fence(writer_id: int, epoch: int) -> bytes:
    return _HEADER.pack(FrameKind.FENCE, writer_id, epoch, 0)


def encode_filler(size: int) -> bytes:
    """A filler frame of exactly ``size`` bytes (at least the header's)."""
    if size < HEADER_SIZE:
        raise ValueError(f"a filler frame needs at least {HEADER_SIZE} bytes, not {size}")
    return _HEADER.pack(FrameKind.FILLER, 0, 0, 0) + bytes(size - HEADER_SIZE)


def decode(raw: bytes) -> Frame:
    if len(raw) < HEADER_SIZE:
        raise CorruptEntryError(f"frame of {len(raw)} bytes is shorter than its header")
    kind, writer_id, epoch, seq = _HEADER.unpack_from(raw)
    if kind not in (FrameKind.DATA, FrameKind.FENCE, FrameKind.FILLER):
        raise CorruptEntryError(f"unknown frame kind {kind}")
    return Frame(FrameKind(kind), writer_id, epoch, seq, raw[HEADER_SIZE:])


def seq_of(raw: bytes) -> int:
    """The ``seq`` of an encoded frame, without copying its payload."""
    return int(_HEADER.unpack_from(raw)[3])


@dataclass(slots=True)
class FenceState:
    """What the tracker must know at a log offset to judge the frames after it.

    Persisted with a trim so that dropping the fence itself cannot let a zombie's
    frames back in.
    """

    writer_id: int | None = None
    epoch: int = 0
    max_epoch: int = 0
    last_seq: dict[int, int] = field(default_factory=dict)

    _CODEC = struct.Struct(">QIIQ")

    def encode(self) -> bytes:
        """``writer_id`` (0 = none), epoch, max_epoch, then the current writer's last seq."""
        writer = self.writer_id or 0
        last = self.last_seq.get(writer, -1) if self.writer_id is not None else -1
        return self._CODEC.pack(writer, self.epoch, self.max_epoch, last + 1)

    @classmethod
    def decode(cls, raw: bytes) -> FenceState:
        writer, epoch, max_epoch, last_plus_one = cls._CODEC.unpack(raw)
        if writer == 0:
            return cls(None, epoch, max_epoch, {})
        last = {writer: last_plus_one - 1} if last_plus_one else {}
        return cls(writer, epoch, max_epoch, last)


class FenceTracker:
    """Applies the fencing and duplicate rules to frames fed in log order."""

    def __init__(self, state: FenceState | None = None) -> None:
        self.state = state or FenceState()

    def accept(self, frame: Frame) -> bool:
        """Feed the next frame; True when it is a live data entry."""
        st = self.state
        if frame.kind is FrameKind.FILLER:
            return False
        st.max_epoch = max(st.max_epoch, frame.epoch)
        if frame.kind is FrameKind.FENCE:
            st.writer_id, st.epoch = frame.writer_id, frame.epoch
            st.last_seq = {frame.writer_id: -1}
            return False
        if st.writer_id is not None and frame.writer_id != st.writer_id:
            return False
        if frame.seq <= st.last_seq.get(frame.writer_id, -1):
            return False
        st.last_seq[frame.writer_id] = frame.seq
        return True

    def snapshot(self) -> FenceState:
        st = self.state
        return FenceState(st.writer_id, st.epoch, st.max_epoch, dict(st.last_seq))
