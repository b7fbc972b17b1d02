"""Metrics of the Redis mailboxes between worker processes (default registry).

Labels: ``cluster`` and ``service`` (the mailbox's, e.g. ``tc``); the caller's
metrics also ``outcome``: ``answered``, ``timeout`` (no answer within the wait:
503) or ``error`` (Redis failed: 503).

=============================================  =========  ==============================================
name                                           type       what
=============================================  =========  ==============================================
streamtx_mailbox_forwarded_total               counter    calls a worker posted to a sibling's mailbox
streamtx_mailbox_wait_seconds                  histogram  a forwarded call's wait for its answer
streamtx_mailbox_batch_requests                histogram  requests the owner read from a mailbox at once
streamtx_mailbox_served_total                  counter    requests an owner served (``replayed``: true
                                                          when a dead owner had read them first)
streamtx_mailbox_expired_total                 counter    requests dropped unserved: their caller gave up
streamtx_mailbox_errors_total                  counter    Redis errors, by ``side`` (caller, owner)
=============================================  =========  ==============================================
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

_labels = ("cluster", "service")
#: A forwarded call is one Redis round trip each way plus the owner's work (a log append).
WAIT_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Up to ``max_batch`` (the batching max_records, 512 by default) a read.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

forwarded = Counter("streamtx_mailbox_forwarded", "Calls posted to a sibling worker's mailbox",
                    (*_labels, "outcome"))
wait_seconds = Histogram("streamtx_mailbox_wait_seconds", "A forwarded call's wait for its answer",
                         (*_labels, "outcome"), buckets=WAIT_BUCKETS_S)
batch_requests = Histogram("streamtx_mailbox_batch_requests", "Requests an owner read from a mailbox at once",
                           _labels, buckets=BATCH_BUCKETS)
served = Counter("streamtx_mailbox_served", "Requests an owner served from its mailboxes",
                 (*_labels, "replayed"))
expired = Counter("streamtx_mailbox_expired", "Mailbox requests dropped unserved after their caller gave up",
                  _labels)
errors = Counter("streamtx_mailbox_errors", "Redis errors of the mailboxes", (*_labels, "side", "error"))
