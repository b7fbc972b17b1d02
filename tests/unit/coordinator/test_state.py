"""The state machine, exhaustively: every (state, state) pair and every end request."""

from __future__ import annotations

import itertools

import pytest

from streamtx.records.txnstate import (
    Action,
    Decision,
    EndReason,
    TxnState,
    decide_end,
    ending_state,
    final_state,
    is_transition_valid,
)

S = TxnState
valid = {
    (S.OPEN, S.COMMITTING), (S.COMMITTING, S.COMMITTED),
    (S.OPEN, S.ABORTING), (S.ABORTING, S.ABORTED), (S.ABORTING, S.TIMEOUT),
}


@pytest.mark.parametrize(("a", "b"), list(itertools.product(TxnState, TxnState)))
def test_every_transition(a: TxnState, b: TxnState) -> None:
    assert is_transition_valid(a, b) == ((a, b) in valid)


def test_final_states_have_no_way_out() -> None:
    for s in TxnState:
        assert s.is_final == (not any(is_transition_valid(s, t) for t in TxnState))
    assert {s for s in TxnState if s.is_ending} == {S.COMMITTING, S.ABORTING}


expected = {
    (S.OPEN, Action.COMMIT): Decision.START,
    (S.OPEN, Action.ABORT): Decision.START,
    (S.COMMITTING, Action.COMMIT): Decision.WAIT,
    (S.COMMITTING, Action.ABORT): Decision.CONFLICT,
    (S.COMMITTED, Action.COMMIT): Decision.DONE,
    (S.COMMITTED, Action.ABORT): Decision.CONFLICT,
    (S.ABORTING, Action.COMMIT): Decision.CONFLICT,
    (S.ABORTING, Action.ABORT): Decision.WAIT,
    (S.ABORTED, Action.COMMIT): Decision.CONFLICT,
    (S.ABORTED, Action.ABORT): Decision.DONE,
    (S.TIMEOUT, Action.COMMIT): Decision.CONFLICT,
    (S.TIMEOUT, Action.ABORT): Decision.DONE,
}


@pytest.mark.parametrize(("state", "action"), list(itertools.product(TxnState, Action)))
def test_every_end_decision(state: TxnState, action: Action) -> None:
    assert decide_end(state, action) is expected[(state, action)]


@pytest.mark.parametrize("action", list(Action))
@pytest.mark.parametrize("reason", list(EndReason))
def test_an_end_walks_two_valid_transitions(action: Action, reason: EndReason) -> None:
    ending = ending_state(action)
    final = final_state(ending, reason)
    assert is_transition_valid(S.OPEN, ending)
    assert is_transition_valid(ending, final)
    assert final.is_final
    if action is Action.COMMIT:
        assert final is S.COMMITTED
    else:
        assert final is (S.TIMEOUT if reason is EndReason.TIMEOUT else S.ABORTED)


@pytest.mark.parametrize("state", [S.OPEN, S.COMMITTED, S.ABORTED, S.TIMEOUT])
def test_final_state_needs_an_ending_state(state: TxnState) -> None:
    with pytest.raises(ValueError, match="not an ending state"):
        final_state(state, EndReason.CLIENT)
