"""The project's error hierarchy.

Every error knows its API error code, its HTTP status and whether retrying the
same call can help (``retriable``). Services map them to HTTP in one exception
handler; the SDK maps HTTP errors back to these classes.
"""

from __future__ import annotations


class StreamtxError(Exception):
    """Base of every streamtx error."""

    code: str = "internal"
    status: int = 500
    retriable: bool = False

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.__class__.__doc__ or self.code)
        self.message = message or (self.__class__.__doc__ or self.code).strip()


class MalformedError(StreamtxError):
    """The request is malformed."""

    code, status = "malformed", 400


class UnauthorizedError(StreamtxError):
    """No credentials, or credentials this service does not accept."""

    code, status = "unauthorized", 401


class ForbiddenError(StreamtxError):
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


class TooManyRequestsError(StreamtxError):
    """The caller holds too much already (open transactions); retry once some of it is released."""

    code, status = "too_many_requests", 429


class UnavailableError(StreamtxError):
    """A dependency is down or this node is not ready; retry later."""

    code, status, retriable = "unavailable", 503, True


class NotOwnerError(UnavailableError):
    """Another replica owns this log (``owner``: its URL, None while it moves)."""

    code = "not_owner"

    def __init__(self, message: str = "", owner: str | None = None) -> None:
        super().__init__(message)
        self.owner = owner


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
