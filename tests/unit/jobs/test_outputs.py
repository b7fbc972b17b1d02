"""The jobs' Prometheus outputs: the textfile passes promtool, the push lands in a real Pushgateway."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest

from streamtx.jobs import outputs
from tests.support.procs import free_port, stop, wait_for_port


def _results() -> outputs.Results:
    res = outputs.Results("histograms")
    labels = (("cluster", "c1"), ("coordinator_id", "0"))
    res.histograms["tc_log_records_per_entry"] = {
        labels: outputs.Hist((10.0, 50.0, 100.0, 200.0, 500.0, 1000.0), [3, 2, 0, 0, 1, 0, 1], 2100.0)}
    res.gauges["txns"] = {(*labels, ("state", "COMMITTED")): 5.0}
    return res


def test_the_textfile_is_valid_and_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "streamtx_spark_histograms.prom"
    path.write_text("garbage from an earlier run\n")
    outputs.write_prom(_results(), str(path))
    text = path.read_text()
    name, labels = "streamtx_spark_tc_log_records_per_entry", 'cluster="c1",coordinator_id="0"'
    assert f'{name}_bucket{{{labels},le="50.0"}} 5.0' in text
    assert f"{name}_count{{{labels}}} 7.0" in text
    assert "garbage" not in text and not list(tmp_path.glob("*.tmp*"))
    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
        assert "error" not in (check.stdout + check.stderr).lower(), check.stdout + check.stderr


@pytest.mark.skipif(not shutil.which("prometheus-pushgateway"), reason="make setup installs it (apt)")
def test_push_to_a_pushgateway(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(["prometheus-pushgateway", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc=proc)
        outputs.push(_results(), f"127.0.0.1:{port}")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            body = r.read().decode()
        txns = [line for line in body.splitlines() if line.startswith("streamtx_spark_txns{")]
        assert len(txns) == 1 and txns[0].endswith(" 5"), txns
        assert 'job="streamtx_spark_histograms"' in txns[0], txns
    finally:
        stop(proc)
