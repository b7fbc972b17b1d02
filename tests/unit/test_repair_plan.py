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


def test_a_fence_sized_loss_that_hides_which_writer_was_current_is_refused() -> None:
    """Issue 32 defect 11: B fenced A and appended nothing; A's next append landed after B's fence
    (refused: its client got 409); B's fence is damaged. No orphan and no later fence tell what
    the lost entry was: a filler would make A's refused entry a message, a fence would drop an
    entry of A's if the lost one was A's own (empty) entry. Refused, naming why."""
    raw = [frames.encode_fence(A, 1), frames.encode_data(A, 1, 0, b"a0"), frames.encode_fence(B, 2),
           frames.encode_data(A, 1, 1, b"refused")]
    assert _live(raw) == [1]
    (fix,) = plan(_slots(raw, 2))
    assert fix.refused, fix.why
    assert "may have been the fence" in fix.why and f"writer {A:x}" in fix.why
    # The same loss with the next fence naming no lost epoch (a writer that raced B to open, its
    # epoch equal to B's): still nothing tells whether A's entry before it was fenced.
    racing = [*raw, frames.encode_fence(C, 2), frames.encode_data(C, 2, 0, b"c0")]
    assert _live(racing) == [1, 5]
    (fix,) = plan(_slots(racing, 2))
    assert fix.refused, fix.why


def test_a_fence_sized_loss_with_nothing_after_it_that_could_be_live_takes_a_filler() -> None:
    # Whatever the lost entry was, no entry after it reads otherwise: a filler changes nothing.
    for after in ([], [frames.encode_fence(C, 2), frames.encode_data(C, 2, 0, b"c0")],
                  [frames.encode_data(A, 1, 0, b"a duplicate")]):
        raw = [frames.encode_fence(A, 1), frames.encode_data(A, 1, 0, b"a0"), frames.encode_fence(B, 2),
               *after]
        fixed = _repaired(raw, 2)
        assert frames.decode(fixed[2]).kind is FrameKind.FILLER
        assert _live(fixed) == _live(raw)
    # Not the size of a fence: it was a data entry, the entries after it read as before.
    raw = [frames.encode_fence(A, 1), frames.encode_data(A, 1, 0, b"a0"), frames.encode_data(A, 1, 1, b"a1"),
           frames.encode_data(A, 1, 2, b"a2")]
    assert frames.decode(_repaired(raw, 1)[1]).kind is FrameKind.FILLER


def test_the_first_fence_of_a_log_is_rebuilt_from_its_writers_entries() -> None:
    # No fence before it: the entries after it are its writer's (every writer fences first).
    raw = [frames.encode_fence(A, 1), frames.encode_data(A, 1, 0, b"a0"), frames.encode_data(A, 1, 1, b"a1")]
    fixed = _repaired(raw, 0)
    assert frames.decode(fixed[0]) == frames.decode(raw[0])
    assert _live(fixed) == _live(raw) == [1, 2]


def test_a_fence_is_proved_past_a_second_damaged_data_entry() -> None:
    # B's entries after a damaged data entry (too long to be a fence) still prove B's fence.
    raw = [frames.encode_fence(A, 1), frames.encode_data(A, 1, 0, b"a0"), frames.encode_fence(B, 2),
           frames.encode_data(B, 2, 0, b"b0" * 20), frames.encode_data(B, 2, 1, b"b1")]
    slots = [Slot(i, None, len(r)) if i in (2, 3) else Slot(i, r) for i, r in enumerate(raw)]
    fence, data = plan(slots)
    assert fence.frame == raw[2], fence.why
    assert data.frame is not None and frames.decode(data.frame).kind is FrameKind.FILLER
    # And A's refused entry after both losses is judged as well: refused, not made live.
    raw = [frames.encode_fence(A, 1), frames.encode_data(A, 1, 0, b"a0"), frames.encode_fence(B, 2),
           frames.encode_data(A, 1, 1, b"a1" * 20), frames.encode_data(A, 1, 2, b"refused")]
    slots = [Slot(i, None, len(r)) if i in (2, 3) else Slot(i, r) for i, r in enumerate(raw)]
    assert plan(slots)[0].refused
