"""docker-compose.yml, checked offline: the compose specification's JSON schema
(vendored: deploy/compose/compose-spec.json), every mounted file, and that its
pieces agree (scrape targets, rules, dashboards, settings, auth)."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from streamtx.cli import SERVICES
from tests.support.prometheus import binary

ROOT = Path(__file__).resolve().parents[2]
STREAMTX = ("coordinator", "broker", "pendingack", "replication")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = json.loads((ROOT / "deploy" / "compose" / "compose-spec.json").read_text())
    # The spec names draft 07 (its $schema URL lacks the "#" jsonschema looks up).
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def test_matches_the_compose_specification(compose: dict[str, Any], validator: Any) -> None:
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []


def test_the_schema_check_bites(compose: dict[str, Any], validator: Any) -> None:
    broken = copy.deepcopy(compose)
    broken["services"]["broker"]["ports"] = 8082
    broken["services"]["grafana"]["restart_policy"] = "always"
    assert len(list(validator.iter_errors(broken))) == 2


def _binds(service: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith((".", "/")):
            out.append((source, target))
    return out


def test_every_mounted_file_exists(compose: dict[str, Any]) -> None:
    binds = [b for s in compose["services"].values() for b in _binds(s)]
    assert len(binds) >= 4
    for source, _ in binds:
        assert (ROOT / source).exists(), source
    named = {v.split(":")[0] for s in compose["services"].values() for v in s.get("volumes", [])
             if not v.startswith((".", "/"))}
    assert named <= set(compose["volumes"])


def test_services_run_on_kafka_with_auth_on(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"kafka", "redis", "prometheus", "grafana", *STREAMTX} <= set(services)
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft
    for name in STREAMTX:
        svc = services[name]
        env = svc["environment"]
        assert svc["command"] == [name] and name in SERVICES
        assert svc["build"]["target"] == "runtime" and svc["read_only"] and svc["user"] == "10001"
        assert all(k.startswith("STREAMTX_") for k in env), name
        assert env["STREAMTX_LEDGER_URL"] == "kafka://kafka:9092"
        assert env["STREAMTX_ADMIN_TOKEN"].startswith("${STREAMTX_ADMIN_TOKEN:?")
        assert env["STREAMTX_CLIENT_TOKEN"].startswith("${STREAMTX_CLIENT_TOKEN:?")
        assert env["STREAMTX_SERVICE_TOKEN"].startswith("${STREAMTX_SERVICE_TOKEN:?")
        for peer in STREAMTX:
            assert env[f"STREAMTX_{peer.upper()}_URL"] == f"http://{peer}:{env['STREAMTX_PORT']}"
        assert svc["depends_on"]["kafka"]["condition"] == "service_healthy"
    tc = services["coordinator"]
    assert tc["environment"]["STREAMTX_REDIS_URL"] == "redis://redis:6379/0"
    assert tc["depends_on"]["redis"]["condition"] == "service_healthy"
    assert {"broker", "pendingack"} <= set(tc["depends_on"])  # participants first
    spark = services["spark-histograms"]
    assert spark["profiles"] == ["spark"] and spark["build"]["target"] == "spark"
    push = spark["command"][spark["command"].index("--pushgateway") + 1]
    assert push == "pushgateway:9091" and "pushgateway" in services
    prom = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    assert [push] in [s["targets"] for j in prom["scrape_configs"] for s in j["static_configs"]]
    assert all("profiles" not in s for n, s in services.items() if n != "spark-histograms")


def test_prometheus_scrapes_every_service_with_the_repo_rules(compose: dict[str, Any]) -> None:
    prom = compose["services"]["prometheus"]
    mounts = dict(_binds(prom))
    config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "streamtx"]
    targets = {t: s["labels"] for s in job["static_configs"] for t in s["targets"]}
    assert set(targets) == {f"{name}:8080" for name in STREAMTX}
    assert all(lab["cluster"] == "compose" and lab["service"] in SERVICES for lab in targets.values())
    assert mounts["./deploy/prometheus/prometheus.yml"] == "/etc/prometheus/prometheus.yml"
    rules_dir = mounts["./charts/streamtx/files/prometheus"]
    (pattern,) = config["rule_files"]
    assert pattern.startswith(rules_dir + "/")
    assert list((ROOT / "charts/streamtx/files/prometheus").glob(Path(pattern).name))


def test_grafana_is_provisioned_with_the_datasource_and_the_dashboards(compose: dict[str, Any]) -> None:
    mounts = dict(_binds(compose["services"]["grafana"]))
    provisioning = ROOT / "deploy/grafana/provisioning"
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    (source,) = yaml.safe_load((provisioning / "datasources/prometheus.yml").read_text())["datasources"]
    assert source["type"] == "prometheus" and source["isDefault"]
    assert source["url"] == "http://prometheus:9090"
    (provider,) = yaml.safe_load((provisioning / "dashboards/streamtx.yml").read_text())["providers"]
    assert mounts["./charts/streamtx/files/dashboards"] == provider["options"]["path"]
    assert list((ROOT / "charts/streamtx/files/dashboards").glob("*.json"))


def test_promtool_checks_the_scrape_config(tmp_path: Path) -> None:
    """`promtool check config`, with the rules where compose mounts them (here: the repo's)."""
    config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    rules = ROOT / "charts/streamtx/files/prometheus"
    config["rule_files"] = [str(rules / Path(pattern).name) for pattern in config["rule_files"]]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run([binary("promtool"), "check", "config", str(path)], capture_output=True, text=True)
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "SUCCESS" in said and "rules found" in said, said
