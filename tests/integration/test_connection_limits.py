"""A connection cannot hold a service's memory or a socket for long without delivering a request
(issue 21 item 10), checked with raw sockets against a real service process, under each of
uvicorn's HTTP/1.1 parsers (``STREAMTX_SERVER_HTTP``: httptools, h11).

Before: a 64 MiB header was read whole before auth; a header count had no limit; a
client that sent half a request (head or body) and waited, or sent nothing at all,
kept its connection for good.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from tests.support.services import ServiceProcess

TOKEN = "limits-admin-token"
HEAD_TIMEOUT_S, BODY_TIMEOUT_S = 1.0, 1.5


@pytest.fixture(scope="module", params=["httptools", "h11"])
def service(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    tmp = tmp_path_factory.mktemp("limits")
    proc = ServiceProcess("pendingack", {
        "STREAMTX_SERVER_HTTP": request.param,
        "STREAMTX_LEDGER_URL": f"file://{tmp / 'ledgers'}", "STREAMTX_TEST_LOG_DIR": str(tmp),
        "STREAMTX_ADMIN_TOKEN": TOKEN, "STREAMTX_MAX_HEADER_BYTES": "16384", "STREAMTX_MAX_HEADERS": "50",
        "STREAMTX_REQUEST_HEAD_TIMEOUT_S": str(HEAD_TIMEOUT_S),
        "STREAMTX_REQUEST_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S)})
    proc.start(timeout=60)
    yield proc
    proc.stop()


def connect(service: ServiceProcess) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", service.port), timeout=10)
    return s


def answer(s: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The first answer on ``s``, read until the server closes or its body is whole."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, body


def closed_within(s: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``s`` within ``seconds`` (what it sends first is read and dropped)."""
    s.settimeout(seconds)
    try:
        while s.recv(65536):
            pass
        return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_a_plain_request_is_served(service: ServiceProcess) -> None:
    with connect(service) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        assert answer(s)[0] == 200


def test_a_head_over_the_size_limit_is_a_431_before_it_is_read_whole(service: ServiceProcess) -> None:
    with connect(service) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: ")
        sent = 0
        with pytest.raises((BrokenPipeError, ConnectionResetError)):
            for _ in range(4096):  # up to 64 MiB: the server must stop reading long before
                s.sendall(b"a" * 16384)
                sent += 16384
        assert sent < 8 << 20
    with connect(service) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 20000 + b"\r\n\r\n")
        status, headers, body = answer(s)
        assert status == 431 and json.loads(body)["error"] == "headers_too_large", body
        assert headers.get("connection") == "close"


def test_too_many_headers_is_a_431(service: ServiceProcess) -> None:
    with connect(service) as s:
        many = b"".join(b"x-%d: 1\r\n" % i for i in range(60))
        s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n" + many + b"\r\n")
        status, _, body = answer(s)
        assert status == 431 and json.loads(body)["error"] == "headers_too_large", body


def test_idle_slow_head_and_slow_body_connections_are_closed(service: ServiceProcess) -> None:
    idle = connect(service)
    slow_head = connect(service)
    slow_head.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
    slow_body = connect(service)
    slow_body.sendall(b"POST /admin/v3/transactions/pendingAckBatchLog HTTP/1.1\r\nhost: x\r\n"
                      b"authorization: Bearer " + TOKEN.encode() + b"\r\ncontent-type: application/json\r\n"
                      b"content-length: 100\r\n\r\n{\"enab")
    kept = connect(service)  # answered, then idle: uvicorn's keep-alive (5 s) or the head deadline ends it
    kept.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
    assert answer(kept)[0] == 200
    started = time.monotonic()
    for s in (idle, slow_head, slow_body):
        if s is slow_head:  # a byte now and then does not keep a head alive past its deadline
            s.sendall(b"x")
        assert closed_within(s, HEAD_TIMEOUT_S + BODY_TIMEOUT_S + 5), s
        s.close()
    assert time.monotonic() - started < HEAD_TIMEOUT_S + BODY_TIMEOUT_S + 5
    assert closed_within(kept, 10)
    kept.close()


def test_a_head_that_stalls_gets_a_408(service: ServiceProcess) -> None:
    with connect(service) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
        status, _, body = answer(s)
        assert status == 408 and json.loads(body)["error"] == "request_timeout", body


def test_a_request_answered_in_time_keeps_its_connection(service: ServiceProcess) -> None:
    with connect(service) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        assert answer(s)[0] == 200
        time.sleep(HEAD_TIMEOUT_S / 2)
        s.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")  # a second request in time is served
        assert answer(s)[0] == 200
