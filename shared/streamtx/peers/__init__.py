"""Clients of one service that more than one other service uses (built on :mod:`streamtx.transport`)."""

from streamtx.peers.coordinator import CoordinatorLookup

__all__ = ["CoordinatorLookup"]
