"""Which requests a coordinator worker may forward to a sibling, and for which coordinator id."""

from __future__ import annotations

import pytest

from streamtx.contracts.txnid import TxnId
from streamtx.coordinator.forwarding import coordinator_of_path

txn = TxnId.of(5, 77)


@pytest.mark.parametrize("path", [
    f"/v1/transactions/{txn}", f"/v1/transactions/{txn}/partitions", f"/v1/transactions/{txn}/subscriptions",
    f"/v1/transactions/{txn}/commit", f"/v1/transactions/{txn}/abort",
    f"/admin/v3/transactions/transactionMetadata/{txn.most}/{txn.least}",
    "/admin/v3/transactions/coordinatorInternalStats/5",
])
def test_per_transaction_paths_name_their_coordinator(path: str) -> None:
    assert coordinator_of_path(path) == 5


@pytest.mark.parametrize("path", [
    "/v1/transactions", "/v1/transactions/", "/v1/transactions/x/commit", "/v1/transactions/1:2:3",
    f"/v1/transactions/{txn}/other", f"/v1/transactions/{txn}/commit/more",
    "/admin/v3/transactions/coordinatorStats",
    "/admin/v3/transactions/slowTransactions/5", "/admin/v3/transactions/transactionMetadata/x/1",
    "/lookup/v2/coordinator/5", "/readyz", f"/v1/topics/{txn}/commit",
])
def test_creation_process_views_and_malformed_ids_stay_local(path: str) -> None:
    assert coordinator_of_path(path) is None
