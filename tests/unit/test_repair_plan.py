"""What repair writes over a damaged entry, by the fencing rule (issue 22 item 1): pure cases."""

from __future__ import annotations

from streamtx.ledger import frames
from streamtx.ledger.frames import FenceState, FenceTracker, FrameKind
from streamtx.ledger.repairplan import Slot, plan

A, B, C = 11, 22, 33


def _slots(raw: list[bytes], damaged: int) -> list[Slot]:
    return [Slot(i, None, len(r)) if i == damaged else Slot(i, r) for i, r in enumerate(raw)]


def _live(raw: list[bytes]) -> list[int]:
    tracker = FenceTracker()
    return [i for i, r in enumerate(raw) if tracker.accept(frames.decode(r))]


def _repaired(raw: list[bytes], damaged: int, **kw: object) -> list[bytes]:
    (fix,) = plan(_slots(raw, damaged), **kw)  # type: ignore[arg-type]
    assert fix.frame is not None, fix.why
    return [fix.frame if i == damaged else r for i, r in enumerate(raw)]


def test_a_later_writers_fence_is_rebuilt_from_its_entries() -> None:
    raw = [frames.encode_fence(A, 1), frames.encode_data(A, 1, 0, b"a0"),
           frames.encode_fence(B, 2), frames.encode_data(B, 2, 0, b"b0"), frames.encode_data(B, 2, 1, b"b1")]
    fixed = _repaired(raw, 2)
    assert frames.decode(fixed[2]) == frames.decode(raw[2])
    assert _live(fixed) == _live(raw) == [1, 3, 4]


def test_an_equal_epoch_racing_writers_fence_is_rebuilt_too() -> None:
    # B read the log before A's fence landed: both carry epoch 1; B's fence came last.
    raw = [frames.encode_fence(A, 1), frames.encode_fence(B, 1), frames.encode_data(A, 1, 0, b"zombie"),
           frames.encode_data(B, 1, 0, b"b0")]
    assert _live(_repaired(raw, 1)) == _live(raw) == [3]


def test_an_idle_writers_fence_is_proved_by_the_next_fences_epoch() -> None:
    raw = [frames.encode_fence(A, 1), frames.encode_data(A, 1, 0, b"a0"), frames.encode_fence(B, 2),
           frames.encode_data(A, 1, 1, b"refused"), frames.encode_fence(C, 3),
           frames.encode_data(C, 3, 0, b"c0")]
    fixed = _repaired(raw, 2)
    assert frames.decode(fixed[2]).kind is FrameKind.FENCE
    assert _live(fixed) == _live(raw) == [1, 5]


def test_a_data_entry_becomes_a_filler_and_nothing_else_changes() -> None:
    raw = [frames.encode_fence(A, 1), frames.encode_data(A, 1, 0, b"a0"), frames.encode_data(A, 1, 1, b"a1"),
           frames.encode_fence(B, 2), frames.encode_data(B, 2, 0, b"b0")]
    fixed = _repaired(raw, 1)
    assert frames.decode(fixed[1]).kind is FrameKind.FILLER and len(fixed[1]) == len(raw[1])
    assert _live(fixed) == [2, 4]


def test_entries_no_lost_entry_can_explain_are_refused() -> None:
    long_entry = frames.encode_data(A, 1, 1, b"x" * 40)  # too long to have been a fence
    raw = [frames.encode_fence(A, 1), frames.encode_data(A, 1, 0, b"a0"), long_entry,
           frames.encode_data(B, 2, 0, b"b0")]
    (fix,) = plan(_slots(raw, 2))
    assert fix.refused and "admitted by no surviving fence" in fix.why
    two = [frames.encode_fence(A, 1), frames.encode_fence(B, 2), frames.encode_data(B, 2, 0, b"b0"),
           frames.encode_data(C, 3, 0, b"c0")]
    (fix,) = plan(_slots(two, 1))
    assert fix.refused and "2 writers" in fix.why


def test_below_the_trim_a_filler_and_after_it_the_trim_state_counts() -> None:
    raw = [frames.encode_fence(A, 1), frames.encode_data(A, 1, 0, b"a0"), frames.encode_data(A, 1, 1, b"a1"),
           frames.encode_data(A, 1, 2, b"a2")]
    (fix,) = plan(_slots(raw, 1), start=2, state=FenceState(A, 1, 1, {A: 0}))
    assert frames.decode(fix.frame or b"").kind is FrameKind.FILLER
    # A writer fenced below the trim (its fence gone with it) is a zombie, not an orphan.
    trimmed = [frames.encode_fence(C, 3), frames.encode_data(C, 3, 0, b"c0"),
               frames.encode_data(C, 3, 1, b"c1"), frames.encode_data(B, 2, 5, b"zombie")]
    (fix,) = plan(_slots(trimmed, 2), start=1, state=FenceState(C, 3, 3, {C: 0}))
    assert frames.decode(fix.frame or b"").kind is FrameKind.FILLER
