"""A spread topic as one request sees it: which partitions are open here and which each other owner holds.

:meth:`streamtx.broker.registry.Broker.resolve` builds it; the routes fan a request
out along it (:mod:`.spread`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from streamtx.broker.topic import Topic

__all__ = ["SpreadPlan"]


@dataclass(slots=True)
class SpreadPlan:
    """A spread topic as one request sees it: the partitions open here, those of each owner."""

    name: str
    count: int
    topic: Topic | None  # this replica's part of it, if any
    local: list[int]
    remote: dict[str, list[int]]  # owner URL -> its partitions
    router: Topic  # routes produced messages over all ``count`` partitions
    ledgers: dict[int, int]  # partition ledger id -> partition index

    def owner_of(self, index: int) -> str | None:
        """The URL of a remote partition's owner; None for one open here."""
        return next((u for u, idx in self.remote.items() if index in idx), None)
