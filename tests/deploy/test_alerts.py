"""The alert rules: `promtool check rules`, and `promtool test rules` on tests/deploy/alerts_test.yml."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.support.prometheus import binary

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts" / "streamtx" / "files" / "prometheus" / "alerts.yml"
UNIT_TESTS = Path(__file__).with_name("alerts_test.yml")

#: What operators page on (issue 13); each must have a rule and a unit test that fires it.
PAGES = {
    "StreamtxCoordinatorNotReady", "StreamtxTxnStuckCommitting", "StreamtxMaxReadPositionStuck",
    "StreamtxPendingAckBacklogGrowing", "StreamtxReplicationBacklog", "StreamtxReplicationLag",
    "StreamtxHigh5xxRate", "StreamtxLedgerAppendErrors",
}


def test_promtool_check_rules() -> None:
    done = subprocess.run([binary("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_test_rules() -> None:
    done = subprocess.run([binary("promtool"), "test", "rules", str(UNIT_TESTS)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_is_there_and_fired_by_a_unit_test() -> None:
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    names = {r["alert"] for r in rules}
    assert names >= PAGES
    fired = {
        case["alertname"]
        for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert fired == names
    for rule in rules:
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]
