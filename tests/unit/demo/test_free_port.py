"""The demo's (and the tests') ports for children to listen on: outside the kernel's ephemeral range."""

from __future__ import annotations

import socket

import pytest

from streamtx.demo import procs


def test_a_free_port_is_below_the_ephemeral_range_and_bindable() -> None:
    low = procs._ephemeral_low()
    for _ in range(50):
        port = procs.free_port()
        assert procs._LOWEST <= port < low  # a port-0 bind or an outgoing connection never takes it
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_held_by_a_listener_is_never_given(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        with socket.socket() as other:
            other.bind(("127.0.0.1", 0))
            free = other.getsockname()[1]
        picks = iter([taken, taken, free])  # the first two picks collide with the listener
        monkeypatch.setattr(procs.random, "randrange", lambda a, b: next(picks))
        assert procs.free_port() == free
