"""The one HTTP client and retry policy under the SDK, the services' clients and the demo."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import httpx
import orjson
import pytest

from streamtx.contracts import Action, TxnId
from streamtx.contracts.models import PartitionEnd
from streamtx.errors import ConflictError, FencedError, NotOwnerError, NotServedError, UnavailableError
from streamtx.transport import ONCE, HttpClient, RetryPolicy
from streamtx.transport.redirect import OwnerCache

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


# --- owners of replicated logs (streamtx.transport.redirect) ------------------------------------


def _owners_client(handle: Callable[[httpx.Request], httpx.Response]) -> tuple[HttpClient, OwnerCache]:
    owners = OwnerCache()
    http = httpx.AsyncClient(transport=httpx.MockTransport(handle))
    return HttpClient("http://any", retry=ONCE, http=http, owners=owners, moving_wait_s=5.0), owners


async def test_the_owner_a_307_names_is_cached_and_forgotten_when_it_is_gone() -> None:
    # What the entry replica ("any") answers, in turn, once b1 died: b1 still (its lease
    # has not run out), b1 again, nobody (moving), then b2.
    after_death: list[str | None] = ["http://b1", "http://b1", None, "http://b2"]
    alive = {"b1": True}
    seen: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        host = request.url.host
        seen.append(host)
        if host == "any":
            owner = "http://b1" if alive["b1"] else after_death.pop(0)
            if owner is None:
                return httpx.Response(503, json={"error": "not_owner", "message": "moving", "owner": None})
            return httpx.Response(307, headers={"location": owner + request.url.path},
                                  json={"error": "not_owner", "message": "elsewhere", "owner": owner})
        if host == "b1" and not alive["b1"]:
            raise httpx.ConnectError("refused")
        return httpx.Response(200, json={"at": host})

    client, owners = _owners_client(handle)
    assert await client.request("POST", "/t/x") == {"at": "b1"}
    assert owners.get("http://any/t/x") == "http://b1/t/x"
    seen.clear()
    assert await client.request("POST", "/t/x") == {"at": "b1"}
    assert seen == ["b1"]  # straight to the cached owner
    alive["b1"] = False
    seen.clear()
    assert await client.request("POST", "/t/x") == {"at": "b2"}  # the move was only latency
    assert seen == ["b1", "any", "b1", "any", "b1", "any", "any", "b2"]
    assert owners.get("http://any/t/x") == "http://b2/t/x"


async def test_without_an_owner_cache_a_moving_log_is_an_error_at_once() -> None:
    moving = httpx.Response(503, json={"error": "not_owner", "message": "moving", "owner": None})
    client, _ = _client([moving], retry=ONCE)
    with pytest.raises(UnavailableError):
        await client.request("GET", "/t/x")


def test_the_owner_cache_keeps_the_most_recently_used() -> None:
    cache = OwnerCache(size=2)
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("a") == "A"
    cache.put("c", "C")
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == ("A", None, "C")


async def test_a_redirect_loop_while_a_log_moves_is_waited_out_never_taken_for_an_answer() -> None:
    # Two replicas whose owner maps are a tick out of date point at each other: a 307 is all
    # the client gets after max_hops. It served nothing: wait (then retry) or raise not_owner,
    # never hand the 307's body to the caller as the answer (the demo's workers decoded it).
    looping = {"left": 5}

    def handle(request: httpx.Request) -> httpx.Response:
        if looping["left"] > 0 or request.url.host != "b2":
            looping["left"] -= request.url.host != "b2"
            other = "http://b2" if request.url.host != "b2" else "http://b1"
            return httpx.Response(307, headers={"location": other + request.url.path},
                                  json={"error": "not_owner", "message": "elsewhere", "owner": other})
        return httpx.Response(200, json={"at": "b2"})

    client, _ = _owners_client(handle)
    assert await client.request("GET", "/t/x") == {"at": "b2"}  # the maps agreed: only latency
    looping["left"] = 10**6
    client, _ = _client([httpx.Response(307, json={"error": "not_owner", "message": "x", "owner": "http://b"})],
                        retry=ONCE)
    with pytest.raises(NotOwnerError):
        await client.request("GET", "/t/x")


async def test_peers_found_at_run_time_share_one_clients_connections_and_headers() -> None:
    """The broker replicas' forwarder: one client for every owner (each had a raw httpx client, the
    stats fan-out one per call)."""
    seen: list[tuple[str, str | None, str | None]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append((str(request.url), request.headers.get("authorization"), request.headers.get("x-extra")))
        return httpx.Response(200, json={"at": request.url.host})

    hub = HttpClient("", token="t", headers={"x-extra": "1"}, retry=ONCE)
    hub._http._transport = httpx.MockTransport(handle)  # the same pool, a mocked network
    assert await hub.at("http://b1:1").request("GET", "/s") == {"at": "b1"}
    assert await hub.at("http://b2:2/").request("GET", "/s") == {"at": "b2"}
    assert seen == [("http://b1:1/s", "Bearer t", "1"), ("http://b2:2/s", "Bearer t", "1")]
    await hub.aclose()


async def test_a_share_is_not_followed_elsewhere_and_a_proxy_gets_error_replies_as_they_came() -> None:
    moved = httpx.Response(307, headers={"location": "http://b2/x"})
    client, bodies = _client([moved, moved])
    with pytest.raises(NotOwnerError):
        await client.send("GET", "/x", follow=False, retry=ONCE)
    assert len(bodies) == 1  # b2 was never asked
    client, _ = _client([httpx.Response(409, json={"error": "conflict", "message": "no"})])
    got = await client.send("PUT", "/x", errors=False)
    assert got.status_code == 409 and got.json()["error"] == "conflict"
