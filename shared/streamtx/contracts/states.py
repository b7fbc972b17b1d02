"""What a transaction's state and end are called on the wire.

:class:`TxnState` travels by name (``"COMMITTED"``) in the coordinator's
answers and by number in its log records; :class:`Action` is the end a
participant is told to apply (``"commit"`` / ``"abort"``). The coordinator's
state machine (which transitions are legal) is its own business, in
``streamtx.records.txnstate``.

This module is pure: no I/O.
"""

from __future__ import annotations

import enum


class TxnState(enum.IntEnum):
    """A transaction's state; the int is its code in log records, the name its form in JSON."""

    OPEN = 0
    COMMITTING = 1
    COMMITTED = 2
    ABORTING = 3
    ABORTED = 4
    TIMEOUT = 5

    @property
    def is_final(self) -> bool:
        return self in final_states

    @property
    def is_ending(self) -> bool:
        """COMMITTING or ABORTING: decided, fan-out not yet finished."""
        return self in ending_states

    @classmethod
    def parse(cls, name: object) -> TxnState | None:
        """The state named ``name`` (as JSON carries it), or None for anything else."""
        return cls.__members__.get(name) if isinstance(name, str) else None


final_states = frozenset({TxnState.COMMITTED, TxnState.ABORTED, TxnState.TIMEOUT})
ending_states = frozenset({TxnState.COMMITTING, TxnState.ABORTING})


class Action(enum.StrEnum):
    """How a transaction ends: what a client asks for and what participants apply."""

    COMMIT = "commit"
    ABORT = "abort"

    @classmethod
    def of_final_state(cls, state: TxnState | None) -> Action | None:
        """The end a participant applies for a transaction the coordinator reports in ``state``.

        COMMITTED -> commit; ABORTED and TIMEOUT -> abort; anything else (still
        open or ending, or unknown) -> None: not decided yet.
        """
        if state is TxnState.COMMITTED:
            return cls.COMMIT
        if state is TxnState.ABORTED or state is TxnState.TIMEOUT:
            return cls.ABORT
        return None
