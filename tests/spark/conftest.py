"""One local Spark session for every Spark test of the run (it takes ~10 s to start)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from streamtx.jobs.session import get_session

    session = get_session("local[2]", "streamtx-tests", shuffle_partitions=2)
    yield session
    session.stop()
