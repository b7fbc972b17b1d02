"""A request for a sibling worker's id is authenticated before it is queued in Redis (issue 21 item 15).

Before: the forwarding layer sits outside the token check (so that hot routes reach it), and it
posted every request to the owner's mailbox, credential or not; the owner refused it there, but
an unauthenticated caller could fill the Redis streams.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from streamtx.auth.policy import MISSING, Denial
from streamtx.coordinator.forwarding import SiblingForwarder
from streamtx.service.inprocess import Answer, Call, call_app

OWN = "http://tc:8080"


class Box:
    """A mailbox that records what is posted and answers 200."""

    def __init__(self) -> None:
        self.posted: list[Call] = []

    async def call(self, item: str, call: Call) -> Answer:
        self.posted.append(call)
        return Answer(200, [(b"content-type", b"application/json")], b"{}")


def authorize(method: str, path: str, header: str) -> Any:
    if header == "Bearer good":
        return None  # allowed (a principal would do too)
    return MISSING if not header else Denial(401, "unauthorized", "invalid or expired token")


async def app(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("a sibling's id is not served here")


def forwarder(box: Box) -> SiblingForwarder:
    coordinators = SimpleNamespace(ids=[0], owners={1: OWN})  # id 1 is a sibling worker's
    state = SimpleNamespace(coordinators=coordinators, mailbox=box, ownership=None)
    return SiblingForwarder(app, state=state, own_url=OWN, authorize=authorize)


async def test_an_unauthenticated_request_for_a_siblings_id_never_reaches_the_mailbox() -> None:
    box = Box()
    path = "/v1/transactions/281474976710656:7/commit"  # coordinator 1
    for headers in ([], [(b"authorization", b"Bearer forged")]):
        got = await call_app(forwarder(box), Call("POST", path, b"", headers, b""))
        assert got.status == 401, got
    assert box.posted == []
    got = await call_app(forwarder(box), Call("POST", path, b"", [(b"authorization", b"Bearer good")], b""))
    assert got.status == 200 and len(box.posted) == 1
