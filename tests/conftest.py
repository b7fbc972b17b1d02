"""Session-wide fixtures: the real parts tests run against."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from streamtx.ledger import LedgerFactory, open_ledger_factory
from tests.support.procs import redis_server, tansu_broker


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """One tansu broker for the whole session (memory-only, so topics are named per test)."""
    with tansu_broker() as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """One redis-server for the whole session (tests use keys of their own)."""
    with redis_server() as url:
        yield url


def kafka_url(bootstrap: str) -> str:
    # tansu refuses aiokafka's idempotent producer and closes on DeleteRecords.
    prefix = f"t{uuid.uuid4().hex[:8]}."
    return f"kafka://{bootstrap}?idempotence=false&delete_records=false&topic_prefix={prefix}"


@pytest.fixture(params=["memory", "file", "kafka"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A ledger URL for each backend; the kafka one starts the session's tansu broker."""
    if request.param == "memory":
        return "memory://"
    if request.param == "file":
        return f"file://{tmp_path / 'ledgers'}"
    return kafka_url(request.getfixturevalue("kafka_bootstrap"))


@pytest.fixture
async def ledgers(ledger_url: str) -> AsyncIterator[LedgerFactory]:
    ledgers = open_ledger_factory(ledger_url)
    yield ledgers
    await ledgers.close()
