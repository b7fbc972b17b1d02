"""Limits on what one client may hold open at the coordinator. Pure: no I/O.

Without them one client could open transactions until the coordinator's memory
(and the log it replays on start) ran out, or register partitions and
subscriptions with one transaction without end - and its end fans out one call
to each.

* Open transactions per client: :class:`OpenTxnQuota`, 429 ``too_many_requests``
  beyond ``max_open_txns_per_client`` (retry once some of yours have ended). The
  client is the transaction's owner: the authenticated subject; with auth off
  every caller is the same anonymous client, so the limit bounds the process.
  Transactions replayed at start count for their owners again.
* Partitions and subscriptions per transaction: :func:`check_participants`, 409
  ``conflict`` beyond ``max_partitions_per_txn`` / ``max_subscriptions_per_txn``
  (the transaction stays usable with what it has).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TypeVar

from streamtx.contracts.txnid import TxnId
from streamtx.errors import ConflictError, TooManyRequestsError

T = TypeVar("T")


class OpenTxnQuota:
    """Open transactions per client; a transaction counts from its creation until it leaves OPEN."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: dict[str, int] = {}
        self._client_of: dict[TxnId, str] = {}

    def open_count(self, client: str) -> int:
        return self._open.get(client, 0)

    def reserve(self, client: str) -> None:
        """Count one more for ``client`` (before its transaction is created), or 429."""
        n = self._open.get(client, 0)
        if n >= self.limit:
            who = f"client {client!r}" if client else "the anonymous client (auth is off)"
            raise TooManyRequestsError(
                f"{who} has {n} open transactions, the limit (STREAMTX_MAX_OPEN_TXNS_PER_CLIENT); "
                "commit or abort some first"
            )
        self._open[client] = n + 1

    def cancel(self, client: str) -> None:
        """Undo a :meth:`reserve` whose transaction was not created."""
        n = self._open[client] - 1
        if n:
            self._open[client] = n
        else:
            del self._open[client]

    def bind(self, txn: TxnId, client: str) -> None:
        """The reserved slot is ``txn``'s."""
        self._client_of[txn] = client

    def adopt(self, txn: TxnId, client: str) -> None:
        """Count an open transaction found in the log at start (never refused)."""
        if txn not in self._client_of:
            self._open[client] = self._open.get(client, 0) + 1
            self._client_of[txn] = client

    def release(self, txn: TxnId) -> None:
        """``txn`` left OPEN (committing, aborting, timed out); unknown ones are ignored."""
        client = self._client_of.pop(txn, None)
        if client is not None:
            self.cancel(client)


def check_participants(kind: str, txn: TxnId, have: Collection[T], adding: Iterable[T], limit: int) -> None:
    """409 when registering ``adding`` would take the transaction past ``limit`` ``kind``."""
    more = sum(1 for x in adding if x not in have)
    if len(have) + more > limit:
        raise ConflictError(
            f"transaction {txn} has {len(have)} {kind}; {more} more would pass the limit of {limit} "
            f"(STREAMTX_MAX_{kind.upper()}_PER_TXN)"
        )


