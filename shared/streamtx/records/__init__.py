"""What the services write to their ledgers, and what a replay of it means: one definition each.

The services write these records and the offline jobs (``spark-jobs/``:
histograms, compaction) and operator tools read them, all through this
package, so a record version the services write is one the jobs can read.
Each codec module documents its byte layout where it encodes it:

* :mod:`.partition`: the entries of a partition ledger (message batches,
  commit/abort markers, producer epochs, replication markers);
* :mod:`.txnlog`: transaction-log records (NEW carries the owner when auth
  is on); :mod:`.txnstate` the transaction state machine and end reasons they
  log, :mod:`.txntable` the table a replay of the log rebuilds;
* :mod:`.pendingack`: pending-ack log records; :mod:`.pendingack_state` the
  subscription state (and conflict rules) a replay of them rebuilds;
* :mod:`.tbsnapshot`: transaction-buffer snapshot records (segments, index)
  and the rule that picks the snapshot a recovery uses.

Batched entries (several records in one entry, PIP-160) are
:mod:`streamtx.batching.codec`; ledger frames are :mod:`streamtx.ledger.frames`.
Everything here is pure: no I/O.
"""
