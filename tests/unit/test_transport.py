"""The one HTTP client and retry policy under the SDK, the services' clients and the demo."""

from __future__ import annotations

import subprocess
import sys

import httpx
import orjson
import pytest

from streamtx.contracts import Action, TxnId
from streamtx.contracts.models import PartitionEnd
from streamtx.errors import ConflictError, FencedError, NotServedError, UnavailableError
from streamtx.transport import ONCE, HttpClient, RetryPolicy

FAST = RetryPolicy(attempts=3, backoff_s=0.001, max_backoff_s=0.002)


Answers = list[httpx.Response | Exception]


def _client(answers: Answers, retry: RetryPolicy = FAST) -> tuple[HttpClient, list[bytes]]:
    bodies: list[bytes] = []

    def handle(request: httpx.Request) -> httpx.Response:
        bodies.append(request.content)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    http = httpx.AsyncClient(transport=httpx.MockTransport(handle))
    return HttpClient("http://peer", retry=retry, http=http), bodies


async def test_retries_retriable_replies_and_transport_errors_then_succeeds() -> None:
    client, bodies = _client([httpx.ConnectError("refused"),
                              httpx.Response(503, json={"error": "unavailable", "message": "replaying"}),
                              httpx.Response(200, json={"ok": 1})])
    assert await client.request("POST", "/x", json={"a": 1}) == {"ok": 1}
    assert bodies == [b'{"a":1}'] * 3  # the same body each try


@pytest.mark.parametrize(("status", "body", "cls"), [
    (409, {"error": "fenced", "message": "another writer"}, FencedError),
    (409, {"error": "conflict", "message": "held"}, ConflictError),
    (404, {"error": "not_served", "message": "coordinator 1"}, NotServedError),
])
async def test_final_errors_are_raised_at_once_as_themselves(
    status: int, body: dict[str, str], cls: type,
) -> None:
    client, bodies = _client([httpx.Response(status, json=body)])
    with pytest.raises(cls):
        await client.request("GET", "/x")
    assert len(bodies) == 1


async def test_gives_up_after_the_policy_s_attempts() -> None:
    client, bodies = _client([httpx.Response(503, json={"error": "unavailable", "message": "down"})] * 3)
    with pytest.raises(UnavailableError):
        await client.request("GET", "/x")
    assert len(bodies) == 3
    client, bodies = _client([httpx.Response(503, json={"error": "unavailable", "message": "down"})])
    with pytest.raises(UnavailableError):
        await client.request("GET", "/x", retry=ONCE)  # per call
    assert len(bodies) == 1


async def test_a_model_is_sent_by_its_own_serializer() -> None:
    client, bodies = _client([httpx.Response(200, json={})])
    body = PartitionEnd(txn_id=TxnId(1, 2), partition="persistent://t/n/x-partition-0", action=Action.ABORT)
    await client.request("POST", "/x", json=body)
    assert orjson.loads(bodies[0]) == {"txn_id": "1:2", "partition": "persistent://t/n/x-partition-0",
                                       "action": "abort"}


async def test_a_peer_not_deployed_is_unavailable_naming_its_setting() -> None:
    client = HttpClient(None, peer="broker", setting="STREAMTX_BROKER_URL")
    assert not client.configured
    with pytest.raises(UnavailableError, match="STREAMTX_BROKER_URL"):
        await client.request("GET", "/x")
    await client.aclose()


async def test_deadline_and_any_error() -> None:
    calls = 0

    async def garbled() -> None:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ValueError("garbled 200")

    with pytest.raises(ValueError):  # not retriable by default
        await RetryPolicy(attempts=None, backoff_s=0.001).run(garbled)
    await RetryPolicy(attempts=None, backoff_s=0.001, any_error=True).run(garbled)
    assert calls == 3

    async def down() -> None:
        raise UnavailableError("down")

    with pytest.raises(UnavailableError):  # an unlimited policy with a deadline still ends
        await RetryPolicy(attempts=None, backoff_s=0.01, max_backoff_s=0.01, deadline_s=0.05).run(down)
    assert RetryPolicy(attempts=4, backoff_s=0.05, max_backoff_s=0.1).delays() == [0.05, 0.1, 0.1]


def test_the_sdk_imports_no_server_kit() -> None:
    """``import streamtx.client`` (and the transport, contracts, errors under it) loads no FastAPI."""
    code = ("import sys, streamtx.client, streamtx.transport, streamtx.contracts, streamtx.peers; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('fastapi', 'starlette', 'uvicorn', 'prometheus_fastapi_instrumentator', 'pydantic_settings') "
            "or m.startswith('streamtx.service')); print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"the SDK pulls in: {out.stdout}"
