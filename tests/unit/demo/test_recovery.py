"""Recovery after a kill, from hand-made histories (streamtx.demo.recovery; issue 25)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from streamtx.demo.recovery import (
    Commit,
    Kill,
    analyse,
    bench_line,
    kill_stall_s,
    kind_of,
    recovery_s,
    render,
    whole_since,
)
from streamtx.demo.verify import load_commits


def c(opened: float, at: float, *partitions: int) -> Commit:
    return Commit(opened, at, frozenset(partitions))


def test_recovery_waits_for_every_partition_and_ignores_transactions_opened_before_the_kill() -> None:
    commits = [
        c(99.0, 100.5, 0, 1, 2, 3),  # opened before the kill at 100: proves nothing
        c(100.2, 101.0, 0, 1),  # the other worker, at once
        c(103.0, 104.5, 2, 3),  # the killed worker's partitions, after its restart
        c(104.0, 105.0, 0, 1, 2, 3),
    ]
    assert recovery_s(Kill("worker-1", 100.0), commits) == 4.5
    assert whole_since(100.0, commits[:2]) == {0, 1}
    assert recovery_s(Kill("broker", 110.0), commits) is None  # nothing opened after it committed


def test_analyse_groups_by_kind_splits_restart_and_rejoin_and_finds_the_longest_stalls() -> None:
    kills = [Kill("broker", 10.0, ready_at=11.0), Kill("worker-0", 20.0, ready_at=20.5),
             Kill("worker-1", 30.0), Kill("coordinator", 40.0)]
    commits = [c(9.0, 9.5, 0, 1), c(11.5, 12.0, 0, 1), c(20.1, 20.2, 1), c(21.0, 23.0, 0),
               c(30.5, 31.0, 0, 1), c(31.0, 31.5, 0, 1)]
    report = analyse(kills, commits)
    assert kind_of("worker-1") == "worker" and kind_of("pendingack") == "pendingack"
    assert report.by_kind["broker"].recovery_ms == [2000.0]
    assert report.by_kind["broker"].restart_ms == [1000.0]
    assert report.by_kind["broker"].rejoin_ms == [1000.0]
    assert report.by_kind["worker"].recovery_ms == [3000.0, 1000.0]
    assert report.by_kind["worker"].restart_ms == [500.0]  # the second one's ready time is unknown
    assert report.by_kind["coordinator"].recovery_ms == [None]
    assert math.isinf(report.p99_ms("coordinator"))  # never recovered: infinitely slow, not absent
    assert math.isnan(report.p99_ms("pendingack"))  # not killed
    assert report.p99_ms("worker") == 3000.0
    assert report.longest_stall_ms == 8200.0  # 12.0 to 20.2
    assert report.longest_partition_stall_ms == 11000.0  # partition 0: 12.0 to 23.0
    table = render(report)
    assert "kill -9 broker" in table and "never" in table and "pendingack" not in table


def test_bench_line_has_the_exact_format_of_the_issue() -> None:
    names = ("broker", "coordinator", "pendingack", "worker-0")
    kills = [Kill(name, 10.0 * i) for i, name in enumerate(names)]
    commits = [c(10.0 * i + 0.1, 10.0 * i + 1.234, 0) for i in range(4)]
    line = bench_line(analyse(kills, commits))
    assert re.fullmatch(r"bench recovery: broker_p99_ms=\d+ coordinator_p99_ms=\d+ pendingack_p99_ms=\d+ "
                        r"worker_p99_ms=\d+ longest_stall_ms=\d+", line), line
    assert "broker_p99_ms=1234 " in line and line.endswith("longest_stall_ms=10000")


def test_load_commits_reads_open_times_and_partitions_from_the_workers_logs(tmp_path: Path) -> None:
    lines = [
        {"txn": "1:1", "o": "open", "t": 1.0},
        {"txn": "1:1", "o": "wrote", "t": 1.5, "n": 3},
        {"txn": "1:1", "o": "committed", "t": 2.0, "n": 3, "p": [0, 5]},
        {"txn": "1:2", "o": "open", "t": 2.0},
        {"txn": "1:2", "o": "aborted", "t": 2.5, "n": 1, "why": "x", "r": [[0, 4]]},
        {"txn": "1:0", "o": "committed", "t": 3.0, "n": -1, "why": "orphan of a previous life"},
    ]
    (tmp_path / "worker-0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"txn": "torn')
    assert load_commits(tmp_path) == [c(1.0, 2.0, 0, 5)]


def test_replicas_are_grouped_by_kind_and_their_line_has_its_own_prefix() -> None:
    # A replica's kills count for its kind (before: "broker-1" was a kind of its own, and the
    # bench line's broker_p99_ms read "-" after broker replicas were killed).
    kills = [Kill("broker-1", 10.0), Kill("coordinator-1", 20.0), Kill("pendingack-1", 30.0),
             Kill("worker-0", 40.0)]
    commits = [c(10.0 * i + 0.1, 10.0 * i + 0.5, 0) for i in range(1, 5)]
    assert kind_of("broker-1") == "broker" and kind_of("coordinator-12") == "coordinator"
    line = bench_line(analyse(kills, commits), "bench recovery replicas")
    assert re.fullmatch(r"bench recovery replicas: broker_p99_ms=500 coordinator_p99_ms=500 "
                        r"pendingack_p99_ms=500 worker_p99_ms=500 longest_stall_ms=10000", line), line


def test_a_kills_stall_is_the_longest_stretch_without_a_commit_until_the_job_is_whole_again() -> None:
    commits = [c(8.0, 9.8, 0, 1), c(9.9, 10.4, 0), c(10.5, 13.0, 0, 1), c(13.0, 13.2, 0, 1), c(15.0, 19.0, 0)]
    # 9.8 (last before) -> 10.4 -> 13.0 (whole again): 2.6 s; the 5.8 s gap after it is not this kill's.
    assert kill_stall_s(Kill("broker-1", 10.0), commits, recovery_s(Kill("broker-1", 10.0), commits)) == \
        pytest.approx(2.6)
    assert math.isinf(kill_stall_s(Kill("broker-1", 30.0), commits, None))  # never committed again
    report = analyse([Kill("broker-1", 10.0), Kill("coordinator-1", 30.0)], commits)
    assert report.by_kind["broker"].stall_ms == [pytest.approx(2600.0)]
    assert report.by_kind["coordinator"].stall_ms == [math.inf]
    assert "stall max" in render(report).splitlines()[0]
    assert render(report).splitlines()[1].split()[-1] == "2600"
