"""The project's error hierarchy, and how an error crosses the wire.

Modelled on aiokafka's ``errors.py``: every error class knows its API error
code (the ``error`` field of the body ``{"error": code, "message": text}``),
its HTTP status and whether retrying the same call can help (``retriable``).
Services render them in one place; a caller decodes a reply by its ``error``
field with :func:`for_code`, so a :class:`FencedError` or a
:class:`NotServedError` comes back out of a call as itself, not as whatever
its HTTP status suggests. The status decides only for a body without a known
code (a proxy's 502, say).

Every code is unique (checked at import); ``docs/api.md`` lists them.
"""

from __future__ import annotations

from typing import Any

import orjson

_by_code: dict[str, type[StreamtxError]] = {}


class StreamtxError(Exception):
    """Base of every streamtx error."""

    code: str = "internal"
    status: int = 500
    retriable: bool = False

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.__class__.__doc__ or self.code)
        self.message = message or (self.__class__.__doc__ or self.code).strip()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "code" in cls.__dict__:  # a subclass that only narrows (none yet) keeps its parent's code
            if cls.code in _by_code:
                taken = _by_code[cls.code].__name__
                raise TypeError(f"error code {cls.code!r} of {cls.__name__} is {taken}'s")
            _by_code[cls.code] = cls


_by_code[StreamtxError.code] = StreamtxError


class MalformedError(StreamtxError):
    """The request is malformed."""

    code, status = "malformed", 400


class AuthError(StreamtxError):
    """Base of the two refusals of credentials (the SDK's ``AuthError``); it has no code of its own."""

    status = 401


class UnauthorizedError(AuthError):
    """No credentials, or credentials this service does not accept."""

    code, status = "unauthorized", 401


class ForbiddenError(AuthError):
    """The credentials do not allow this request."""

    code, status = "forbidden", 403


class NotFoundError(StreamtxError):
    """The named thing does not exist."""

    code, status = "not_found", 404


class ConflictError(StreamtxError):
    """The request conflicts with the current state."""

    code, status = "conflict", 409


class TooLargeError(StreamtxError):
    """The request or record is too large."""

    code, status = "too_large", 413


class HeadersTooLargeError(StreamtxError):
    """The request's head (request line and headers) is over the service's size or count limit."""

    code, status = "headers_too_large", 431


class RequestTimeoutError(StreamtxError):
    """The request did not arrive whole in time; the connection is closed."""

    code, status = "request_timeout", 408


class TooManyRequestsError(StreamtxError):
    """The caller holds too much already (open transactions); retry once some of it is released."""

    code, status = "too_many_requests", 429


class UnavailableError(StreamtxError):
    """A dependency is down or this node is not ready; retry later."""

    code, status, retriable = "unavailable", 503, True


class NotOwnerError(UnavailableError):
    """Another replica owns this log (``owner``: its URL, None while it moves); retry there."""

    code = "not_owner"

    def __init__(self, message: str = "", owner: str | None = None) -> None:
        super().__init__(message)
        self.owner = owner


class NotServedError(NotFoundError):
    """The coordinator id is not served by this coordinator process: asking it again will not help."""

    code = "not_served"


class MethodNotAllowedError(StreamtxError):
    """The path exists but not with this method."""

    code, status = "method_not_allowed", 405


# --- ledger layer -----------------------------------------------------------


class LedgerError(StreamtxError):
    """A ledger operation failed."""

    code, status = "ledger_error", 503


class LedgerUnavailableError(LedgerError):
    """The storage backend could not be reached or did not confirm a write."""

    code, retriable = "ledger_unavailable", True


class FencedError(LedgerError):
    """Another writer opened this ledger; this writer may never append again."""

    code, status, retriable = "fenced", 409, False


class LedgerClosedError(LedgerError):
    """The ledger (or writer) was closed."""

    code, retriable = "closed", False


class CorruptEntryError(LedgerError):
    """An entry failed its checksum or could not be decoded."""

    code, retriable = "corrupt", False


class InvalidPositionError(LedgerError):
    """The position is before the ledger's first entry or not in this ledger."""

    code, status, retriable = "invalid_position", 400, False


# --- the wire -----------------------------------------------------------------

_by_status: dict[int, type[StreamtxError]] = {
    400: MalformedError, 401: UnauthorizedError, 403: ForbiddenError, 404: NotFoundError,
    405: MethodNotAllowedError, 408: RequestTimeoutError, 409: ConflictError, 413: TooLargeError,
    429: TooManyRequestsError, 431: HeadersTooLargeError,
}


def for_code(code: str) -> type[StreamtxError] | None:
    """The error class of an API error code, or None for a code this version does not know."""
    return _by_code.get(code)


def codes() -> dict[str, type[StreamtxError]]:
    """Every known code and its class (for docs and tests)."""
    return dict(_by_code)


def from_reply(status: int, body: Any, context: str = "") -> StreamtxError:
    """The error a reply with HTTP ``status`` and decoded JSON ``body`` stands for.

    Decoded by the body's ``error`` code when it is known; otherwise by status
    (4xx by its usual meaning, anything else retriable :class:`UnavailableError`).
    The instance keeps the status it came with (a subclass never changes it).
    """
    code = message = None
    if isinstance(body, dict):
        code, message = body.get("error"), body.get("message")
    cls = for_code(code) if isinstance(code, str) else None
    if cls is None or cls.status != status:
        # An unknown code, or a known one at another status (a proxy, an older peer): trust the status.
        cls = _by_status.get(status, UnavailableError)
    text = f"{code}: {message}" if code is not None else str(body)[:200]
    err = cls(f"{context}: {text}" if context else text)
    if isinstance(err, NotOwnerError) and isinstance(body, dict):
        err.owner = body.get("owner") if isinstance(body.get("owner"), str) else None
    if status >= 500:
        err.retriable = True  # the peer says "try again" (docs/api.md), whatever the class's default
    return err


def reply_body(code: str, message: str) -> bytes:
    """The API's error body ``{"error": code, "message": text}``: the one renderer of errors."""
    return orjson.dumps({"error": code, "message": message})


def reply_of(exc: StreamtxError) -> tuple[int, bytes]:
    """The status and body a service answers with for ``exc``."""
    return exc.status, reply_body(exc.code, exc.message)


def code_for_status(status: int) -> str:
    """The API error code of a bare HTTP status (a framework's 404/405, a body limit's 413)."""
    cls = _by_status.get(status)
    if cls is not None:
        return cls.code
    return "unavailable" if status == 503 else "error"
