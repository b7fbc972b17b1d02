"""Cursors: named, durable read states over a ledger.

A cursor records what its reader has deleted (acknowledged): a mark-delete
position, individually deleted entries above it, and batch-index deletes
inside batched entries. :class:`CursorState` is the pure state and its
snapshot codec; :class:`Cursor` persists it in a ledger of its own.
"""

from __future__ import annotations

from streamtx.cursor.cursor import Cursor, CursorStats, cursor_ledger_name
from streamtx.cursor.state import CursorState

__all__ = ["Cursor", "CursorState", "CursorStats", "cursor_ledger_name"]
