"""STREAMTX_WORKERS: who may run several workers, and with what."""

from __future__ import annotations

import socket

import pytest
from pydantic import ValidationError

from streamtx.broker.settings import BrokerSettings
from streamtx.coordinator.settings import CoordinatorSettings
from streamtx.service.workers import member_of, reuseport_socket


def test_one_worker_is_the_default() -> None:
    assert CoordinatorSettings().workers == 1  # type: ignore[call-arg]


def test_coordinator_workers_need_redis() -> None:
    with pytest.raises(ValidationError, match="needs redis_url"):
        CoordinatorSettings(workers=4)  # type: ignore[call-arg]
    assert CoordinatorSettings(workers=4, redis_url="redis://x:1/0").workers == 4  # type: ignore[call-arg]


def test_a_service_whose_logs_are_not_leased_refuses_workers() -> None:
    with pytest.raises(ValidationError, match="one process per port"):
        BrokerSettings(workers=2)  # type: ignore[call-arg]


def test_worker_members_differ() -> None:
    names = {member_of("pod-1", i, g) for i in range(4) for g in range(3)}
    assert len(names) == 12


def test_workers_bind_one_port_together() -> None:
    first = reuseport_socket("127.0.0.1", 0)
    try:
        port = first.getsockname()[1]
        second = reuseport_socket("127.0.0.1", port)
        second.close()
        with socket.socket() as plain, pytest.raises(OSError):
            plain.bind(("127.0.0.1", port))  # without SO_REUSEPORT the port is taken
    finally:
        first.close()
