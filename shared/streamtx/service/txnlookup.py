"""How a participant asks the coordinator how a transaction ended (its stuck-txn checkers).

``GET {coordinator_url}/v1/transactions/{txn}``, one try per question:

* ``COMMITTED`` -> commit (True); ``ABORTED`` or ``TIMEOUT`` -> abort (False);
* 404 for the transaction (the coordinator does not know it, e.g. its records
  were deleted after ``finished_retention_ms``) -> abort;
* 404 because the coordinator does not serve the transaction's coordinator id
  (its message holds :data:`NOT_SERVED`): nothing is known -> None;
* ``OPEN``, ``COMMITTING``, ``ABORTING``, or no answer -> None: leave it alone.
"""

from __future__ import annotations

import logging

from streamtx.errors import NotFoundError, StreamtxError
from streamtx.service.http import ServiceClient

log = logging.getLogger(__name__)

# True: commit, False: abort, None: leave it alone.
Verdict = bool | None

NOT_SERVED = "not served here"  # in the coordinator's 404 for an id it does not own

_verdicts: dict[str, bool] = {"COMMITTED": True, "ABORTED": False, "TIMEOUT": False}


def verdict_of(state: str | None) -> Verdict:
    """What to do with a transaction the coordinator reports in ``state``."""
    return _verdicts.get(state or "")


class CoordinatorLookup:
    """Asks the coordinator how a transaction ended (one try per call, no retries)."""

    def __init__(self, coordinator_url: str, *, token: str | None, timeout_s: float = 5.0) -> None:
        self._client = ServiceClient(coordinator_url, token=token, attempts=1, timeout_s=timeout_s)

    async def __call__(self, txn: object) -> Verdict:
        """The verdict on ``txn`` (anything whose ``str`` is the id, ``"most:least"``)."""
        try:
            body = await self._client.request("GET", f"/v1/transactions/{txn}")
        except NotFoundError as exc:
            if NOT_SERVED in str(exc):
                log.warning("stuck txn %s: its coordinator is not served at the configured URL: %s", txn, exc)
                return None
            return False
        except StreamtxError as exc:
            log.info("coordinator did not answer about %s: %s", txn, exc)
            return None
        return verdict_of(str((body or {}).get("state")))

    async def aclose(self) -> None:
        await self._client.aclose()
