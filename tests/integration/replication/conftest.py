"""Three clusters a, b, c as real processes (12 services; file ledgers, c on Kafka), started once."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import kafka_url
from tests.support.geo import Geo

BROKER_ENV = {"STREAMTX_ACK_TIMEOUT_MS": "60000"}
# Snapshots every 200 ms, dropped after 3 s, at most 3 cached per subscription.
SNAPSHOTS_ENV = {
    "STREAMTX_REPLICATED_SUBSCRIPTIONS_SNAPSHOT_FREQUENCY_MS": "200",
    "STREAMTX_REPLICATED_SUBSCRIPTIONS_SNAPSHOT_TIMEOUT_S": "3",
    "STREAMTX_REPLICATED_SUBSCRIPTIONS_SNAPSHOT_MAX_CACHED_PER_SUBSCRIPTION": "3",
}


@pytest.fixture(scope="package")
def geo(tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str) -> Iterator[Geo]:
    """The clusters, started once for every module of this package.

    ``a`` and ``b`` keep their ledgers in files, ``c`` on the Kafka backend (the
    session's tansu broker): every test crosses both backends at no extra start-up.
    """
    root = tmp_path_factory.mktemp("geo")

    def ledger_url(name: str) -> str:
        return kafka_url(kafka_bootstrap) if name == "c" else f"file://{root / name}"

    with Geo(root, ("a", "b", "c"), env=BROKER_ENV, replication_env=SNAPSHOTS_ENV,
             ledger_url=ledger_url) as running:
        yield running


@pytest.fixture
def clusters(geo: Geo) -> Geo:
    """The module's clusters, every service up (a test that failed mid-crash may have left one down)."""
    for suite in geo.suites.values():
        suite.ensure_running()
    return geo


def replicate(geo: Geo, namespace: str, clusters: list[str]) -> None:
    """Give ``namespace`` the replication list ``clusters`` in each of them (as an operator would)."""
    for name in clusters:
        r = httpx.post(f"{geo.url(name)}/admin/v2/namespaces/{namespace}/replication", json=clusters,
                       timeout=30)
        assert r.status_code == 200, r.text


def create_topic(geo: Geo, cluster: str, topic: str, partitions: int) -> None:
    r = httpx.put(f"{geo.url(cluster)}/admin/v2/persistent/{topic}/partitions",
                  json={"partitions": partitions}, timeout=30)
    assert r.status_code == 200, r.text


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def decoded(message: dict[str, Any]) -> str:
    return base64.b64decode(message["value"]).decode()


async def get(url: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.get(url)
