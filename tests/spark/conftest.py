"""One local Spark session for every Spark test of the run (it takes ~10 s to start).

py4j leaves its gateway sockets to the garbage collector, which pytest's
``filterwarnings = error`` turns into failures wherever the collection lands.
So Spark tests ignore ResourceWarning, and the session is stopped, and the
garbage collected under the same filter, right after the last Spark test,
before any other test runs.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_here = Path(__file__).parent
# Small inputs: the JVM's start and its JIT are most of the CPU a test run costs
# (get_session already runs a local JVM on C1 with the serial collector).
_test_conf = {
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:CICompilerCount=1",
    "spark.default.parallelism": "2",
    "spark.driver.memory": "1g",
}
_session: list[Any] = []


def _is_spark_test(item: pytest.Item | None) -> bool:
    return item is not None and _here in Path(str(item.fspath)).parents


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _is_spark_test(item):
            item.add_marker(pytest.mark.filterwarnings("ignore::ResourceWarning"))
            item.add_marker(pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"))


def _stop() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        while _session:
            _session.pop().stop()
        gc.collect()


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if _is_spark_test(item) and not _is_spark_test(nextitem):
        _stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    if not _session:
        from streamtx.jobs.session import get_session

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            _session.append(get_session("local[2]", "streamtx-tests", shuffle_partitions=2, conf=_test_conf))
    yield _session[0]
    _stop()
