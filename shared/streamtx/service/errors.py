"""The one renderer of errors: every failed request, in FastAPI or in the fast lane, ends here.

:func:`render` turns whatever a request raised into the API's status, body
``{"error": code, "message": text}`` (the codes are :mod:`streamtx.errors`'s)
and headers; FastAPI's exception handlers and
:class:`~streamtx.service.fastlane.FastLane` both call it, so the two paths
cannot drift. A :class:`NotOwnerError` naming its owner is a 307 to that
replica (the method and body go along); while nobody owns the log it is a 503.
A 405's ``Allow`` names every method of the path (:func:`allowed_methods`), not
only those of the first route Starlette found for it (issue 38).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException
from starlette.routing import Match
from starlette.types import Scope

from streamtx.errors import NotOwnerError, StreamtxError, code_for_status, reply_body, reply_of

log = logging.getLogger(__name__)

#: ``(status, body, extra headers)`` of an error answer.
Rendered = tuple[int, bytes, dict[str, str]]


def validation_message(errors: Sequence[Any], where: str = "") -> str:
    """``loc: msg; ...`` of a validation error's first complaints (pydantic's or FastAPI's)."""
    parts = []
    for e in list(errors)[:5]:
        loc = [str(p) for p in e.get("loc", ()) or ()]
        parts.append(".".join([where, *loc] if where else loc) + f": {e.get('msg', '')}")
    return "; ".join(parts) or "invalid request"


def render(exc: BaseException, target: str = "") -> Rendered:
    """The answer to a request (``target``: its path and query) that raised ``exc``."""
    if isinstance(exc, NotOwnerError):
        body = orjson.dumps({"error": exc.code, "message": exc.message, "owner": exc.owner})
        if exc.owner is None:
            return 503, body, {"retry-after": "1"}
        return 307, body, {"location": exc.owner.rstrip("/") + target}
    if isinstance(exc, StreamtxError):
        status, body = reply_of(exc)
        return status, body, {}
    if isinstance(exc, RequestValidationError):
        return 400, reply_body("malformed", validation_message(exc.errors())), {}
    if isinstance(exc, HTTPException):  # a route miss (404/405: its Allow header kept), the body limit (413)
        body = reply_body(code_for_status(exc.status_code), str(exc.detail))
        return exc.status_code, body, dict(exc.headers or {})
    log.error("unhandled error", exc_info=exc)
    return 500, reply_body("internal", f"internal error: {type(exc).__name__}"), {}


def error_response(status: int, code: str, message: str) -> Response:
    """An error answer built outside an exception (readiness, auth, the body limit)."""
    return Response(reply_body(code, message), status_code=status, media_type="application/json")


#: The methods a route of ours may have (a 405's ``Allow`` is chosen among them).
_methods = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")


def allowed_methods(app: FastAPI, scope: Scope) -> list[str]:
    """Every method some route of ``app`` answers on the request's path, sorted.

    FastAPI makes a route per method and path, and Starlette's 405 names the methods of the
    first route whose path matched: ``allow: GET`` on a path PUT and DELETE also serve. Each
    method is asked of the routes as the router asks them (``matches``: a full match is a
    route for that method), so included routers and mounts are searched as requests are.
    """
    routes = app.router.routes
    return [m for m in _methods
            if any(r.matches({**scope, "method": m})[0] is Match.FULL for r in routes)]


def install_error_handlers(app: FastAPI) -> None:
    """One handler for every exception, so routes just raise."""

    async def handle(request: Request, exc: Exception) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        status, body, headers = render(exc, target)
        if status == 405 and (methods := allowed_methods(app, request.scope)):
            headers = {k: v for k, v in headers.items() if k.lower() != "allow"}
            headers["allow"] = ", ".join(methods)
        return Response(body, status_code=status, media_type="application/json", headers=headers)

    for kind in (StreamtxError, RequestValidationError, HTTPException, Exception):
        app.add_exception_handler(kind, handle)
