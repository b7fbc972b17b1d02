"""What ``streamtx-admin ledger repair`` writes over a damaged entry, judged by the fencing rule. Pure.

A damaged entry whose length field survived can be overwritten in place, so
every later entry keeps its id. What to write depends on what the entry was,
because a fence changes how every later frame is read (:mod:`.frames`):

* a later writer's **fence**: with a filler in its place, readers keep
  following the old writer and drop every entry the new writer appended. A
  writer appends its fence before any data and checks it is the current
  writer, so data frames of a writer that no surviving fence admits
  ("orphans") prove their fence was the damaged entry: it is written again
  (that writer, the epoch its frames carry);
* the fence of a writer that appended nothing: no orphan, but the next fence's
  epoch (one above the highest epoch its writer read) names an epoch no
  surviving frame carries; the damaged entry carried it, and only a fence can
  (a data frame's writer would show its frames). A fence of an unused writer id
  is written, so the old writer's frames after it stay dropped as they were
  when they were refused;
* anything else (a data frame, a duplicate, a filler): a **filler**, which
  changes nothing for the frames after it. Its own data is lost.

A filler is written over an entry of a fence's size only where it cannot
matter: when no frame after it (up to the next fence) would be live behind a
filler. Otherwise the loss hides which writer was current. If it was the fence
of a writer that appended nothing and no later fence names its epoch, the
current writer's frames after it were refused to that writer (its client got
409: fenced) and a filler would make them messages; if it was an empty entry of
the current writer's, a fence would drop acknowledged ones. Epochs cannot tell
the two apart (a zombie's frames carry the epoch it had before the fence, and a
fence's epoch shows only in the next fence of a writer that read it), nor can
sequence numbers (an append that failed for good leaves a gap), so the damage
is refused with that reason (issue 32, defect 11).

When the frames after it cannot be explained by one lost entry (orphans of
several writers, or orphans after an entry too long to be a fence) the damage
is refused with the reason: no guess that could hide acknowledged entries.
A damaged entry too long to be a fence changes no writer, so the frames after
it count as evidence for an earlier damaged entry; a fence-sized one ends it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from streamtx.errors import CorruptEntryError
from streamtx.ledger import frames
from streamtx.ledger.frames import FenceState, FenceTracker, Frame, FrameKind

_unused_writer = (1 << 64) - 1  # a writer id no writer draws (they draw 1 .. 2**63)


@dataclass(frozen=True, slots=True)
class Slot:
    """One entry of the log in order: its head (the first bytes of its frame), or the damaged length."""

    entry_id: int
    head: bytes | None  # None: damaged (one entry whose length survived)
    length: int = 0  # the damaged entry's length


@dataclass(frozen=True, slots=True)
class Fix:
    """What to write over one damaged entry, or why nothing may be."""

    entry_id: int
    frame: bytes | None  # None: refused
    why: str

    @property
    def refused(self) -> bool:
        return self.frame is None


def plan(slots: Sequence[Slot], *, start: int = 0, state: FenceState | None = None) -> list[Fix]:
    """A :class:`Fix` per damaged slot, in log order.

    ``start`` and ``state`` are the ledger's trim state: entries below ``start``
    are never read, so their damage takes a filler whatever they were.
    """
    tracker = FenceTracker(FenceState.decode((state or FenceState()).encode()))
    known = _Known(tracker.state, trimmed=start > 0)
    fixes: list[Fix] = []
    for i, slot in enumerate(slots):
        if slot.head is not None:
            if slot.entry_id >= start:
                known.feed(tracker, _decode(slot.head))
            continue
        if slot.entry_id < start:
            fixes.append(Fix(slot.entry_id, frames.encode_filler(slot.length), "below the trim: never read"))
            continue
        fix = _fix(slot, _after(slots, i + 1), tracker.snapshot(), known)
        fixes.append(fix)
        # What follows a refusal is judged as the filler would leave it; the refusal stands anyway.
        known.feed(tracker, frames.decode(fix.frame) if fix.frame else _filler)
    return fixes


class _Known:
    """The writers whose fence was seen: their frames after another's fence are zombies, not orphans."""

    def __init__(self, state: FenceState, *, trimmed: bool) -> None:
        self.fenced = {state.writer_id} if state.writer_id is not None else set()
        # Fences below a trim are gone: a writer of an epoch not above the trim's may have had one.
        self.trimmed_epoch = state.max_epoch if trimmed else -1

    def feed(self, tracker: FenceTracker, frame: Frame) -> None:
        if frame.kind is FrameKind.FENCE:
            self.fenced.add(frame.writer_id)
        tracker.accept(frame)

    def orphan(self, frame: Frame) -> bool:
        return frame.writer_id not in self.fenced and frame.epoch > self.trimmed_epoch


