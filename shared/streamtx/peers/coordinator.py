"""Asking the coordinator how a transaction ended: the stuck-transaction checkers' one question.

The broker (transaction buffers) and the pending-ack store (held acks) both end
transactions the coordinator finished but whose end never reached them. Both
ask ``GET {coordinator_url}/v1/transactions/{txn}`` and read the answer the
same way (docs/internal-api.md, "Stuck transactions"):

* ``COMMITTED`` -> commit; ``ABORTED`` or ``TIMEOUT`` -> abort;
* 404 ``not_found`` (the coordinator does not know it: never begun, or its
  records deleted after ``finished_retention_ms``) -> abort;
* 404 ``not_served`` (another coordinator process owns that coordinator id:
  nothing is known here) -> leave it, with a warning;
* ``OPEN``, ``COMMITTING``, ``ABORTING``, any other error or no answer -> leave
  it; the next round asks again.
"""

from __future__ import annotations

import logging

import httpx

from streamtx.contracts import Action, TxnId, TxnState
from streamtx.errors import NotFoundError, NotServedError, StreamtxError
from streamtx.transport import ONCE, HttpClient

log = logging.getLogger(__name__)


def outcome_of(answer: object) -> Action | None:
    """The end a participant applies, given the coordinator's answer body about a transaction."""
    state = answer.get("state") if isinstance(answer, dict) else None
    return Action.of_final_state(TxnState.parse(state))


class CoordinatorLookup:
    """``await lookup(txn)``: the end to apply, or None to leave it for now (one try, no retries)."""

    def __init__(self, coordinator_url: str, *, token: str | None, timeout_s: float = 5.0,
                 http: httpx.AsyncClient | None = None) -> None:
        self._client = HttpClient(coordinator_url, retry=ONCE, timeout_s=timeout_s, token=token, http=http)

    async def __call__(self, txn: TxnId) -> Action | None:
        try:
            body = await self._client.request("GET", f"/v1/transactions/{txn}")
        except NotServedError as exc:
            log.warning("stuck txn %s: its coordinator is not served at the configured URL: %s", txn, exc)
            return None
        except NotFoundError:
            return Action.ABORT
        except StreamtxError as exc:
            log.info("coordinator did not answer about %s: %s", txn, exc)
            return None
        return outcome_of(body)

    async def aclose(self) -> None:
        await self._client.aclose()
