"""Batched log writes (PIP-160): many records per ledger entry.

* :class:`BufferedWriter` gathers records and appends them as one entry;
* :mod:`.codec` is the entry format (:func:`decode_entry` reads batched and
  unbatched entries alike);
* :mod:`.metrics` the PIP-160 metrics, :mod:`.settings` the validated settings.
"""

from streamtx.batching.codec import decode_entry, encode_batch, is_batched
from streamtx.batching.metrics import (
    BatchedLogMetrics,
    FlushTrigger,
    pending_ack_metrics,
    tc_metrics,
)
from streamtx.batching.settings import BatchingSettings
from streamtx.batching.writer import BufferedWriter, FlushPolicy, WriteResult, WriterOptions

__all__ = [
    "BatchedLogMetrics",
    "BatchingSettings",
    "BufferedWriter",
    "FlushPolicy",
    "FlushTrigger",
    "WriteResult",
    "WriterOptions",
    "decode_entry",
    "encode_batch",
    "is_batched",
    "pending_ack_metrics",
    "tc_metrics",
]
