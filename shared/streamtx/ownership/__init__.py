"""Ownership of logs across replicas: leases in Redis for liveness, the ledger fence for safety.

- :func:`assign` spreads items (coordinator ids, partitions, subscription slots) evenly
  over the live members; :func:`slot_of` hashes an open-ended set of logs into a fixed
  number of slots, the items leased in their place;
- :class:`LeaseStore` keeps members and leases in Redis, each lease with a
  fencing token that only grows;
- :class:`Ownership` runs the loop that joins, takes, renews, hands over and
  gives up leases, calling back the service to open or close what it owns;
- :mod:`.mailbox` carries requests between the workers of one port to the
  owner of a log through a Redis stream per item, served there in batches.

Redis only decides who *should* write. What makes a paused or partitioned old
owner harmless is the ledger: the new owner opens each ledger as writer, which
appends a fence, so the old owner's next append fails with ``FencedError``.
"""

from streamtx.ownership.assign import assign, share_of, slot_of
from streamtx.ownership.lease import Lease, LeaseStore
from streamtx.ownership.manager import Ownership

__all__ = ["Lease", "LeaseStore", "Ownership", "assign", "share_of", "slot_of"]
