"""The whole suite as real processes, once per test module and ledger backend.

Parametrized over the file ledger and the kafka ledger (the session's tansu
broker). The three services use distinct ledger names, so one kafka topic
prefix per suite is enough; tests keep apart by naming their own topics.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from tests.conftest import kafka_url
from tests.support.suite import Suite

# Short enough for the timeout, snapshot and crash cases to finish quickly;
# the ack timeout long enough that nothing is redelivered behind a test's back.
BROKER_ENV = {
    "STREAMTX_ACK_TIMEOUT_MS": "60000",
    "STREAMTX_SNAPSHOT_INTERVAL_S": "0.2",
    "STREAMTX_SNAPSHOT_EVERY_OPS": "5",
    "STREAMTX_SNAPSHOT_SEGMENT_SIZE": "3",
}
PENDINGACK_ENV = {"STREAMTX_BROKER_END_TIMEOUT_S": "3"}
COORDINATOR_ENV = {
    "STREAMTX_TIMEOUT_CHECK_INTERVAL_MS": "100",
    "STREAMTX_FANOUT_MAX_BACKOFF_MS": "300",
}


@pytest.fixture(scope="module", params=["file", "kafka"])
def suite(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    tmp = tmp_path_factory.mktemp(f"suite-{request.param}")
    if request.param == "file":
        url = f"file://{tmp / 'ledgers'}"
    else:
        url = kafka_url(request.getfixturevalue("kafka_bootstrap"))
    with Suite(url, tmp, broker_env=BROKER_ENV, pendingack_env=PENDINGACK_ENV,
               coordinator_env=COORDINATOR_ENV) as running:
        yield running


@pytest.fixture
def running(suite: Suite) -> Suite:
    """The module's suite, every service up (a test that failed mid-crash may have left one down)."""
    suite.ensure_running()
    return suite


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    """A plain HTTP client (follows no redirect: tests see the 307s)."""
    async with httpx.AsyncClient(timeout=10.0) as client:
        yield client
