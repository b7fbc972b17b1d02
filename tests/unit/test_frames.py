"""The frame codec and the fencing rule, without any backend."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamtx.errors import CorruptEntryError
from streamtx.ledger import frames
from streamtx.ledger.frames import FenceState, FenceTracker

u63 = st.integers(min_value=1, max_value=2**63 - 1)
u32 = st.integers(min_value=0, max_value=2**32 - 1)


@given(u63, u32, st.integers(min_value=0, max_value=2**64 - 1), st.binary())
def test_data_frame_round_trip(writer: int, epoch: int, seq: int, payload: bytes) -> None:
    frame = frames.decode(frames.encode_data(writer, epoch, seq, payload))
    assert (frame.kind, frame.writer_id, frame.epoch, frame.seq, frame.payload) == (
        frames.FrameKind.DATA, writer, epoch, seq, payload)


def test_short_or_unknown_frames_are_corrupt() -> None:
    with pytest.raises(CorruptEntryError):
        frames.decode(b"\x01\x00")
    with pytest.raises(CorruptEntryError):
        frames.decode(b"\x09" + bytes(20))


def test_zombie_frames_after_a_fence_are_dropped() -> None:
    t = FenceTracker()
    assert not t.accept(frames.decode(frames.encode_fence(1, 1)))
    assert t.accept(frames.decode(frames.encode_data(1, 1, 0, b"a")))
    assert not t.accept(frames.decode(frames.encode_fence(2, 2)))
    assert not t.accept(frames.decode(frames.encode_data(1, 1, 1, b"zombie")))
    assert t.accept(frames.decode(frames.encode_data(2, 2, 0, b"b")))


def test_retried_duplicates_are_dropped() -> None:
    t = FenceTracker()
    t.accept(frames.decode(frames.encode_fence(7, 1)))
    verdicts = [t.accept(frames.decode(frames.encode_data(7, 1, s, b""))) for s in (0, 1, 1, 0, 2)]
    assert verdicts == [True, True, False, False, True]


@given(st.one_of(st.none(), u63), u32, u32, st.integers(min_value=-1, max_value=2**40))
def test_fence_state_round_trip(writer: int | None, epoch: int, max_epoch: int, last: int) -> None:
    state = FenceState(writer, epoch, max_epoch, {writer: last} if writer and last >= 0 else {})
    again = FenceState.decode(state.encode())
    assert (again.writer_id, again.epoch, again.max_epoch, again.last_seq) == (
        state.writer_id, state.epoch, state.max_epoch, state.last_seq)


def test_a_filler_is_never_live_and_keeps_its_size() -> None:
    t = FenceTracker()
    assert not t.accept(frames.decode(frames.encode_fence(7, 1)))
    filler = frames.encode_filler(50)
    assert len(filler) == 50 and frames.decode(filler).kind is frames.FrameKind.FILLER
    assert not t.accept(frames.decode(filler))
    assert t.accept(frames.decode(frames.encode_data(7, 1, 0, b"a")))  # the writer goes on
    with pytest.raises(ValueError):
        frames.encode_filler(frames.HEADER_SIZE - 1)
