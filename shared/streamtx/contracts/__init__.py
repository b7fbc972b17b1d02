"""What travels between the services, the SDK and the CLI: one definition each.

* :mod:`.txnid`: the transaction id, its one strict parser and formatter;
* :mod:`.msgid`: the message id, its one strict parser (and fast path) and formatter;
* :mod:`.states`: transaction states and end actions;
* :mod:`.models`: the internal request and answer bodies (docs/internal-api.md);
* :mod:`.ackset`: acknowledgement sets by origin, synced between clusters.

Errors and their codes are :mod:`streamtx.errors`. Nothing here imports the
server kit (FastAPI, Starlette) or does I/O, so the SDK can use all of it.
"""

from streamtx.contracts.msgid import MessageId
from streamtx.contracts.states import Action, TxnState
from streamtx.contracts.txnid import TxnId, TxnIdField

__all__ = ["Action", "MessageId", "TxnId", "TxnIdField", "TxnState"]
