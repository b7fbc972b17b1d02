"""The demo's services as replicas over Redis: names, URLs and environments (streamtx.demo.replicas)."""

from __future__ import annotations

import itertools

import pytest

from streamtx.demo.replicas import first_replica, front_urls, replica_name, service_specs


def ports() -> itertools.count[int]:
    return itertools.count(9000)


def test_one_of_each_kind_is_the_demo_as_before() -> None:
    p = ports()
    specs = service_specs(("broker", "coordinator"), 1, lambda: next(p))
    assert [(s.name, s.kind, s.url) for s in specs] == [
        ("broker", "broker", "http://127.0.0.1:9000"), ("coordinator", "coordinator", "http://127.0.0.1:9001")]
    assert specs[0].env == {"STREAMTX_HOST": "127.0.0.1", "STREAMTX_PORT": "9000"}  # no Redis, no lease


def test_replicas_lease_over_redis_advertise_themselves_and_callers_get_replica_0() -> None:
    p = ports()
    specs = service_specs(("broker", "pendingack", "coordinator"), 2, lambda: next(p),
                          redis_url="redis://127.0.0.1:7/0", lease_ttl_ms=1500)
    assert [s.name for s in specs] == ["broker-0", "broker-1", "pendingack-0", "pendingack-1",
                                       "coordinator-0", "coordinator-1"]
    b1 = specs[1]
    assert b1.env["STREAMTX_ADVERTISED_URL"] == b1.url == "http://127.0.0.1:9001"
    assert b1.env["STREAMTX_PORT"] == "9001" and b1.env["STREAMTX_MEMBER"] == "broker1"
    assert all(s.env["STREAMTX_REDIS_URL"] == "redis://127.0.0.1:7/0" for s in specs)
    assert all(s.env["STREAMTX_LEASE_TTL_MS"] == "1500" for s in specs)
    # The coordinators share every id (each leased by one of them), the others have none.
    assert specs[5].env["STREAMTX_COORDINATOR_IDS"] == specs[4].env["STREAMTX_COORDINATOR_IDS"] != ""
    assert "STREAMTX_COORDINATOR_IDS" not in b1.env
    assert front_urls(specs) == {"broker": specs[0].url, "pendingack": specs[2].url,
                                 "coordinator": specs[4].url}
    assert len({s.url for s in specs}) == 6


def test_replicas_without_redis_or_none_at_all_are_refused() -> None:
    with pytest.raises(ValueError, match="Redis"):
        service_specs(("broker",), 2, lambda: 1)
    with pytest.raises(ValueError, match="at least 1"):
        service_specs(("broker",), 0, lambda: 1)


def test_names_and_which_is_the_first() -> None:
    assert replica_name("broker", 0, 1) == "broker" and replica_name("broker", 1, 2) == "broker-1"
    assert first_replica("broker") and first_replica("broker-0") and not first_replica("broker-1")
