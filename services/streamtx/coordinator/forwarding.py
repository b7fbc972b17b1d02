"""Coordinator workers on one port (``STREAMTX_WORKERS > 1``): requests for a sibling's id
go through its Redis mailbox (:mod:`streamtx.ownership.mailbox`).

Every worker is a member of the coordinator ownership with the port's shared
advertised URL, so an id a sibling owns has *our own* URL as its owner: a 307
would come back here. :class:`SiblingForwarder`, an ASGI layer just inside the
body limit, recognises the per-transaction paths, takes the coordinator id from
the transaction id and, when a sibling owns it, posts the request to that id's
mailbox and answers what the owner answers (503 when Redis fails or the owner
does not answer in ``mailbox_timeout_ms``). Everything else (creation, which
every worker serves on the ids it owns; ids of other replicas, which get their
307; malformed ids, 400) goes on to the app untouched.

The owner serves its mailbox's requests with the whole app (:func:`serve`),
marked so this layer lets them through, recording each request's id in the log
records it appends and answering from the log a request whose id the log holds
already (see :func:`serve`). Every call that travels this way is also
idempotent at the coordinator (adding partitions or subscriptions again changes
nothing, commit and abort of an ended transaction answer its end, reads read),
so a request served again by a new owner after its first owner died (the
mailbox's at-least-once) has no second effect.

Per-process admin views (``coordinatorStats``, ``slowTransactions``,
``tcBatchLog``...) answer for the worker that receives them.
"""

from __future__ import annotations

import contextlib
import logging
import re

from starlette.types import ASGIApp, Receive, Scope, Send

from streamtx.auth.policy import Denial
from streamtx.contracts.txnid import TxnId
from streamtx.coordinator import requests
from streamtx.coordinator.registry import Coordinators
from streamtx.errors import MalformedError, UnavailableError
from streamtx.ownership import Ownership
from streamtx.ownership.mailbox import Mailbox
from streamtx.service.auth import Authorize
from streamtx.service.bodylimit import BodyTooLarge
from streamtx.service.errors import error_response
from streamtx.service.inprocess import Answer, Call, call_app, read_body, send_answer

__all__ = ["FORWARDED", "SiblingForwarder", "coordinator_of_path", "serve"]

log = logging.getLogger(__name__)

#: Scope key of a request the owner plays from its mailbox (no client can set it).
FORWARDED = "streamtx.mailbox"

_txn_path = re.compile(r"/v1/transactions/([^/]+)(?:/(?:partitions|subscriptions|commit|abort))?/?\Z")
_metadata_path = re.compile(r"/admin/v3/transactions/transactionMetadata/([^/]+)/([^/]+)/?\Z")
_internal_stats_path = re.compile(r"/admin/v3/transactions/coordinatorInternalStats/(\d{1,5})/?\Z")


def coordinator_of_path(path: str) -> int | None:
    """The coordinator id a per-transaction (or per-coordinator) path is for; None for any other
    path and for a malformed id (the app answers that one 400 itself)."""
    try:
        if m := _txn_path.match(path):
            return TxnId.parse(m.group(1)).coordinator_id
        if m := _metadata_path.match(path):
            return TxnId.parse(f"{m.group(1)}:{m.group(2)}").coordinator_id
    except MalformedError:
        return None
    if m := _internal_stats_path.match(path):
        return int(m.group(1))
    return None


class SiblingForwarder:
    """ASGI layer: a request for an id a sibling worker owns goes to that id's mailbox."""

    def __init__(self, app: ASGIApp, *, state: object, own_url: str,
                 authorize: Authorize | None = None) -> None:
        """``authorize``: the service's token check (None: auth is off), made before a request is
        queued in Redis: an unauthenticated caller must not reach the mailbox (the owner checks
        again when it plays the request, with the same rule)."""
        self.app = app
        self._state = state  # the app's state: coordinators and mailbox appear there at start-up
        self._own_url = own_url
        self._authorize = authorize

    async def _sibling_owns(self, cid: int) -> bool:
        coordinators: Coordinators | None = getattr(self._state, "coordinators", None)
        if coordinators is None or cid in coordinators.ids or cid not in coordinators.owners:
            return False
        owner = coordinators.owners[cid]
        ownership: Ownership | None = getattr(self._state, "ownership", None)
        if owner is None and ownership is not None:
            # Moving, as far as our map (refreshed every lease third) knows: a sibling may
            # hold it already. Ask the leases rather than answer 503 for a handover between
            # workers that is over.
            with contextlib.suppress(Exception):
                owner = await ownership.owner_url(str(cid))
                if cid not in coordinators.ids:
                    coordinators.owners[cid] = owner
        return owner == self._own_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get(FORWARDED):
            await self.app(scope, receive, send)
            return
        cid = coordinator_of_path(scope["path"])
        mailbox: Mailbox | None = getattr(self._state, "mailbox", None)
        if cid is None or mailbox is None or not await self._sibling_owns(cid):
            await self.app(scope, receive, send)
            return
        if self._authorize is not None:
            header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            verdict = self._authorize(scope["method"], scope["path"], header)
            if type(verdict) is Denial:
                await error_response(verdict.status, verdict.code, verdict.message)(scope, receive, send)
                return
        try:
            body = await read_body(receive)
        except BodyTooLarge as exc:
            await error_response(413, "too_large", str(exc.detail))(scope, receive, send)
            return
        try:
            answer = await mailbox.call(str(cid), Call.of(scope, body))
        except UnavailableError as exc:
            await error_response(503, exc.code, exc.message)(scope, receive, send)
            return
        location = dict(answer.headers).get(b"location", b"")
        if answer.status == 307 and location.decode("latin-1").startswith(self._own_url + "/"):
            # The id moved on while the request waited, to another sibling: the client's
            # redirect would come back here. Ask it to retry instead.
            await error_response(503, "unavailable", f"coordinator {cid} is moving between workers; "
                                 "retry")(scope, receive, send)
            return
        await send_answer(send, answer)


async def serve(app: ASGIApp, call: Call) -> Answer:
    """Serve a mailbox request with the whole app, as its owner.

    The records it appends carry its request id (``requests.current``). A request
    the log already holds records of (its previous owner died between the append and
    the answer) is answered from the state instead of applied again: adding
    participants as the transaction's view (a transaction that has ended since would
    refuse them again with 409), commit and abort as they are (the log holds their
    decision: the end only waits for it to finish)."""
    request_id = requests.parse(call.headers)
    if request_id is not None and _applied(app, call.path, request_id):
        log.info("mailbox request %s for %s was applied by a previous owner: answered from the log",
                 request_id.hex(), call.path)
        if m := _participants_path.match(call.path):
            call = Call("GET", f"/v1/transactions/{m.group(1)}", b"", call.headers, b"")
        request_id = None
    token = requests.current.set(request_id)
    try:
        return await call_app(app, call, extra={FORWARDED: True})
    finally:
        requests.current.reset(token)


_participants_path = re.compile(r"/v1/transactions/([^/]+)/(?:partitions|subscriptions)/?\Z")


def _applied(app: ASGIApp, path: str, request_id: bytes) -> bool:
    coordinators: Coordinators | None = getattr(getattr(app, "state", None), "coordinators", None)
    cid = coordinator_of_path(path)
    if coordinators is None or cid is None:
        return False
    tc = coordinators.serving(cid)
    return tc is not None and request_id in tc.table.requests
