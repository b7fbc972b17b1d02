"""Maps errors to the API's JSON error body ``{"error": code, "message": text}``."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from streamtx.errors import NotOwnerError, StreamtxError

log = logging.getLogger(__name__)

#: The API error code of each HTTP status the services answer.
codes = {400: "malformed", 401: "unauthorized", 403: "forbidden", 404: "not_found",
         405: "method_not_allowed", 409: "conflict", 413: "too_large", 429: "too_many_requests",
         503: "unavailable"}


def error_response(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": code, "message": message}, status_code=status)


def install_error_handlers(app: FastAPI) -> None:
    """One handler per error family, so routes just raise."""

    @app.exception_handler(StreamtxError)
    async def _streamtx(_: Request, exc: StreamtxError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message)

    @app.exception_handler(NotOwnerError)
    async def _not_owner(request: Request, exc: NotOwnerError) -> Response:
        # Another replica owns the log: send the client there (307 keeps the method and
        # the body); while the log moves nobody owns it, and 503 says retry.
        body = {"error": exc.code, "message": exc.message, "owner": exc.owner}
        if exc.owner is None:
            return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})
        target = exc.owner.rstrip("/") + request.url.path
        if request.url.query:
            target += "?" + request.url.query
        return JSONResponse(body, status_code=307, headers={"Location": target})

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        details = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}" for e in exc.errors()
        )
        return error_response(400, "malformed", details or "invalid request")

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        return error_response(exc.status_code, codes.get(exc.status_code, "error"), str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return error_response(500, "internal", f"internal error: {type(exc).__name__}")
