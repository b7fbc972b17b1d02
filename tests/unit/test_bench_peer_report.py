"""bench/peer.py's figures: medians over rounds, CPU per record per process, the last line (issue 23)."""

from __future__ import annotations

import math
import re

from bench.peer_report import (
    Figures,
    Usage,
    cpu_delta,
    cpu_table,
    last_line,
    median,
    median_figures,
    median_usages,
    p99_by_tenth,
)

LINE = re.compile(
    r"^bench peer: backlog_ratio=\S+ streamtx_mb_per_s=\S+ kafka_mb_per_s=\S+ live_p99_ms=\S+ "
    r"kafka_live_p99_ms=\S+ streamtx_cpu_us_per_record=\S+ kafka_cpu_us_per_record=\S+$")


def test_median_of_rounds_leaves_out_a_round_without_the_figure() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert median([5.0, math.nan, 1.0]) == 3.0
    assert math.isnan(median([math.nan])) and math.isnan(median([]))


def test_cpu_delta_counts_from_the_first_snapshot_and_a_new_process_from_zero() -> None:
    before = {"broker": 10.0, "worker-0": 1.0}
    after = {"broker": 12.5, "worker-0": 0.5, "worker-1": 2.0}  # worker-0 restarted, worker-1 new
    assert cpu_delta(before, after) == {"broker": 2.5, "worker-0": 0.0, "worker-1": 2.0}


def test_us_per_record_per_process_and_in_total() -> None:
    u = Usage("streamtx", "backlog", 1_000_000, {"broker": 9.0, "probe": 6.0})
    assert u.us_per_record("broker") == 9.0
    assert u.us_per_record() == 15.0
    assert math.isnan(u.us_per_record("tansu"))
    assert math.isnan(Usage("kafka", "live", 0, {"tansu": 1.0}).us_per_record())


def test_cpu_table_has_a_row_per_process_and_a_total_per_system() -> None:
    table = cpu_table([
        Usage("streamtx", "backlog", 1000, {"broker": 0.009, "worker-0": 0.008}),
        Usage("kafka", "backlog", 1000, {"tansu": 0.002}),
        Usage("streamtx", "live", 500, {"broker": 0.001, "worker-0": 0.002}),
    ])
    rows = {line[:22].strip(): line[22:].split() for line in table.splitlines()[1:]}
    assert rows["streamtx broker"] == ["0.01", "9.0", "0.00", "2.0"]
    assert rows["streamtx total"] == ["0.02", "17.0", "0.00", "6.0"]
    assert rows["kafka tansu"] == ["0.00", "2.0", "-", "-"]  # no live run of kafka
    assert list(rows) == ["streamtx broker", "streamtx worker-0", "streamtx total",
                          "kafka tansu", "kafka total"]


def test_median_usages_take_each_process_median_per_record() -> None:
    rounds = [[Usage("kafka", "backlog", 1000, {"tansu": t, "kworker-0": w})]
              for t, w in ((0.010, 0.004), (0.030, 0.002), (0.020, 0.100))]
    (m,) = median_usages(rounds)
    assert m.records == 1000
    assert math.isclose(m.us_per_record("tansu"), 20.0) and math.isclose(m.us_per_record("kworker-0"), 4.0)


def test_p99_by_tenth_orders_by_send_time() -> None:
    sent = list(range(100))[::-1]  # handed over newest first
    e2e = [float(s) for s in sent]  # latency grows with send time
    tenths = p99_by_tenth(sent, e2e)
    assert tenths == [9.0, 19.0, 29.0, 39.0, 49.0, 59.0, 69.0, 79.0, 89.0, 99.0]


def test_figures_ratio_and_medians_of_rounds() -> None:
    rounds = [Figures.of_round(8.0, 20.0, 900, 700, 37.0, 20.0),
              Figures.of_round(9.0, 18.0, 800, 800, 35.0, 22.0),
              Figures.of_round(10.0, 40.0, 1000, 600, 30.0, 21.0)]
    assert [f.backlog_ratio for f in rounds] == [0.4, 0.5, 0.25]
    m = median_figures(rounds)
    assert (m.backlog_ratio, m.streamtx_mb_per_s, m.kafka_mb_per_s) == (0.4, 9.0, 20.0)
    assert (m.live_p99_ms, m.kafka_live_p99_ms) == (900, 700)
    assert (m.streamtx_cpu_us_per_record, m.kafka_cpu_us_per_record) == (35.0, 21.0)


def test_last_line_is_the_issues_format() -> None:
    line = last_line(Figures.of_round(8.853, 27.861, 912.4, 687.6, 37.04, 26.06))
    assert line == ("bench peer: backlog_ratio=0.32 streamtx_mb_per_s=8.85 kafka_mb_per_s=27.86 "
                    "live_p99_ms=912 kafka_live_p99_ms=688 streamtx_cpu_us_per_record=37.0 "
                    "kafka_cpu_us_per_record=26.1")
    assert LINE.match(line)
    assert LINE.match(last_line(Figures.of_round(math.nan, 5.0, math.nan, 1.0, math.nan, 2.0)))
