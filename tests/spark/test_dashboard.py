"""The "Spark job outputs" dashboard against a real Prometheus, fed the way compose feeds it.

One histograms run (the session's shared Spark, small synthetic ledgers: two
transaction logs, a pending-ack log, a topic's partition over three minutes)
pushes to a real Pushgateway; Debian's Prometheus scrapes it with the repo's
scrape config (deploy/prometheus/prometheus.yml's ``spark-jobs`` job, only the
target's address replaced); then every query of every panel is evaluated
through the HTTP API, with the variables expanded as Grafana's "All" would:
each must parse and return data, and every variable must have values.
"""

from __future__ import annotations

import random
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.deploy import dashboards
from tests.support.procs import free_port, stop, wait_for_port
from tests.support.prometheus import Prometheus, binary, prometheus_server

from streamtx.jobs import histograms, synth
from streamtx.records import partition as codec

ROOT = Path(__file__).resolve().parents[2]
BOARD = "spark-jobs.json"
TOPIC = "persistent://public/default/orders"


def _ledgers(root: Path) -> None:
    rng = random.Random(13)
    for cid in (0, 1):
        recs = synth.txn_log_records(cid, 120, rng)
        synth.write_ledger(str(root), f"txnlog/c1/{cid}", list(synth.entries_of(recs, rng, max_batch=32)))
    recs = synth.pending_ack_records(80, rng)
    synth.write_ledger(str(root), f"pendingack/{TOPIC}/billing",
                       list(synth.entries_of(recs, rng, max_batch=16, unbatched=0.2)))
    t0 = 1_700_000_000_000
    batches = [codec.encode_batch([codec.Message(rng.randbytes(rng.randint(10, 3000)), key=f"k{i}")
                                   for i in range(rng.randint(1, 20))], publish_time_ms=t0 + n * 9_000)
               for n in range(20)]  # three minutes of traffic
    synth.write_ledger(str(root), f"topics/{TOPIC}-partition-0", batches)


def _scrape_config(pushgateway: str) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config.pop("rule_files", None)
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "spark-jobs"]
    (static,) = job["static_configs"]
    static["targets"] = [pushgateway]
    static["labels"]["cluster"] = "c1"
    config["scrape_configs"] = [job]
    return config


@pytest.fixture(scope="module")
def pushed(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, float, float]]:
    """The job's outputs pushed and scraped: (prometheus, start, end)."""
    tmp = tmp_path_factory.mktemp("spark-dashboard")
    _ledgers(tmp / "ledgers")
    port = free_port()
    gateway = subprocess.Popen([binary("prometheus-pushgateway"), f"--web.listen-address=127.0.0.1:{port}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc=gateway)
        with prometheus_server(_scrape_config(f"127.0.0.1:{port}"), tmp) as prom:
            start = time.time()
            results = histograms.compute(spark, f"file://{tmp / 'ledgers'}")
            histograms.write(results, str(tmp / "out"), None, f"127.0.0.1:{port}")
            pushed_at = time.time()
            prom.wait_scraped({"spark-jobs"}, since=pushed_at)
            prom.wait_scraped({"spark-jobs"}, since=pushed_at + 1)
            # Range queries step 1 s from ``start``: the window must end a step past the
            # first scrape that saw the push (with a warm JVM the push comes so early that
            # one scrape can satisfy both waits and no step lands after it).
            time.sleep(1.0)
            yield prom, start, time.time()
    finally:
        stop(gateway)


def test_every_panel_query_returns_data(pushed: tuple[Prometheus, float, float]) -> None:
    prom, start, end = pushed
    board = dashboards.load()[BOARD]
    values = {v["name"]: ".+" for v in board["templating"]["list"]}
    checked, empty = dashboards.empty_queries(prom, BOARD, board, values, start, end, "10s")
    assert checked >= 20
    assert empty == []
    # The freshness panel reads this run.
    (expr,) = [e for t, e in dashboards.queries(board) if t == "Since the last successful run"]
    (age,) = prom.api("query", query=dashboards.expand(expr, values, "10s"), time=end)["result"]
    assert 0 <= float(age["value"][1]) < end - start + 5


def test_every_variable_has_values(pushed: tuple[Prometheus, float, float]) -> None:
    prom, start, end = pushed
    assert dashboards.variables_without_values(prom, BOARD, dashboards.load()[BOARD], start, end) == []
    assert prom.api("label/topic/values", **{"match[]": "streamtx_spark_partition_messages"}) == [TOPIC]