def _after(slots: Sequence[Slot], i: int) -> list[Frame]:
    """The frames from ``i`` up to the next damaged slot that may have been a fence.

    A damaged slot too long to be a fence was a data frame (or a filler): whatever it was, the
    fencing rule reads the frames after it the same, and it is read as the filler it gets.
    """
    out = []
    for slot in slots[i:]:
        if slot.head is None:
            if slot.length == frames.HEADER_SIZE:
                break
            out.append(_filler)
            continue
        out.append(_decode(slot.head))
    return out


def _fix(slot: Slot, after: list[Frame], state: FenceState, known: _Known) -> Fix:
    size, is_fence_size = slot.length, slot.length == frames.HEADER_SIZE
    orphans = _orphans(after, state, known)
    if orphans:
        writers = sorted({f.writer_id for f in orphans})
        if len(writers) == 1 and is_fence_size:
            first = orphans[0]
            return Fix(slot.entry_id, frames.encode_fence(first.writer_id, first.epoch),
                       f"it was writer {first.writer_id:x}'s fence (epoch {first.epoch}): "
                       f"its {len(orphans)} entries after it are admitted by no other; rewritten")
        what = (f"{len(writers)} writers" if len(writers) > 1 else f"writer {writers[0]:x}")
        return Fix(slot.entry_id, None,
                   f"{len(orphans)} entries after it, of {what}, are admitted by no surviving fence, and "
                   f"one lost entry of {size} bytes cannot be their fence"
                   + ("s" if len(writers) > 1 else "")
                   + ": a filler would hide them for good; restore the file from a copy or cut by hand")
    missing = _missing_epoch(after, state)
    if missing is not None and is_fence_size:
        return Fix(slot.entry_id, frames.encode_fence(_unused_writer, missing),
                   f"it was the fence of a writer that appended nothing (epoch {missing}, named by the "
                   "next fence); rewritten, so the entries it fenced stay dropped")
    live = _live_behind_filler(after, state) if is_fence_size else []
    if live:
        writers = ", ".join(f"{w:x}" for w in sorted({f.writer_id for f in live}))
        return Fix(slot.entry_id, None,
                   f"the lost entry has a fence's size and may have been the fence of a writer that "
                   f"appended nothing: then the {len(live)} entries of writer {writers} after it were "
                   "refused to their writer (fenced) and a filler would make them messages; if it was "
                   "an empty entry, a fence would drop them. No surviving epoch tells which (no later "
                   "fence names a lost epoch): restore the file from a copy or cut by hand")
    return Fix(slot.entry_id, frames.encode_filler(size), "replaced with a filler: its data is lost, "
               "every later entry keeps its id and is read as before")


def _orphans(after: list[Frame], state: FenceState, known: _Known) -> list[Frame]:
    """Data frames that a filler in the damaged place would leave to a writer no fence admits."""
    current = state.writer_id
    out = []
    for frame in after:
        if frame.kind is FrameKind.FENCE:
            break
        # A zombie (a fenced writer) had a fence before; an orphan never had one. With no fence
        # before the damage (none at all, not one below a trim) every writer's frames are orphans:
        # each writer fences before its first append, so the lost entry was that fence.
        if frame.kind is FrameKind.DATA and frame.writer_id != current and known.orphan(frame):
            out.append(frame)
    return out


def _live_behind_filler(after: list[Frame], state: FenceState) -> list[Frame]:
    """The data frames up to the next fence that the fencing rule reads as live behind a filler."""
    tracker = FenceTracker(FenceState(state.writer_id, state.epoch, state.max_epoch, dict(state.last_seq)))
    out = []
    for frame in after:
        if frame.kind is FrameKind.FENCE:
            break
        if tracker.accept(frame):
            out.append(frame)
    return out


def _missing_epoch(after: list[Frame], state: FenceState) -> int | None:
    """The epoch the next fence proves a lost frame carried, if it does."""
    seen = state.max_epoch
    for frame in after:
        if frame.kind is FrameKind.FENCE:
            # Its writer's epoch is one above the highest it read, all before its fence.
            return frame.epoch - 1 if frame.epoch - 1 > seen else None
        seen = max(seen, frame.epoch)
    return None


_filler = Frame(FrameKind.FILLER, 0, 0, 0)


def _decode(head: bytes) -> Frame:
    try:
        return frames.decode(head)
    except CorruptEntryError:  # checksummed yet not a frame: judge it like a filler
        return _filler
