"""Errors cross the wire as themselves: every class has its own code, replies are decoded by it."""

from __future__ import annotations

import orjson
import pytest

from streamtx import errors
from streamtx.errors import (
    AuthError,
    ConflictError,
    FencedError,
    ForbiddenError,
    MalformedError,
    NotFoundError,
    NotOwnerError,
    NotServedError,
    StreamtxError,
    UnauthorizedError,
    UnavailableError,
    for_code,
    from_reply,
    reply_of,
)


def _all_classes() -> list[type[StreamtxError]]:
    out, todo = [], [StreamtxError]
    while todo:
        cls = todo.pop()
        if "code" in cls.__dict__:  # AuthError only groups its two subclasses
            out.append(cls)
        todo += cls.__subclasses__()
    return out


@pytest.mark.parametrize("cls", _all_classes(), ids=lambda c: c.__name__)
def test_every_error_survives_a_round_trip(cls: type[StreamtxError]) -> None:
    status, body = reply_of(cls("what happened"))
    back = from_reply(status, orjson.loads(body), "POST /x")
    assert type(back) is cls
    assert back.status == status and "what happened" in back.message and "POST /x" in back.message
    assert for_code(cls.code) is cls


def test_codes_are_unique_and_a_duplicate_is_refused() -> None:
    assert len(errors.codes()) == len(set(errors.codes()))
    with pytest.raises(TypeError, match="fenced"):
        type("Again", (StreamtxError,), {"code": "fenced"})


@pytest.mark.parametrize(("status", "body", "cls"), [
    (409, {"error": "fenced", "message": "another writer"}, FencedError),
    (409, {"error": "conflict", "message": "held"}, ConflictError),
    (404, {"error": "not_served", "message": "coordinator 3"}, NotServedError),
    (404, {"error": "not_found", "message": "no topic"}, NotFoundError),
    (503, {"error": "not_owner", "message": "moved"}, NotOwnerError),
    (401, {"error": "unauthorized", "message": "no token"}, UnauthorizedError),
    (403, {"error": "forbidden", "message": "not admin"}, ForbiddenError),
    # An unknown code, or a code at a status it never has: the status decides.
    (409, {"error": "brand_new", "message": "?"}, ConflictError),
    (400, {"error": "fenced", "message": "?"}, MalformedError),
    (502, "<html>bad gateway</html>", UnavailableError),
    (500, {"error": "internal", "message": "boom"}, StreamtxError),
])
def test_replies_are_decoded_by_code(status: int, body: object, cls: type[StreamtxError]) -> None:
    err = from_reply(status, body)
    assert type(err) is cls


def test_a_5xx_reply_is_retriable_whatever_its_class() -> None:
    assert from_reply(500, {"error": "internal", "message": "boom"}).retriable
    assert from_reply(503, {"error": "closed", "message": "ledger closed"}).retriable
    assert not from_reply(409, {"error": "fenced", "message": "x"}).retriable
    assert not from_reply(401, {"error": "unauthorized", "message": "x"}).retriable  # was retried as a 503
    assert issubclass(NotServedError, NotFoundError) and issubclass(NotOwnerError, UnavailableError)
    assert issubclass(UnauthorizedError, AuthError) and issubclass(ForbiddenError, AuthError)


def test_not_owner_keeps_its_owner() -> None:
    err = from_reply(503, {"error": "not_owner", "message": "moving", "owner": "http://b:1"})
    assert isinstance(err, NotOwnerError) and err.owner == "http://b:1"
