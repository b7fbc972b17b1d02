"""Clients of one service that more than one other service uses (built on :mod:`streamtx.transport`)."""

from streamtx.peers.coordinator import CoordinatorLookup
from streamtx.peers.stuck import Lookup, Stuck, StuckTxnChecker, Sweep
from streamtx.peers.txnguard import TxnGuard

__all__ = ["CoordinatorLookup", "Lookup", "Stuck", "StuckTxnChecker", "Sweep", "TxnGuard"]
