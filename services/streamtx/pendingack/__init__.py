"""The pending-ack store service: transactional acks per subscription.

An ack made in a transaction is logged durably here (one pending-ack log per
subscription) and holds its messages until the transaction ends; the
coordinator prepares (the optimistic overlap check) and ends it, and the store
tells the broker to delete (commit) or release (abort) the messages.

Modules: :mod:`.records` (log record codec), :mod:`.state` (pure conflict
rules), :mod:`.store` (one subscription's log, replay, end), :mod:`.registry`
(every subscription's store in this process), :mod:`.broker_client` (the end
call to the broker), :mod:`.metrics`, :mod:`.writer` (the buffered writer),
:mod:`.app` and :mod:`.routes` (HTTP).
"""
