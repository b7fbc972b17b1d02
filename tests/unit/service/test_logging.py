"""The services' log set-up (streamtx.service.serve.configure_logging)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest

from streamtx.service.serve import QUIET_LOGGERS, configure_logging


@pytest.fixture
def restored() -> Iterator[None]:
    levels = {n: logging.getLogger(n).level for n in QUIET_LOGGERS}
    yield
    for n, level in levels.items():
        logging.getLogger(n).setLevel(level)


async def test_a_services_calls_of_its_peers_are_not_logged_one_by_one(
        restored: None, caplog: pytest.LogCaptureFixture) -> None:
    """httpx logs every request at INFO: 244 lines in a 20 s demo (the broker's and the
    pending-ack store's calls; the coordinator and the controller silenced it each alone)."""
    configure_logging()
    caplog.set_level(logging.INFO)  # the root's level; httpx's own stays at WARNING
    async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(200))) as http:
        await http.get("http://peer/v1/x")
    assert [r for r in caplog.records if r.name.startswith(("httpx", "httpcore"))] == []
    assert logging.getLogger("httpx").getEffectiveLevel() == logging.WARNING
