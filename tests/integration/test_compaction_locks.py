"""One compaction run per log at a time (issue 22 item 3): the file lock and the Redis lease of
:mod:`streamtx.jobs.compactlock`, between two runs' lock sets (a real redis-server)."""

from __future__ import annotations

import uuid
from pathlib import Path

from streamtx.jobs.compactlock import LogLocks


def test_a_log_locked_by_one_run_is_refused_to_another_until_released(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    first, second = LogLocks(url), LogLocks(url)
    try:
        assert first.acquire("txnlog/c1/0") and first.held("txnlog/c1/0")
        assert not second.acquire("txnlog/c1/0") and not second.held("txnlog/c1/0")
        assert second.acquire("txnlog/c1/1")  # another log is free
        first.close()
        assert second.acquire("txnlog/c1/0")
    finally:
        first.close()
        second.close()


def test_a_redis_lease_keeps_other_runs_out_on_any_store(redis_url: str) -> None:
    url, log = "kafka://nowhere:9092", f"txnlog/c1/{uuid.uuid4().hex}"  # no file to lock: the lease alone
    first = LogLocks(url, redis_url=redis_url, lease_ttl_ms=3_000)
    second = LogLocks(url, redis_url=redis_url, lease_ttl_ms=3_000)
    try:
        assert first.acquire(log) and first.held(log)
        assert not second.acquire(log) and not second.held(log)
        first.close()  # released, not left to expire
        assert not first.held(log)
        assert second.acquire(log) and second.held(log)
    finally:
        first.close()
        second.close()
