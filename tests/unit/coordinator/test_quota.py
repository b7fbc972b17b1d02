"""The open-transaction quota's bookkeeping (pure)."""

from __future__ import annotations

import pytest

from streamtx.contracts.txnid import TxnId
from streamtx.coordinator.quota import OpenTxnQuota, check_participants
from streamtx.errors import ConflictError, TooManyRequestsError


def test_reserve_bind_release_and_adopt() -> None:
    quota = OpenTxnQuota(limit=2)
    a, b, c = (TxnId.of(0, i) for i in range(3))
    quota.reserve("x")
    quota.bind(a, "x")
    quota.reserve("x")
    quota.cancel("x")  # its creation failed
    quota.reserve("x")
    quota.bind(b, "x")
    with pytest.raises(TooManyRequestsError):
        quota.reserve("x")
    quota.reserve("y")  # another client
    quota.release(a)
    quota.release(a)  # a second release (a repeated end) changes nothing
    assert quota.open_count("x") == 1
    quota.adopt(c, "x")  # found open at start: counted even past the limit
    quota.adopt(c, "x")
    assert quota.open_count("x") == 2


def test_participants_count_only_new_ones() -> None:
    txn = TxnId.of(0, 1)
    check_participants("partitions", txn, {"a": True, "b": True}, ("a", "b"), 2)
    with pytest.raises(ConflictError, match="limit of 2"):
        check_participants("partitions", txn, {"a": True}, ("a", "b", "c"), 2)
