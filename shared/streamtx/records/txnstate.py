"""The transaction state machine: states, legal transitions, end decisions.

::

    OPEN ──commit──▶ COMMITTING ──▶ COMMITTED
      │
      └──abort / timeout / conflict──▶ ABORTING ──▶ ABORTED
                                          └──(reason timeout)──▶ TIMEOUT

``COMMITTING`` and ``ABORTING`` are logged before the end fan-out starts, so
the decision survives a crash; the final state is logged once every
participant has ended the transaction. ``TIMEOUT`` is an abort the coordinator
made because the transaction outlived its timeout.

This module is pure: no I/O.
"""

from __future__ import annotations

from enum import Enum, IntEnum

from streamtx.contracts.states import Action, TxnState, ending_states, final_states

__all__ = ["Action", "Decision", "EndReason", "TxnState", "ending_states", "final_states",
           "is_transition_valid", "latency_buckets"]


class EndReason(IntEnum):
    """Why a transaction ends; logged with the COMMITTING/ABORTING record."""

    CLIENT = 0  # the client asked
    TIMEOUT = 1  # it outlived its timeout
    CONFLICT = 2  # a subscription refused the commit (overlapping commit)


class Decision(Enum):
    """What the coordinator does with an end request, given the current state."""

    START = "start"  # log COMMITTING/ABORTING and run the fan-out
    WAIT = "wait"  # the same end is in progress: wait for it
    DONE = "done"  # the same end already finished: answer at once (idempotent repeat)
    CONFLICT = "conflict"  # the other end is in progress or done: 409


# Pulsar's execution-latency buckets, in seconds (10 ms .. 5 min and beyond), of
# txn_duration_seconds: the coordinator's live histogram and the
# histograms job's offline one (so the two can be compared and joined).
latency_buckets = (0.01, 0.02, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 1500.0, 3000.0)

_transitions: dict[TxnState, frozenset[TxnState]] = {
    TxnState.OPEN: frozenset({TxnState.COMMITTING, TxnState.ABORTING}),
    TxnState.COMMITTING: frozenset({TxnState.COMMITTED}),
    TxnState.ABORTING: frozenset({TxnState.ABORTED, TxnState.TIMEOUT}),
    TxnState.COMMITTED: frozenset(),
    TxnState.ABORTED: frozenset(),
    TxnState.TIMEOUT: frozenset(),
}


def is_transition_valid(current: TxnState, new: TxnState) -> bool:
    """Whether ``current`` may move to ``new`` (a repeat of the same state is not a move)."""
    return new in _transitions[current]


def ending_state(action: Action) -> TxnState:
    """The state logged when an end starts."""
    return TxnState.COMMITTING if action is Action.COMMIT else TxnState.ABORTING


def final_state(ending: TxnState, reason: EndReason) -> TxnState:
    """The state logged once the fan-out of ``ending`` finished."""
    if ending is TxnState.COMMITTING:
        return TxnState.COMMITTED
    if ending is TxnState.ABORTING:
        return TxnState.TIMEOUT if reason is EndReason.TIMEOUT else TxnState.ABORTED
    raise ValueError(f"{ending.name} is not an ending state")


def decide_end(current: TxnState, action: Action) -> Decision:
    """How to answer ``action`` on a transaction in ``current``: repeats are idempotent."""
    if current is TxnState.OPEN:
        return Decision.START
    committing = action is Action.COMMIT
    if current is TxnState.COMMITTING:
        return Decision.WAIT if committing else Decision.CONFLICT
    if current is TxnState.COMMITTED:
        return Decision.DONE if committing else Decision.CONFLICT
    if current is TxnState.ABORTING:
        return Decision.CONFLICT if committing else Decision.WAIT
    # ABORTED or TIMEOUT: the transaction is aborted either way.
    return Decision.CONFLICT if committing else Decision.DONE
